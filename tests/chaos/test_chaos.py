"""Chaos: random SIGKILLs and SIGTERMs of every kind of process, and nothing is lost or done twice.

The embedded server (never killed: SecantusDB 0.7.0b3 loses acknowledged writes
when it is itself SIGKILLed), two recruiters, one cleaner and eight workers in
two groups work through 500 jobs (``RECRUITER_CHAOS_JOBS``; 1 000 with
``RECRUITER_LONG_TESTS=1``): short ones, long ones, ones that always
fail, and ones that end their own process. Meanwhile processes are killed at
random, the recruiter leader on purpose every few kills, and restarted (workers
with the same ``--id``, so restart recovery runs too); with each kill a random
unfinished job is cancelled, another is resubmitted (waiting: rescheduled;
running: it runs once more after its attempt), and a unique job's key is
enqueued again (``existing`` or ``resubmit`` on conflict). Some of the first
jobs share unique keys. Then every job must be archived exactly once with
the right ``why`` (``cancelled`` for the jobs whose cancel took), no two jobs
with one key may have been unfinished at once, and the ledger the job bodies
write must show no job executed by two workers at the same time and none
executed more often than its attempts allow (each resubmit applied allows one
run more).

The workers run with ``--prefetch 2`` (``RECRUITER_CHAOS_PREFETCH``): each holds up to
two jobs ahead of the one it runs, so kills, stops and cancels also hit jobs handed out
ahead, which must go back without counting an attempt (:mod:`recruiter.domain.lanes`).

``RECRUITER_CHAOS_SECONDS`` (or ``--chaos-seconds``) sets how long the killing
goes on: CI uses the short default; run it for minutes with e.g.
``RECRUITER_CHAOS_SECONDS=300 bin/test tests/chaos -s``.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from recruiter import JobNotFound, Recruiter, ResubmitRefused
from recruiter.domain.cancel import RUNS_ON, WAS_ASSIGNED, WAS_WAITING
from recruiter.domain.liveness import MAX_UNPROVEN_RETURNS
from recruiter.domain.retry import RetryManyTimes
from tests.chaos.jobs import ChaosJob
from tests.conftest import long_or_short, wait_for
from tests.processes.conftest import Proc, Processes

MAX_CRASHES = 3
GROUPS = {"a": ["a1", "a2", "a3", "a4"], "b": ["b1", "b2", "b3", "b4"]}
RECRUITER = ["--backoff-from", "20ms", "--backoff-to", "200ms", "--lease-ttl", "2s"]
PREFETCH = int(os.environ.get("RECRUITER_CHAOS_PREFETCH", "2"))
WORKER = ["--heartbeat-interval", "300ms", "--poll-from", "10ms", "--poll-to", "100ms", "--grace-period", "2s",
          "--max-crashes", str(MAX_CRASHES), "--prefetch", str(PREFETCH)]
CLEANER = ["--considered-dead-after", "5s", "--heartbeat-interval", "300ms", "--interval", "200ms",
           "--lease-ttl", "2s"]
# Retries allowed to jobs that should succeed: crashes and kills count as attempts.
RETRIES = 5
FAILING_RETRIES = 2
# Every UNIQUE_EVERY-th job of the first batch is a short one with one of UNIQUE_KEYS keys.
UNIQUE_EVERY = 10
UNIQUE_KEYS = 20


@dataclass
class Role:
    name: str
    args: list[str]
    proc: Proc | None = None
    exited_at: dict[int, datetime] = field(default_factory=dict)


@dataclass
class Chaos:
    processes: Processes
    roles: list[Role]
    rng: random.Random
    kills: Counter[str] = field(default_factory=Counter)
    kill_count: int = 0
    restarts: int = 0
    exit_times: dict[int, datetime] = field(default_factory=dict)

    def start(self, role: Role) -> None:
        role.proc = self.processes.start(role.name, *role.args)
        popen = role.proc.popen

        def reap() -> None:
            popen.wait()
            self.exit_times[popen.pid] = datetime.now(UTC)

        threading.Thread(target=reap, daemon=True).start()

    def restart_exited(self) -> None:
        for role in self.roles:
            if role.proc is None or role.proc.popen.poll() is not None:
                self.start(role)
                self.restarts += 1

    def leader_pid(self, db: Any) -> int | None:
        lease = db.metadata.find_one({"_id": "recruiter"})
        if not lease or not lease.get("owner") or lease["expires_at"] < datetime.now(UTC):
            return None
        return int(lease["owner"].split(":")[1])

    def kill_one(self, db: Any) -> None:
        live = [r for r in self.roles if r.proc is not None and r.proc.popen.poll() is None]
        if not live:
            return
        leader = self.leader_pid(db) if self.kill_count % 4 == 0 else None
        target = next((r for r in live if r.proc and r.proc.pid == leader), None) or self.rng.choice(live)
        sig = signal.SIGKILL if self.rng.random() < 0.6 else signal.SIGTERM
        assert target.proc is not None
        try:
            target.proc.signal(sig)
        except ProcessLookupError:
            return
        self.kill_count += 1
        self.kills[sig.name] += 1
        self.kills[f"{target.name}:{sig.name}"] += 1
        if target.proc.pid == leader:
            self.kills["recruiter leader"] += 1


class Progress:
    """A line on the terminal every ``every_s`` while the test runs, whatever pytest captures.

    Written through pytest's terminal reporter with capture suspended for the line
    (what ``capsys.disabled()`` does), so it shows without ``-s`` and a long run
    never looks like a hang.
    """

    def __init__(self, config: pytest.Config, chaos: Chaos, db: Any, total: int, every_s: float = 10.0) -> None:
        self.reporter = config.pluginmanager.get_plugin("terminalreporter")
        self.capture = config.pluginmanager.get_plugin("capturemanager")
        self.chaos, self.db, self.total, self.every_s = chaos, db, total, every_s
        self.began = time.monotonic()
        self.last = self.began

    def tick(self, phase: str) -> None:
        now = time.monotonic()
        if now - self.last < self.every_s:
            return
        self.last = now
        line = (f"chaos {now - self.began:4.0f}s {phase}: {self.chaos.kill_count} kills, "
                f"{self.chaos.restarts} restarts, {self.db.archived.count_documents({})}/{self.total} archived")
        if self.reporter is None or self.capture is None:
            print(line, flush=True)
            return
        with self.capture.global_and_fixture_disabled():
            self.reporter.write_line(line)
            self.reporter.flush()


def chaos_seconds(config: pytest.Config) -> float:
    option = config.getoption("--chaos-seconds", default=None)
    return float(option if option is not None else os.environ.get("RECRUITER_CHAOS_SECONDS", "40"))


def enqueue(db_uri: str, rng: random.Random, count: int) -> dict[Any, str]:
    kinds: dict[Any, str] = {}
    with Recruiter.connect(db_uri) as rec:
        builders = []
        for i in range(count):
            roll = rng.random()
            kind = "exit" if i % 80 == 7 else "long" if roll < 0.06 else "fail" if roll < 0.10 else "short"
            seconds = {"long": rng.uniform(1.0, 3.0), "short": rng.uniform(0.0, 0.02)}.get(kind, 0.0)
            policy = RetryManyTimes(FAILING_RETRIES if kind == "fail" else RETRIES, wait=0)
            builder = ChaosJob(db_uri, kind, seconds).as_job_of(rec).in_group("ab"[i % 2]).retry_with(policy)
            if i % UNIQUE_EVERY == 3:  # short, with a key some other item has too
                kind = "short"
                builder = unique_job(rec, db_uri, i, rng.randrange(UNIQUE_KEYS), "existing")
            builders.append((kind, builder))
        ids = rec.enqueue_many(b for _, b in builders)
        kinds = {job_id: kind for job_id, (kind, _) in zip(ids, builders, strict=True) if not job_id.existed}
    return kinds


def unique_job(rec: Recruiter, db_uri: str, i: int, key: int, on_conflict: str) -> Any:
    return (ChaosJob(db_uri, "short", 0.01).as_job_of(rec).in_group("ab"[i % 2])
            .retry_with(RetryManyTimes(RETRIES, wait=0)).unique(f"chaos-{key}", on_conflict=on_conflict))


def expected_why(kind: str, doc: dict[str, Any]) -> set[str]:
    if kind == "exit":
        return {"crashed-too-many-times"}
    if doc.get("crashes", 0) >= MAX_CRASHES:
        return {"crashed-too-many-times"}
    if kind == "fail":
        return {"tried-too-many-times"}
    return {"done"}


def executions(ledger: list[dict[str, Any]], exit_times: dict[int, datetime]) -> dict[str, list[tuple[Any, ...]]]:
    """Per job, each execution as (start, end, worker, pid); the end of a killed one is its process's exit."""
    ends: dict[tuple[Any, ...], list[datetime]] = defaultdict(list)
    for e in ledger:
        if e["event"] == "end":
            ends[(e["job"], e["pid"], e["attempt"])].append(e["at"])
    by_job: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    never = datetime.max.replace(tzinfo=UTC)
    for e in sorted(ledger, key=lambda d: d["at"]):
        if e["event"] != "start":
            continue
        key = (e["job"], e["pid"], e["attempt"])
        end = ends[key].pop(0) if ends[key] else exit_times.get(e["pid"], never)
        by_job[e["job"]].append((e["at"], end, e["worker"], e["pid"]))
    return by_job


