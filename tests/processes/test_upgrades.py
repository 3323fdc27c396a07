"""Upgrades in any order (issue 43): this release beside the previous one, with real processes.

The previous release is built from this repository's history: :data:`PREVIOUS_RELEASE`
(the one place that names it; each release moves it to the release before it) is
exported with ``git archive`` and installed in a virtualenv of its own, once per test
session (``python -m venv``, ``pip install -e``; pip's configured index and
``PIP_FIND_LINKS`` serve it offline). Its processes run from that copy, this release's
from the checkout, against one database.

Both orders of a rolling upgrade, each all the way through, with jobs enqueued by both
releases' producers and an every-second schedule throughout:

- **workers first**: old leader, cleaner and worker; a new worker joins and the old one
  stops (the old leader with new workers only); then the leader and the cleaner;
- **leader first**: old processes; a new recruiter and cleaner take over (the new leader
  with old workers only); then the workers.

At each step the jobs of a batch are all done within a bound; at the end every job ran
exactly once (one attempt, one start in the ledger), the schedule fired every slot once,
``recruiter status`` warned that releases were mixed while they were and not after, and
the previous release's ``recruiter status`` still read what this one writes.

Without git history or a way to build the environment the module skips, in one line (.ci/run
deepens a shallow clone first).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from recruiter import Recruiter
from recruiter.cli.main import main
from recruiter.domain.versions import RELEASE, WORKS_BESIDE
from tests.conftest import REPO, wait_for
from tests.integration.test_releases import TOO_OLD, lease
from tests.processes.conftest import FAST_CLEANER, FAST_RECRUITER, FAST_WORKER, Proc, Processes
from tests.workables import Record

# The previous release's environment is built in the first test's setup (about a minute on an idle machine).
pytestmark = [pytest.mark.processes, pytest.mark.timeout(900)]

# The release before this one (CHANGELOG.md), as a commit of this repository: the one place it is named.
PREVIOUS_RELEASE = "a125777"
# How this release's status names it: the release it records.
PREVIOUS_SHOWN = WORKS_BESIDE
GROUP = "upgrade"
BATCH = 8
DONE_WITHIN_S = 60.0
TICK = timedelta(seconds=1)


@dataclass(frozen=True)
class Previous:
    python: Path
    source: Path


def _unavailable(reason: str) -> None:
    """Skip, in one line that says why (a shallow clone, no package index): .ci/run deepens a shallow
    clone first, so on CI the test runs; where it cannot, the skip says so in the summary."""
    pytest.skip(f"the previous release ({PREVIOUS_RELEASE}) cannot be built here: {reason}")


def _run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, timeout=600, check=False)


@pytest.fixture(scope="session")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Previous:
    """The previous release, exported from git and installed in its own virtualenv (once per session)."""
    exported = _run("git", "-C", REPO, "archive", "--format=tar", PREVIOUS_RELEASE)
    if exported.returncode != 0:
        _unavailable(f"git archive failed ({exported.stderr.decode(errors='replace').strip()[:200]}); "
                     "a clone with its full history is needed")
    root = tmp_path_factory.mktemp("previous-release")
    source, venv = root / "source", root / "venv"
    with tarfile.open(fileobj=BytesIO(exported.stdout)) as tar:
        tar.extractall(source, filter="data")
    for step in ((sys.executable, "-m", "venv", venv),
                 (venv / "bin" / "python", "-m", "pip", "install", "--quiet", "-e", source)):
        done = _run(*step)
        if done.returncode != 0:
            _unavailable(f"{' '.join(map(str, step[:4]))}... failed: "
                         f"{done.stderr.decode(errors='replace').strip().splitlines()[-1:]}")
    return Previous(venv / "bin" / "python", source)


def _env(pythonpath: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RECRUITER_MONGODB_URI", "MONGODB_URI", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(pythonpath)
    return env


def start_previous(processes: Processes, old: Previous, name: str, *args: str) -> Proc:
    """A process of the previous release: its interpreter, its code (``tests.workables`` too), its directory."""
    log_path = processes.log_dir / f"old-{name}-{len(processes.started)}.log"
    with open(log_path, "wb") as out:
        popen = subprocess.Popen([str(old.python), "-m", "recruiter.cli", *args, "--target", processes.db_uri,
                                  "--log-format", "json"], stdout=out, stderr=subprocess.STDOUT, cwd=old.source,
                                 env=_env(old.source))
    proc = Proc(f"old-{name}", popen, log_path)
    processes.started.append(proc)
    return proc


@dataclass
class Cluster:
    """One process of each role, of either release."""

    processes: Processes
    old: Previous
    db: Any
    db_uri: str
    recruiter: Proc | None = None
    cleaner: Proc | None = None
    worker: Proc | None = None
    enqueued: int = 0
    began: float = field(default_factory=time.monotonic)
    first_slot: Any = None  # the schedule's first slot

    def start(self, role: str, new: bool) -> Proc:
        worker = ("--group", GROUP, "--concurrency", "2", "--id", f"{'new' if new else 'old'}-{self.enqueued}")
        args = {"recruiter": ("start", *FAST_RECRUITER), "cleaner": ("cleaner", "start", *FAST_CLEANER),
                "worker": ("worker", "start", *FAST_WORKER, *worker)}[role]
        proc = (self.processes.start(role, *args) if new else start_previous(self.processes, self.old, role, *args))
        return proc

    def replace(self, role: str) -> None:
        """Start the new release's ``role`` process, then stop the old one (SIGTERM: a graceful stop)."""
        print(f"{time.monotonic() - self.began:6.1f}s replacing the {role}")
        old: Proc = getattr(self, role)
        setattr(self, role, self.start(role, new=True))
        if role == "worker":
            wait_for(lambda: self.db.roster.count_documents({"_id": {"$regex": "^new-"}}) > 0, timeout_s=30,
                     message="the new worker registered")
        old.signal(signal.SIGTERM)
        assert old.wait(30) == 0, old.log()[-2000:]

    def enqueue(self, *, by_old: bool, sleep_s: float = 0.0) -> None:
        """A batch of :data:`BATCH` jobs, by the previous release's producer or this one's."""
        first, self.enqueued = self.enqueued, self.enqueued + BATCH
        if not by_old:
            with Recruiter.connect(self.db_uri) as rec:
                rec.enqueue_many([Record(self.db_uri, n, sleep_s).as_job_of(rec).in_group(GROUP)
                                  for n in range(first, self.enqueued)])
            return
        script = ("import sys\nfrom recruiter import Recruiter\nfrom tests.workables import Record\n"
                  "uri, first, last, sleep_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])\n"
                  "with Recruiter.connect(uri) as rec:\n"
                  "    rec.enqueue_many([Record(uri, n, sleep_s).as_job_of(rec).in_group('upgrade')\n"
                  "                      for n in range(first, last)])\n")
        done = subprocess.run([str(self.old.python), "-c", script, self.db_uri, str(first), str(self.enqueued),
                               str(sleep_s)], cwd=self.old.source, env=_env(self.old.source), capture_output=True,
                              timeout=60, check=False)
        assert done.returncode == 0, done.stderr.decode(errors="replace")

    def all_done(self) -> None:
        print(f"{time.monotonic() - self.began:6.1f}s waiting for {self.enqueued} jobs")
        wait_for(lambda: self.db.archived.count_documents({"workable.parameters.n": {"$exists": True},
                                                          "schedule": {"$exists": False}}) == self.enqueued,
                 timeout_s=DONE_WITHIN_S, message=f"the {self.enqueued} jobs enqueued so far done")

    def status(self, old: bool = False) -> str:
        """``recruiter status`` of this release (in this process), or of the previous one (its own)."""
        if not old:
            result = CliRunner().invoke(main, ["status", "--target", self.db_uri], catch_exceptions=False)
            assert result.exit_code == 0, result.output
            return result.output
        done = subprocess.run([str(self.old.python), "-m", "recruiter.cli", "status", "--target", self.db_uri],
                              cwd=self.old.source, env=_env(self.old.source), capture_output=True, timeout=120,
                              check=False)
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        return done.stdout.decode()


