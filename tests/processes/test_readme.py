"""The examples of the README and of the guides (docs/guide/*.md) run as written: their Python
files, enqueued, then run by ``recruiter start`` and ``worker start --group billing`` from ``bin/``
(and ``worker start --id billing-1`` and ``cleaner start`` for placement.py), as each page says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from bson import ObjectId

from tests.conftest import REPO, wait_for
from tests.processes.conftest import FAST_RECRUITER, FAST_WORKER, Processes

FENCE = "`" * 3


PAGES = [REPO / "README.md", *sorted((REPO / "docs" / "guide").glob("*.md"))]


def python_blocks(page: Path) -> list[str]:
    return re.findall(FENCE + r"python\n(.*?)" + FENCE, page.read_text(), flags=re.S)


def readme_files() -> dict[str, str]:
    """Python blocks of the README and the guides that start with a ``# name.py`` comment.

    A file shown on two pages (``jobs.py``) must be the same on both."""
    files: dict[str, str] = {}
    for page in PAGES:
        for block in python_blocks(page):
            first = block.splitlines()[0]
            if re.fullmatch(r"# \w+\.py", first):
                assert files.setdefault(first[2:], block) == block, f"{first[2:]} differs in {page.name}"
    return files


def test_readme_names_its_example_files() -> None:
    assert set(readme_files()) == {"jobs.py", "enqueue.py", "result.py", "enqueue_async.py", "enqueue_tenants.py",
                                   "follow.py", "follow_async.py", "welcome.py", "unique.py", "test_send_invoice.py",
                                   "placement.py", "schedule.py", "reports.py", "results.py", "resize.py",
                                   "app_logging.py", "reminders.py", "remind.py",
                                   # docs/guide/writing-jobs.md's Snooze: tests/unit/test_snooze_checks.py
                                   "export_jobs.py",
                                   # docs/guide/fastapi.md and django.md: tests/integration/test_framework_guides.py
                                   "fastapi_app.py", "settings.py", "recruiting.py", "views.py", "urls.py",
                                   "worker_setup.py",
                                   # docs/guide/workflows.md
                                   "pipeline_jobs.py", "pipeline.py", "report.py", "squares.py", "dynamic.py",
                                   "nested.py"}


def test_every_python_block_of_the_guides_is_run() -> None:
    """Each Python block is a named file this module runs, or the one block
    tests/unit/test_readme_progress.py runs (progress-and-logs.md)."""
    unnamed = [(page.name, block.splitlines()[0]) for page in PAGES for block in python_blocks(page)
               if not re.fullmatch(r"# \w+\.py", block.splitlines()[0])]
    assert unnamed == [("progress-and-logs.md", "import logging")]


def test_every_guide_says_what_its_examples_need() -> None:
    for page in PAGES[1:]:
        if python_blocks(page):
            assert "**Needs:**" in page.read_text(), f"{page.name} does not say which processes its examples need"


def test_readme_examples_run_as_written(processes: Processes, db: Any, db_uri: str, tmp_path: Path) -> None:
    for name, source in readme_files().items():
        (tmp_path / name).write_text(source)
    env = {**os.environ, "PYTHONPATH": str(REPO), "MONGODB_URI": db_uri}
    env.pop("RECRUITER_MONGODB_URI", None)
    ran = {}
    for script in ("enqueue.py", "enqueue_async.py", "enqueue_tenants.py"):
        result = subprocess.run([sys.executable, script], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 0, result.stderr
        ran[script] = result.stdout
    assert db.scheduled.count_documents({}) == 50
    assert db.scheduled.count_documents({"group": "billing"}) == 50
    assert "enqueued 19 jobs" in ran["enqueue.py"]

    # The commands exactly as the README writes them, from bin/ on the PATH.
    path_env = {**env, "PATH": f"{REPO / 'bin'}{os.pathsep}{env['PATH']}", "RECRUITER_LOG_FORMAT": "json"}
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = []
    for name, command in [("recruiter", ["recruiter", "start", *FAST_RECRUITER]),
                          ("worker", ["worker", "start", "--group", "billing", *FAST_WORKER])]:
        with open(logs / f"{name}.log", "wb") as out:
            procs.append(subprocess.Popen(command, cwd=tmp_path, env=path_env, stdout=out,
                                          stderr=subprocess.STDOUT))
    try:
        wait_for(lambda: db.archived.count_documents({}) == 50, timeout_s=90, message="the README's 50 jobs")
        assert db.archived.count_documents({"why": "done"}) == 50
        check_the_first_50(db)
        result = subprocess.run([sys.executable, "result.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=120)
        assert (result.returncode, result.stdout) == (0, "{'sent': 'INV-42'}\n"), result.stderr
        dropped_result(tmp_path, env, db)
        follow_jobs(tmp_path, env, db)
        unique_jobs(tmp_path, env, db)
        periodic_jobs(tmp_path, env, db)
        workflows(tmp_path, env, db)
        # placement.py needs the worker it names, and a cleaner for its deadline.
        for name, command in [("billing-1", ["worker", "start", "--group", "billing", "--id", "billing-1",
                                             *FAST_WORKER]),
                              ("cleaner", ["cleaner", "start", "--interval", "200ms"])]:
            with open(logs / f"{name}.log", "wb") as out:
                procs.append(subprocess.Popen(command, cwd=tmp_path, env=path_env, stdout=out,
                                              stderr=subprocess.STDOUT))
        place_jobs(tmp_path, env, db)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(20)
    assert all(p.returncode == 0 for p in procs), [(logs / f).read_text()[-2000:] for f in os.listdir(logs)]


def check_the_first_50(db: Any) -> None:
    # Tenants take turns: the job enqueued last, for a tenant of its own, is among the first three to start.
    starts = sorted(db.archived.find({}, {"workable": 1, "last_execution": 1}),
                    key=lambda d: d["last_execution"]["started_at"])
    small = [n for n, d in enumerate(starts, 1) if d["workable"]["parameters"]["invoice_id"] == "SMALL-1"]
    assert small, small
    assert small[0] <= 3, small
    first = db.archived.find_one({"workable.parameters.invoice_id": "INV-1"})
    assert first["result"] == {"sent": "INV-1"}
    assert first["workable"]["class"] == "jobs:SendInvoice"
    assert first["retry_policy"]["class"] == "recruiter.retry:ExponentialBackoff"
    later = db.archived.find_one({"workable.parameters.invoice_id": "INV-2"})
    assert later["tags"] == ["eu"]
    assert (later["scheduled_at"] - later["created_at"]).total_seconds() == 2
    assert later["last_execution"]["started_at"] >= later["scheduled_at"]


def follow_jobs(tmp_path: Path, env: dict[str, str], db: Any) -> None:
    """The README's follow.py and follow_async.py, run while the processes run their jobs."""
    out = {}
    for script in ("follow.py", "follow_async.py"):
        result = subprocess.run([sys.executable, script], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, result.stderr
        out[script] = result.stdout.splitlines()
    lines = out["follow.py"]
    job_id = lines[0].split()[0]
    assert lines[:3] == [f"{job_id} queued", "{'sent': 'INV-200'}", "archived done 1"]
    assert lines[3].startswith("archived {'sent': 'INV-200'} ")
    assert lines[4] == str([{"sent": f"INV-{n}"} for n in range(201, 205)])
    assert all(line.startswith("finished ") for line in lines[5:8])
    assert sorted(line.split(" ", 2)[2] for line in lines[5:8]) == [str({"sent": f"INV-{n}"}) for n in (205, 206, 207)]
    cancelled = db.archived.find_one({"workable.parameters.invoice_id": "INV-300"})
    assert lines[8] == f"job {cancelled['_id']} ended cancelled"
    assert lines[9].startswith("cancelled ")
    assert db.archived.find_one({"_id": ObjectId(job_id)})["result"] == {"sent": "INV-200"}
    lines = out["follow_async.py"]
    assert lines[0] == "{'sent': 'INV-400'}"
    assert sorted(line.split()[-1] for line in lines[1:4]) == ["'INV-401'}", "'INV-402'}", "'INV-403'}"]
    assert lines[4] == str([{"sent": f"INV-{n}"} for n in range(401, 404)])


def dropped_result(tmp_path: Path, env: dict[str, str], db: Any) -> None:
    """docs/guide/results.md's results.py: a small result returned, a big one raised as ResultDropped."""
    result = subprocess.run([sys.executable, "results.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "{'rows': ['row 0', 'row 1', 'row 2']}",
        "the result is 2077804 bytes of BSON, over the 1048576-byte limit",
        "2077804 done"]
    big = db.archived.find_one({"workable.parameters.rows": 100_000})
    assert (big["why"], big["result_dropped"]["size_bytes"]) == ("done", 2077804)


def workflows(tmp_path: Path, env: dict[str, str], db: Any) -> None:
    """docs/guide/workflows.md's pipeline.py: a chain, a fan-in reading its parts' results, a cancelled dependency."""
    result = subprocess.run([sys.executable, "pipeline.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["{'month': 'c', 'rows': 3}", "14", "waiting-for-jobs", "upstream-failed"]
    chained = sorted(db.archived.find({"workable.parameters.month": {"$in": ["a", "b", "c"]}}),
                     key=lambda d: d["last_execution"]["started_at"])
    assert [d["workable"]["parameters"]["month"] for d in chained] == ["a", "b", "c"]
    assert chained[0]["last_execution"]["ended_at"] <= chained[1]["last_execution"]["started_at"]
    named_workflows(tmp_path, env, db)


def named_workflows(tmp_path: Path, env: dict[str, str], db: Any) -> None:
    """docs/guide/workflows.md's report.py (a named workflow), squares.py (a batch with callbacks) and
    dynamic.py (a step that adds steps, and a dependent that waits for them too), nested.py (a sub-workflow)."""
    ran = {}
    for script in ("report.py", "squares.py", "dynamic.py", "nested.py"):
        result = subprocess.run([sys.executable, script], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, result.stderr
        ran[script] = result.stdout.splitlines()
    done = {"done": 5, "failed": 0, "pending": 0, "total": 5}
    assert ran["report.py"][1:] == ["14", str(done)]
    assert db.archived.count_documents({"workflow.id": ObjectId(ran["report.py"][0])}) == 5
    assert ran["squares.py"] == ["14", str({"done": 3, "failed": 0, "pending": 0, "total": 3})]
    assert ran["dynamic.py"] == [str({"month": "2026-12", "rows": 3}),
                                 str({"done": 6, "failed": 0, "pending": 0, "total": 6})]
    assert ran["nested.py"] == ["14", str({"month": "2027-01", "rows": 3}),
                                str({"done": 6, "failed": 0, "pending": 0, "total": 6})]
    added = db.archived.find_one({"workflow.added_by": "split", "workflow.step": "total"})
    publish = db.archived.find_one({"workflow.step": "publish", "workflow.name": "dynamic-report"})
    assert added["result"] == 14  # 1 + 4 + 9
    assert added["last_execution"]["ended_at"] <= publish["last_execution"]["started_at"]


def periodic_jobs(tmp_path: Path, env: dict[str, str], db: Any) -> None:
    """The README's schedule.py: declared (twice: the second call changes nothing), one refused."""
    for change in ("created", "unchanged"):
        result = subprocess.run([sys.executable, "schedule.py"], cwd=tmp_path, env=env, capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == [
            f"{change} 03:00",
            "schedule 'broken': invalid cron expression '0 25 * * *': Bad hour; nothing was stored"]
    assert sorted(d["_id"] for d in db.schedules.find()) == ["nightly-invoices", "sync-prices"]
    assert db.schedules.find_one({"_id": "sync-prices"})["catch_up"] == {"mode": "within", "limit": 10,
                                                                        "within_s": 3600.0}


def unique_jobs(tmp_path: Path, env: dict[str, str], db: Any) -> None:
    """The README's unique.py, run while the processes run its jobs."""
    result = subprocess.run([sys.executable, "unique.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:6] == ["True True delayed", "True {'sent': 'INV-500'}", "welcome 42", "True", "rescheduled",
                         "{'sent': 'INV-501'}"]
    later = db.archived.find_one({"workable.parameters.invoice_id": "INV-501"})["_id"]
    assert lines[6] == (f"job {later} is archived (done) and cannot be resubmitted; "
                        f"`recruiter jobs retry {later}` enqueues a copy of it")
    assert db.archived.count_documents({"unique.key": "welcome-42"}) == 1
    assert db.archived.find_one({"unique.key": "invoice-500"})["unique"] == {"key": "invoice-500",
                                                                             "scope": "unfinished"}


def test_readme_testing_example_passes_under_pytest(db_uri: str, tmp_path: Path) -> None:
    """``## Testing your jobs``: its test file, run by pytest as written, against the test's database."""
    files = readme_files()
    for name in ("jobs.py", "test_send_invoice.py"):
        (tmp_path / name).write_text(files[name])
    env = {**os.environ, "PYTHONPATH": str(REPO), "TEST_MONGODB_URI": db_uri}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_send_invoice.py"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout


def place_jobs(tmp_path: Path, env: dict[str, str], db: Any) -> None:
    """The README's placement.py: a job on one worker, one committed with an order, one aborted."""
    result = subprocess.run([sys.executable, "placement.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["{'sent': 'INV-600'}", "{'sent': 'INV-601'}", "None and no job",
                                          "worker-deadline"]
    pinned = db.archived.find_one({"workable.parameters.invoice_id": "INV-600"})
    assert pinned["last_execution"]["worker"] == "billing-1"
    assert db.orders.find_one({"_id": "ORDER-7"}) is not None
    assert db.archived.find_one({"workable.parameters.invoice_id": "INV-602"}) is None