@dataclass
class Asked:
    """What the chaos producer asked for besides the kills: cancels, resubmits, unique enqueues."""

    kinds: dict[Any, str]
    cancels: Counter[str] = field(default_factory=Counter)
    cancelled: set[Any] = field(default_factory=set)
    resubmits: Counter[str] = field(default_factory=Counter)
    uniques: Counter[str] = field(default_factory=Counter)

    def resubmit_and_enqueue_again(self, rec: Recruiter, db_uri: str, rng: random.Random,
                                   waiting: list[Any]) -> None:
        """Resubmit a job not archived yet, and enqueue one of the unique keys again."""
        try:
            self.resubmits[rec.resubmit(rng.choice(waiting)).state] += 1
        except (ResubmitRefused, JobNotFound):  # archived since it was read (or cancelled)
            self.resubmits["archived meanwhile"] += 1
        i = len(self.uniques)
        handle = unique_job(rec, db_uri, i, rng.randrange(UNIQUE_KEYS), rng.choice(["existing", "resubmit"])).enqueue()
        self.uniques["existed" if handle.existed else "new"] += 1
        if not handle.existed:
            self.kinds[handle.id] = "short"


def kill_and_cancel(chaos: Chaos, progress: Progress, db: Any, db_uri: str, rng: random.Random, seconds: float,
                    asked: Asked) -> None:
    """For ``seconds``, kill a process every 1 to 2.5 s, cancel a job not archived yet, resubmit
    another and enqueue a unique key again."""
    deadline = time.monotonic() + seconds
    next_kill = time.monotonic() + rng.uniform(1.0, 2.5)
    with Recruiter.connect(db_uri) as rec:
        while time.monotonic() < deadline:
            if time.monotonic() >= next_kill:
                chaos.kill_one(db)
                next_kill = time.monotonic() + rng.uniform(1.0, 2.5)
                # Cancel a job not archived yet, waiting or running: the cancel
                # races the recruiter, the worker and the kills.
                waiting = [d["_id"] for d in db.scheduled.find({}, {"_id": 1}).limit(50)]
                if waiting:
                    result = rec.cancel(rng.choice(waiting), reason="chaos")
                    asked.cancels[result.state] += 1
                    # A job running in a thread is archived cancelled too, and runs on to its end.
                    if result.state in (WAS_WAITING, WAS_ASSIGNED, RUNS_ON):
                        asked.cancelled.add(result.job_id)
                    asked.resubmit_and_enqueue_again(rec, db_uri, rng, waiting)
            time.sleep(0.3)
            chaos.restart_exited()
            progress.tick("killing")


