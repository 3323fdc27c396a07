"""``recruiter jobs cancel`` against real recruiter and worker processes.

The command runs in this process (``cli_in_process``; it only writes the database and prints);
a bad job id goes through the real entry point."""

from __future__ import annotations

import os
import signal
from typing import Any

from bson import ObjectId

from recruiter import Recruiter
from tests.conftest import cli_in_process, wait_for
from tests.processes.conftest import Processes
from tests.processes.test_cli_errors import assert_one_line_error, run_cli
from tests.workables import NeverReturns, Record, WaitForRelease, release


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cancel_stops_a_running_job_and_its_worker_goes_on(processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        stuck = NeverReturns(db_uri).as_job_of(rec).with_timeout(600).enqueue()  # runs in a child process
        queued = Record(db_uri, n=1).as_job_of(rec).in_group("later").enqueue()
    recruiter = processes.recruiter()
    worker = processes.worker("--group", "generic")
    start = wait_for(lambda: db.ledger.find_one({"job": str(stuck), "event": "start"}), message="the job to start")

    out = cli_in_process("jobs", "cancel", str(stuck), str(queued), "--reason", "operator", "--target", db_uri)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"{stuck}: cancelled; worker ")
    assert "halts it" in lines[0]
    assert lines[1] == f"{queued}: cancelled (it was waiting in the queue)"

    wait_for(lambda: not _alive(start["child_pid"]), timeout_s=20, message="the job's child process to be killed")
    archived = db.archived.find_one({"_id": stuck})
    assert archived["why"] == "cancelled"
    assert archived["last_execution"]["outcome"] == "cancelled"
    assert archived["last_execution"]["message"] == "operator"

    # The worker is free again: it runs the next job.
    with Recruiter.connect(db_uri) as rec:
        following = Record(db_uri, n=2).as_job_of(rec).enqueue()
    wait_for(lambda: db.archived.find_one({"_id": following, "why": "done"}), timeout_s=30,
             message="the next job to run on the same worker")
    assert "job.halted" in worker.log()
    assert db.ledger.count_documents({"job": str(queued)}) == 0

    again = cli_in_process("jobs", "cancel", str(stuck), "--target", db_uri)
    assert again.returncode == 1
    assert again.stdout.strip() == f"{stuck}: not cancelled, already archived (cancelled)"
    unknown = ObjectId()
    missing = cli_in_process("jobs", "cancel", str(unknown), "--target", db_uri)
    assert missing.returncode == 1
    assert missing.stdout.strip() == f"{unknown}: no such job"

    for p in (recruiter, worker):
        p.signal(signal.SIGTERM)
    assert recruiter.wait(30) == 0
    assert worker.wait(30) == 0


def test_a_bad_job_id_is_one_line() -> None:
    never = "mongodb://127.0.0.1:1/never-contacted"
    assert_one_line_error(run_cli("jobs", "cancel", "not-an-id", "--target", never), "not a job id")


def test_a_forced_stop_ends_a_worker_whose_cancelled_job_runs_on_in_a_thread(
        processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        job_id = WaitForRelease(db_uri, "never").as_job_of(rec).enqueue()  # a thread job that does not return
    processes.recruiter()
    worker = processes.worker("--grace-period", "1s")
    wait_for(lambda: db.ledger.find_one({"job": str(job_id), "event": "start"}), message="the job to start")
    assert cli_in_process("jobs", "cancel", str(job_id), "--target", db_uri).returncode == 0
    wait_for(lambda: "job.halted" in worker.log(), timeout_s=20, message="the worker to halt the job")

    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0  # the grace period over, it abandons the thread and ends
    assert "worker.exit_now" in worker.log()
    assert db.roster.count_documents({}) == 0
    assert db.archived.find_one({"_id": job_id})["why"] == "cancelled"
    release(db_uri, "never")
