"""``worker start --isolation process``: every job in a child process (issue 21, item 4).

Under the default (``thread``), a synchronous job without a timeout runs in a thread of
the worker: a cancel discards its outcome but cannot stop it. Under ``process`` the
cancel kills its child process, so the job stops at once; ordinary jobs behave as under
threads (results, failures and retries, async jobs, logs).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from recruiter import Recruiter
from recruiter.retry import RetryManyTimes
from tests.conftest import wait_for
from tests.processes.conftest import Processes
from tests.processes.test_cli_errors import run_cli
from tests.workables import AlwaysFails, AsyncRecord, Chatty, Record, Ticks


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _last_tick(path: Path) -> float:
    lines = path.read_text().split()
    return float(lines[-1]) if lines else 0.0


def test_a_cancel_stops_a_sync_job_without_timeout_within_a_second(processes: Processes, db: Any, db_uri: str,
                                                                   tmp_path: Path) -> None:
    ticks = tmp_path / "ticks"
    with Recruiter.connect(db_uri) as rec:
        job = rec.enqueue(Ticks(db_uri, str(ticks)))
    processes.recruiter()
    worker = processes.worker("--isolation", "process")
    start = wait_for(lambda: db.ledger.find_one({"job": str(job), "event": "start"}), message="the job to start")
    assert start["pid"] != worker.pid  # a child process, not the worker
    wait_for(lambda: ticks.exists() and len(ticks.read_text().split()) >= 3, message="the job ticking")

    out = run_cli("jobs", "cancel", str(job), "--target", db_uri)
    cancelled_at = time.time()
    assert out.returncode == 0, out.stderr
    wait_for(lambda: not _alive(start["pid"]), timeout_s=10, interval_s=0.01, message="the child killed")
    stopped_s = time.time() - cancelled_at
    last = _last_tick(ticks)
    time.sleep(0.3)  # long enough for six more ticks, had it gone on
    assert _last_tick(ticks) == last, "the job went on after the cancel"
    print(f"child killed {stopped_s * 1000:.0f} ms after the cancel command returned; last tick "
          f"{(last - cancelled_at) * 1000:.0f} ms after it")
    assert stopped_s < 1.0
    assert db.archived.find_one({"_id": job})["why"] == "cancelled"
    assert worker.popen.poll() is None


def test_ordinary_jobs_behave_as_under_threads(processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        done = rec.enqueue(Record(db_uri, n=7))
        done_async = rec.enqueue(AsyncRecord(db_uri, n=8))
        chatty = rec.enqueue(Chatty(succeed_on=1))
        failing = AlwaysFails(db_uri, "no luck").as_job_of(rec).retry_with(RetryManyTimes(1, wait=0)).enqueue()
    processes.recruiter()
    worker = processes.worker("--isolation", "process", "--concurrency", "2")
    wait_for(lambda: db.archived.count_documents({}) == 4, timeout_s=60, message="the four jobs archived")
    assert db.archived.find_one({"_id": done})["result"] == 7
    assert db.archived.find_one({"_id": done_async})["result"] == {"n": 8}
    assert db.archived.find_one({"_id": chatty})["why"] == "done"
    assert "print says attempt 1" in db.archived.find_one({"_id": chatty})["last_execution"]["logs"]
    failed = db.archived.find_one({"_id": failing})
    assert failed["why"] == "tried-too-many-times"
    assert failed["attempts"] == 2
    assert failed["last_execution"]["message"] == "no luck"
    pids = {d["pid"] for d in db.ledger.find({"event": "start"})}
    assert pids
    assert worker.pid not in pids  # every job ran in a child process
