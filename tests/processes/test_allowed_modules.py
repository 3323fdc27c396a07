"""A worker imports only modules on its allow-list; a job naming any other is given back unimported
(for a worker that may run it), and archived ``unrunnable`` once refused for ``--give-back-for``.

The module the jobs name here is importable by the worker (it is on its
``PYTHONPATH``) and its top-level code writes a marker file, so the marker's
absence proves the worker never imported it; a worker that allows it writes
the marker, which shows the marker would have told.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from bson import ObjectId

from recruiter import Recruiter
from recruiter.domain.retry import RetryManyTimes
from tests.conftest import REPO, wait_for
from tests.processes.conftest import FAST_WORKER, Processes
from tests.processes.test_cli_errors import run_cli
from tests.workables import Record


def _marker_module(tmp_path: Path) -> tuple[Path, Path]:
    """A directory holding ``marked_jobs.py``, whose import writes ``marker``."""
    code_dir = tmp_path / "outside"
    code_dir.mkdir()
    marker = tmp_path / "imported.marker"
    (code_dir / "marked_jobs.py").write_text(textwrap.dedent(f"""
        from pathlib import Path

        from recruiter import Workable, retry

        Path({str(marker)!r}).write_text("marked_jobs was imported")


        class Job(Workable):
            def __init__(self, **parameters: object) -> None:
                self.parameters = parameters

            def execute(self) -> str:
                return "ran"


        Policy = retry.DoNotDoItAgain
    """))
    return code_dir, marker


def _jobs(db: Any, db_uri: str, group: str) -> dict[str, Any]:
    """Three jobs in ``group``: naming the marker module as workable, as retry policy, and a good one."""
    with Recruiter.connect(db_uri) as rec:
        now = rec.clock.now()
        as_workable = Record(db_uri).as_job_of(rec).in_group(group).build(now)
        as_workable["workable"]["class"] = "marked_jobs:Job"
        as_policy = Record(db_uri).as_job_of(rec).in_group(group).retry_with(RetryManyTimes(1)).build(now)
        as_policy["retry_policy"]["parameters"] = {"inner": {"class": "marked_jobs.Policy", "parameters": {}}}
        good = Record(db_uri, n=5).as_job_of(rec).in_group(group).build(now)
    jobs = {"workable": as_workable, "policy": as_policy, "good": good}
    db.scheduled.insert_many(list(jobs.values()))
    return jobs


def test_a_job_naming_a_module_outside_the_allow_list_is_given_back_unimported(
        processes: Processes, db: Any, db_uri: str, tmp_path: Path) -> None:
    code_dir, marker = _marker_module(tmp_path)
    path_env = {"PYTHONPATH": os.pathsep.join([str(REPO), str(code_dir)])}
    jobs = _jobs(db, db_uri, "guarded")
    processes.recruiter()
    worker = processes.start("worker", "worker", "start", *FAST_WORKER, "--group", "guarded", "--id", "guard",
                             "--give-back-for", "3s", env=path_env)

    # Given back, unattempted, with the refusal on the job; then archived once refused for 3 s.
    wait_for(lambda: db.scheduled.count_documents({"refusals.worker": "guard"}) == 2, timeout_s=30,
             message="the two jobs given back")
    wait_for(lambda: db.archived.count_documents({}) == 3, timeout_s=60, message="the three jobs archived")
    for name in ("workable", "policy"):
        doc = db.archived.find_one({"_id": jobs[name]["_id"]})
        assert doc["why"] == "unrunnable"
        assert "class not allowed: marked_jobs" in doc["reason"]
        assert "'marked_jobs' is not in the worker's allowed modules" in doc["reason"]
        assert doc["attempts"] == 0  # never run, so no attempt counts
        assert doc["executions"] == []
        assert {r["worker"] for r in doc["refusals"]} == {"guard"}
    assert db.archived.find_one({"_id": jobs["good"]["_id"]})["why"] == "done"
    assert not marker.exists(), "the worker imported a module outside its allow-list"
    assert worker.popen.poll() is None, "the worker stopped"
    assert db.scheduled.count_documents({}) == 0
    assert '"job.given_back"' in worker.log()
    assert "class not allowed: marked_jobs:Job" in worker.log()

    # The same module allowed by --allow-module is imported and run: the marker would have told.
    allowed = _jobs(db, db_uri, "open")
    processes.start("worker", "worker", "start", *FAST_WORKER, "--group", "open", "--id", "open",
                    "--allow-module", "marked_jobs", env=path_env)
    wait_for(lambda: db.archived.count_documents({"_id": allowed["workable"]["_id"], "why": "done"}) == 1,
             timeout_s=30, message="the allowed job done")
    assert db.archived.find_one({"_id": allowed["workable"]["_id"]})["result"] == "ran"
    assert marker.read_text() == "marked_jobs was imported"


def test_the_allow_list_comes_from_the_import_path_preload_and_allow_module(
        processes: Processes, db: Any, db_uri: str, tmp_path: Path) -> None:
    """Modules under --import-path are allowed by default; prefixes stop at dots (``tests`` not ``testsuite``)."""
    code_dir, marker = _marker_module(tmp_path)
    jobs = _jobs(db, db_uri, "scanned")
    near_miss = dict(jobs["good"], _id=ObjectId())
    near_miss["workable"] = dict(near_miss["workable"], **{"class": "testsuite.workables:Record"})
    db.scheduled.insert_one(near_miss)
    processes.recruiter()
    worker = processes.worker("--group", "scanned", "--import-path", ".", "--import-path", str(code_dir),
                              "--preload", "tests.workables", "--allow-module", "examples.demo",
                              "--give-back-for", "2s")
    wait_for(lambda: db.archived.count_documents({}) == 4, timeout_s=60, message="the four jobs archived")
    assert db.archived.find_one({"_id": jobs["workable"]["_id"]})["why"] == "done"
    assert marker.exists()
    near = db.archived.find_one({"_id": near_miss["_id"]})
    assert near["why"] == "unrunnable"
    assert "class not allowed: testsuite.workables:Record (module 'testsuite.workables'" in near["reason"]
    allowed_line = next(line for line in worker.log().splitlines() if "worker.allowed_modules" in line)
    for module in ("marked_jobs", "tests", "tests.workables", "examples.demo", "recruiter"):
        assert f'"{module}"' in allowed_line


def test_a_bad_allow_module_is_one_line(db_uri: str) -> None:
    for args, env in ((["--allow-module", "my-app"], {}), ([], {"RECRUITER_ALLOW_MODULE": "myapp my-app"})):
        out = subprocess.run([sys.executable, "-m", "recruiter.cli", "worker", "start", "--target", db_uri, *args],
                             capture_output=True, text=True, timeout=30, cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO), **env})
        assert out.returncode == 2
        assert "'my-app' is not a module name such as 'myapp' or 'myapp.jobs'" in out.stderr
        assert "Traceback" not in out.stderr


def test_a_worker_started_outside_the_project_says_why_it_refuses_and_what_to_do(
        processes: Processes, db: Any, db_uri: str, tmp_path: Path) -> None:
    """The newcomer's mistake: the worker started in another directory (holding only a ``logs``
    data directory) cannot see the project's jobs module. It says so at start, the job says
    why and what to do in ``jobs show`` and ``jobs explain``, and the fix they name works."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "shop_jobs.py").write_text(textwrap.dedent("""
        from recruiter import Workable


        class Job(Workable):
            def __init__(self, n: int) -> None:
                self.n = n

            def execute(self) -> int:
                return self.n * 2
    """))
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "logs").mkdir(parents=True)
    (elsewhere / "logs" / "worker.log").write_text("")
    with Recruiter.connect(db_uri) as rec:
        job = Record(db_uri).as_job_of(rec).in_group("shop").build(rec.clock.now())
    job["workable"] = {"class": "shop_jobs:Job", "parameters": {"n": 21}}
    db.scheduled.insert_one(job)
    job_id = str(job["_id"])
    processes.recruiter()
    away = processes.start("worker", "worker", "start", *FAST_WORKER, "--group", "shop", "--id", "away",
                           cwd=elsewhere)

    wait_for(lambda: db.scheduled.count_documents({"refusals.worker": "away"}) == 1, timeout_s=30,
             message="the job given back by the worker started elsewhere")
    fix = (f"start the worker in the project directory (it runs in {elsewhere}), or give --import-path with the "
           "directory holding shop_jobs")
    shown = run_cli("jobs", "show", job_id, "--target", db_uri)
    assert shown.returncode == 0, shown.stderr
    refused = next(line for line in shown.stdout.splitlines() if line.startswith("refused    "))
    assert refused.startswith("refused    refused by worker away: class not allowed: shop_jobs:Job (module "
                              "'shop_jobs' is not in the worker's allowed modules: none)"), refused
    assert "kept from them until " in refused
    assert f"to fix: {fix}" in refused
    explained = run_cli("jobs", "explain", job_id, "--target", db_uri)
    assert explained.returncode == 0, explained.stderr
    assert explained.stdout.startswith("refused: refused by "), explained.stdout
    assert "class not allowed: shop_jobs:Job" in explained.stdout
    assert fix in explained.stdout

    # At start it said so, before any job was given back; "logs" is no module, and the start-up
    # line tells what happens to such jobs.
    events = [json.loads(line) for line in away.log().splitlines() if line.startswith("{")]
    allowed = next(e for e in events if e["event"] == "worker.allowed_modules")
    assert allowed["modules"] == []
    assert "given back unimported" in allowed["detail"]
    assert "malformed" not in allowed["detail"]
    warned = [e for e in events if e["event"] == "worker.refuses_waiting_jobs"]
    assert [(e["module"], e["groups"]) for e in warned] == [("shop_jobs", ["shop"])], warned
    assert warned[0]["fix"].startswith(fix)
    assert events.index(warned[0]) < next(i for i, e in enumerate(events) if e["event"] == "job.given_back")

    # The fix works: a worker started in the project directory runs it.
    processes.start("worker", "worker", "start", *FAST_WORKER, "--group", "shop", "--id", "home", cwd=project)
    wait_for(lambda: db.archived.count_documents({"_id": job["_id"], "why": "done"}) == 1, timeout_s=30,
             message="the job run by the worker started in the project directory")
    assert db.archived.find_one({"_id": job["_id"]})["result"] == 42