# Processes read the server's time through their own calibration (store/clock.py): a job
# created just after another with its key was archived may seem to start a little earlier.
CLOCK_TOLERANCE = timedelta(milliseconds=500)


def unique_overlaps(archived: dict[Any, Any]) -> list[Any]:
    """Jobs with one unique key whose lives (created to archived) overlap."""
    lives: dict[str, list[tuple[Any, Any]]] = defaultdict(list)
    for d in archived.values():
        if "unique" in d:
            lives[d["unique"]["key"]].append((d["created_at"], d["archived_at"]))
    return [(key, a, b) for key, spans in lives.items() for i, a in enumerate(sorted(spans))
            for b in sorted(spans)[i + 1:] if b[0] + CLOCK_TOLERANCE < a[1]]


def overlapping(by_job: dict[str, list[Any]]) -> list[Any]:
    """Runs of one job that overlap in time: (job, earlier run, later run)."""
    overlaps = []
    for job, runs in by_job.items():  # each job's runs in order of start
        for i, later in enumerate(runs):
            overlaps += [(job, earlier, later) for earlier in runs[:i] if later[0] < earlier[1]]
    return overlaps


def over_their_executions(archived: dict[Any, Any], by_job: dict[str, list[Any]], kinds: dict[Any, str]) -> list[Any]:
    """Archived jobs the ledger saw run more often than their attempts and limits allow."""
    over = []
    for job_id, doc in archived.items():
        runs = len(by_job.get(str(job_id), []))
        interrupted = sum(1 for e in doc.get("executions", []) if e["outcome"] == "interrupted")
        # Each resubmit applied (recruiter.domain.resubmit) is one run more, counted as an attempt.
        limit = {"fail": FAILING_RETRIES + 1, "exit": MAX_CRASHES}.get(kinds[job_id], RETRIES + 1) \
            + doc.get("resubmits", 0)
        # A job whose worker died before a heartbeat showed it running is returned with
        # its attempt given back (recruiter.liveness); it may have started all the same,
        # so each such return, at most MAX_UNPROVEN_RETURNS, allows one execution more.
        returns = doc.get("unproven_returns", 0)
        assert returns <= MAX_UNPROVEN_RETURNS
        # Executions are what the ledger saw. Attempts may pass the limit: a worker
        # killed while it held the job, before it started or judged it, is a crash
        # (an attempt) with no execution; the worker after it judges the job and it stops.
        if runs > doc["attempts"] + interrupted + returns or runs > limit + returns:
            over.append((str(job_id), kinds[job_id], runs, doc["attempts"], interrupted, doc.get("crashes", 0),
                         returns))
    return over