@pytest.fixture
def cluster(processes: Processes, previous: Previous, db: Any, db_uri: str) -> Cluster:
    with Recruiter.connect(db_uri) as rec:
        rec.schedule("tick", every="1s", overlap="allow", catch_up="all",
                     job=Record(db_uri, -1).as_job_of(rec).in_group(GROUP))
    c = Cluster(processes, previous, db, db_uri, first_slot=db.schedules.find_one({"_id": "tick"})["next_slot"])
    c.recruiter, c.cleaner, c.worker = (c.start(role, new=False) for role in ("recruiter", "cleaner", "worker"))
    return c


def releases_line(status: str) -> str:
    found = re.search(r"^releases: +(.*)$", status, flags=re.M)
    assert found, status
    return found.group(1)


def assert_mixed(c: Cluster) -> None:
    status = c.status()
    assert "warning:   releases are mixed" in status, status
    assert RELEASE in releases_line(status), status
    assert PREVIOUS_SHOWN in releases_line(status), status
    # The previous release's CLI reads what this one writes.
    assert "workers:" in c.status(old=True)


def assert_once(c: Cluster) -> None:
    """Every job of the batches ran exactly once; the schedule fired every slot once."""
    c.db.schedules.update_one({"_id": "tick"}, {"$set": {"paused": True, "next_fire_at": None}})
    wait_for(lambda: c.db.scheduled.count_documents({}) == 0, timeout_s=DONE_WITHIN_S, message="nothing left")
    jobs = list(c.db.archived.find({"schedule": {"$exists": False}}))
    assert sorted(d["workable"]["parameters"]["n"] for d in jobs) == list(range(c.enqueued))
    assert Counter(d["why"] for d in jobs) == {"done": c.enqueued}
    assert all(d["attempts"] == 1 and len(d["executions"]) == 1 for d in jobs), jobs
    starts = Counter(e["n"] for e in c.db.ledger.find({"event": "start", "n": {"$gte": 0}}))
    assert starts == dict.fromkeys(range(c.enqueued), 1)
    schedule = c.db.schedules.find_one({"_id": "tick"})
    slots = [d["schedule"]["slot"] for d in c.db.archived.find({"schedule.name": "tick"})]
    assert [s for s, n in Counter(slots).items() if n > 1] == [], "slots fired twice"
    expected = [c.first_slot + k * TICK for k in range((schedule["next_slot"] - c.first_slot) // TICK)]
    assert set(slots) <= set(expected)
    # A slot not fired is one the catch-up skipped, counted (before the first leader ran, at most).
    assert len(set(expected) - set(slots)) == schedule["skipped"], (sorted(slots), schedule)
    assert len(slots) > 5


def test_workers_first_then_the_leader(cluster: Cluster) -> None:
    c = cluster
    c.enqueue(by_old=True)
    c.all_done()
    c.enqueue(by_old=False, sleep_s=0.05)
    c.replace("worker")  # the old leader and cleaner with new workers only, jobs in flight
    c.all_done()
    c.enqueue(by_old=True)
    c.all_done()
    assert_mixed(c)
    c.replace("recruiter")
    c.replace("cleaner")
    c.enqueue(by_old=False)
    c.all_done()
    expected = f"{RELEASE} (cleaner lease, recruiter lease, 2 worker slots)"
    # Worker slots are listed while their beats are fresh: on a loaded machine a beat may be late for a moment.
    status = wait_for(lambda: (s := c.status()) and releases_line(s) == expected and s, timeout_s=30,
                      message=f"status listing {expected}")
    assert "warning:   " not in status, status  # no release warning (a shared-database one may stand)
    assert_once(c)


def test_leader_first_then_the_workers(cluster: Cluster) -> None:
    c = cluster
    c.enqueue(by_old=False)
    c.all_done()
    c.enqueue(by_old=True, sleep_s=0.05)
    c.replace("recruiter")  # the new leader with old workers only, jobs in flight
    c.replace("cleaner")
    c.all_done()
    c.enqueue(by_old=False)
    c.all_done()
    assert_mixed(c)
    c.replace("worker")
    c.enqueue(by_old=True)
    c.all_done()
    assert "warning:   " not in c.status()  # no release warning
    assert_once(c)


def test_a_worker_refuses_to_start_under_a_leader_of_a_release_it_does_not_work_beside(
        processes: Processes, db: Any) -> None:
    """One line naming both versions and what to do, exit status 1, nothing registered (no old release needed)."""
    db.metadata.insert_one(lease("recruiter", TOO_OLD))
    worker = processes.worker("--group", GROUP)
    assert worker.wait(120) == 1
    lines = worker.log().strip().splitlines()
    assert lines[-1].startswith("Error: worker refused to start: the leading recruiter runs recruiter 0.0.9, older "
                                f"than {WORKS_BESIDE}, the oldest this release ({RELEASE}) works beside: upgrade "
                                f"the leading recruiter to {WORKS_BESIDE} or later"), lines
    assert "Traceback" not in worker.log()
    assert db.roster.count_documents({}) == 0