@pytest.mark.timeout(1800)
def test_chaos(db: Any, db_uri: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    seconds = chaos_seconds(request.config)
    # 500 jobs outlast the 40 s of kills on CI's machine; the long tier (RECRUITER_LONG_TESTS=1) runs 1 000.
    count = int(long_or_short("RECRUITER_CHAOS_JOBS", 500, 1000))
    seed = int(os.environ.get("RECRUITER_CHAOS_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    print(f"\nchaos: seed {seed}, {seconds:g}s of kills, {count} jobs, workers with --prefetch {PREFETCH}")
    kinds = enqueue(db_uri, rng, count)
    processes = Processes(db_uri, tmp_path)
    roles = [Role("recruiter", ["start", *RECRUITER]) for _ in range(2)]
    roles.append(Role("cleaner", ["cleaner", "start", *CLEANER]))
    roles += [Role(f"worker-{w}", ["worker", "start", "--group", g, "--id", w, *WORKER])
              for g, ids in GROUPS.items() for w in ids]
    chaos = Chaos(processes, roles, rng)
    progress = Progress(request.config, chaos, db, count)
    asked = Asked(kinds)
    began = time.monotonic()
    try:
        for role in roles:
            chaos.start(role)
        # Kill only once everything is up and jobs are flowing. Jobs that exit their
        # process already run, so exited processes are restarted while waiting.
        def up_and_flowing() -> bool:
            progress.tick("starting")
            chaos.restart_exited()
            live = all(r.proc is not None and r.proc.popen.poll() is None for r in roles)
            return (live and db.archived.count_documents({}) >= 20
                    and db.roster.count_documents({}) >= len(GROUPS) * 4 * (PREFETCH + 1))

        wait_for(up_and_flowing, timeout_s=120, interval_s=0.2, message="all processes up and jobs flowing")
        archived_before = db.archived.count_documents({})
        kill_and_cancel(chaos, progress, db, db_uri, rng, seconds, asked)
        archived_during_chaos = db.archived.count_documents({}) - archived_before
        waiting_after_chaos = db.scheduled.count_documents({})

        def drained() -> bool:
            progress.tick("draining")
            chaos.restart_exited()  # jobs that end their process still take workers down
            return db.scheduled.count_documents({}) == 0

        try:
            wait_for(drained, timeout_s=600, interval_s=0.3, message="every job archived")
        except AssertionError:
            left = list(db.scheduled.find({}, {"workable.parameters.kind": 1, "locked": 1, "locked_by": 1,
                                               "attempts": 1, "crashes": 1, "scheduled_at": 1}).limit(10))
            print("still scheduled:", left)
            print(processes.logs())
            raise
    finally:
        processes.stop_all()
    elapsed = time.monotonic() - began

    archived = {d["_id"]: d for d in db.archived.find()}
    assert set(archived) == set(kinds), "every job archived (and archived._id is unique: exactly once)"
    wrong = [(str(i), kinds[i], d["why"], d.get("crashes", 0)) for i, d in archived.items()
             if d["why"] not in ({"cancelled"} if i in asked.cancelled else expected_why(kinds[i], d))]
    assert not wrong, f"wrong why: {wrong[:10]}"
    assert not unique_overlaps(archived), "two jobs with one unique key were unfinished at the same time"

    ledger = list(db.ledger.find())
    by_job = executions(ledger, chaos.exit_times)
    overlaps = overlapping(by_job)
    assert not overlaps, f"attempts ran at the same time: {overlaps[:5]}"

    over = over_their_executions(archived, by_job, kinds)
    if over:  # say what the ledger and the archived record show for each, so one CI failure is enough to read
        for job_id, *_ in over[:3]:
            print("over:", job_id, [(e["event"], e["attempt"], e["worker"], e["pid"], e["at"].isoformat())
                                    for e in sorted(ledger, key=lambda d: d["at"]) if str(e["job"]) == job_id])
            doc = archived[next(i for i in archived if str(i) == job_id)]
            print("archived:", {k: doc.get(k) for k in ("attempts", "crashes", "unproven_returns", "resubmits",
                                                         "why", "executions", "history")})
    assert not over, f"jobs over their allowed executions: {over[:10]}"

    whys = Counter(d["why"] for d in archived.values())
    runs_total = sum(len(r) for r in by_job.values())
    crashes = sum(d.get("crashes", 0) for d in archived.values())
    interrupted_total = sum(1 for d in archived.values() for e in d.get("executions", [])
                            if e["outcome"] == "interrupted")
    print(f"chaos: {elapsed:.0f}s in all; {chaos.kill_count} "
          f"kills ({chaos.kills['SIGKILL']} SIGKILL, {chaos.kills['SIGTERM']} SIGTERM, "
          f"{chaos.kills['recruiter leader']} of the recruiter leader), {chaos.restarts} restarts; "
          f"{archived_during_chaos} archived while killing, {waiting_after_chaos} still waiting when it ended")
    print("chaos: kills by process: " + ", ".join(f"{k}={v}" for k, v in sorted(chaos.kills.items()) if ":" in k))
    print(f"chaos: checked {len(archived)} jobs archived once ({dict(whys)}), {runs_total} executions "
          f"in the ledger with no overlap, {crashes} crashes and {interrupted_total} interrupted attempts "
          f"within their limits; kinds {dict(Counter(kinds.values()))}; cancels {dict(asked.cancels)}")
    proven = sum(1 for d in archived.values() if (d.get("last_return") or {}).get("proven"))
    print(f"chaos: --prefetch {PREFETCH}: {proven} jobs last given back held ahead and never started "
          f"(no attempt counted), {sum(d.get('unproven_returns', 0) for d in archived.values())} unproven returns")
    resubmitted = sum(d.get("resubmits", 0) for d in archived.values())
    print(f"chaos: resubmits asked {dict(asked.resubmits)}, {resubmitted} applied after an attempt; "
          f"unique keys enqueued again {dict(asked.uniques)}; "
          f"{sum(1 for d in archived.values() if 'unique' in d)} unique jobs")
