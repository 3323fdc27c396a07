"""Shutdown, restart recovery, remote stop, blocked event loops and the memory limit, with the real CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

from recruiter import Recruiter
from recruiter.domain.retry import RetryManyTimes
from tests.conftest import REPO, wait_for
from tests.processes.conftest import Processes
from tests.workables import AsyncWaitForRelease, BlocksTheLoop, Record, WaitForRelease, release


def cli(db_uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "recruiter.cli", *args, "--target", db_uri],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def started(db: Any, job_id: Any, count: int = 1) -> Any:
    return wait_for(lambda: db.ledger.count_documents({"job": str(job_id), "event": "start"}) >= count,
                    timeout_s=60, message=f"job {job_id} started {count} time(s)")


def test_a_job_that_blocks_the_event_loop_does_not_silence_the_heartbeat(
        processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        job_id = BlocksTheLoop(db_uri, seconds=5).as_job_of(rec).retry_with(RetryManyTimes(3)).enqueue()
    processes.recruiter()
    # The job blocks the loop five times --considered-dead-after.
    processes.cleaner("--considered-dead-after", "1s", "--heartbeat-interval", "200ms")
    processes.worker("--id", "blocked", "--heartbeat-interval", "200ms")
    doc = wait_for(lambda: db.archived.find_one({"_id": job_id}), timeout_s=60, message="the job archived")
    assert doc["why"] == "done"
    assert doc["attempts"] == 1
    assert doc.get("crashes", 0) == 0
    assert db.ledger.count_documents({"job": str(job_id), "event": "start"}) == 1


def test_sigterm_waits_for_the_grace_period_then_gives_the_job_back(
        processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        job_id = WaitForRelease(db_uri, "slow").as_job_of(rec).enqueue()  # DoNotDoItAgain
    processes.recruiter()
    worker = processes.worker("--id", "graceful", "--grace-period", "1500ms")
    started(db, job_id)
    sent = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert time.monotonic() - sent >= 1.4, "it waited for the grace period"
    log = worker.log()
    assert "worker.grace_period_over" in log
    assert "job.interrupted" in log
    assert "worker.exit_now" in log
    job = wait_for(lambda: (j := db.scheduled.find_one({"_id": job_id})) and not j["locked"] and j,
                   timeout_s=30, message="the job back in the queue")
    assert job["attempts"] == 0
    assert job.get("crashes", 0) == 0, "a forced stop counts neither an attempt nor a crash"
    assert job["status"] == "retrying"
    assert job["executions"][-1]["outcome"] == "interrupted"

    release(db_uri, "slow")
    processes.worker("--id", "next")
    doc = wait_for(lambda: db.archived.find_one({"_id": job_id}), timeout_s=60, message="the job archived")
    assert doc["why"] == "done"
    assert doc["attempts"] == 1
    assert doc.get("crashes", 0) == 0
    assert [e["outcome"] for e in doc["executions"]] == ["interrupted", "done"]


def force_stop_while_running(processes: Processes, db: Any, job_id: object) -> None:
    """Run ``job_id`` on a worker with a long grace period, then stop it twice: the second
    signal forces the stop while the job runs; the worker exits 0."""
    processes.recruiter()
    worker = processes.worker("--id", "impatient", "--grace-period", "10m")
    started(db, job_id)
    worker.signal(signal.SIGTERM)
    wait_for(lambda: "worker.stopping" in worker.log(), timeout_s=30, message="the graceful stop")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_a_second_signal_forces_the_stop_at_once(processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        job_id = AsyncWaitForRelease(db_uri, "never").as_job_of(rec).enqueue()
    force_stop_while_running(processes, db, job_id)
    job = wait_for(lambda: (j := db.scheduled.find_one({"_id": job_id})) and not j["locked"] and j,
                   timeout_s=30, message="the job back in the queue")
    assert job["attempts"] == 0
    assert job.get("crashes", 0) == 0, "a forced stop counts neither an attempt nor a crash"
    assert job["executions"][-1]["outcome"] == "interrupted"
    assert db.ledger.count_documents({"job": str(job_id), "event": "end"}) == 0


def test_a_forced_stop_archives_a_running_at_most_once_job_instead_of_giving_it_back(
        processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        job_id = AsyncWaitForRelease(db_uri, "never").as_job_of(rec).at_most_once().enqueue()
    force_stop_while_running(processes, db, job_id)
    archived = wait_for(lambda: db.archived.find_one({"_id": job_id}), timeout_s=30, message="the job archived")
    assert archived["why"] == "interrupted", "an at_most_once job that started is never given back to run again"
    assert "at_most_once" in archived["reason"]
    assert archived["last_execution"]["outcome"] == "interrupted"
    assert db.scheduled.count_documents({"_id": job_id}) == 0
    assert db.ledger.count_documents({"job": str(job_id), "event": "start"}) == 1


def test_workers_list_and_stop(processes: Processes, db: Any, db_uri: str) -> None:
    worker = processes.worker("--id", "remote", "--concurrency", "2")
    wait_for(lambda: db.roster.count_documents({}) == 4, message="four roster entries: two slots and their lanes")
    listing = cli(db_uri, "workers", "list")
    assert listing.returncode == 0, listing.stderr
    assert "remote-0" in listing.stdout
    assert "remote-1" in listing.stdout
    assert "remote-1~1" in listing.stdout
    assert "idle" in listing.stdout

    unknown = cli(db_uri, "workers", "stop", "nobody")
    assert unknown.returncode != 0
    assert unknown.stderr.count("\n") == 1
    assert "nobody" in unknown.stderr
    stop = cli(db_uri, "workers", "stop", "remote")
    assert stop.returncode == 0
    assert stop.stdout == "asked 2 worker(s) to stop: remote-0, remote-1\n"  # its lanes are asked too
    assert worker.wait(30) == 0
    assert db.roster.count_documents({}) == 0


def test_a_worker_restarted_with_its_id_releases_what_it_held(
        processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        job_id = WaitForRelease(db_uri, "k").as_job_of(rec).retry_with(RetryManyTimes(3)).enqueue()
    processes.recruiter()
    first = processes.worker("--id", "phoenix")
    started(db, job_id)

    second = processes.worker("--id", "phoenix")
    assert second.wait(30) != 0
    assert "in use by pid" in second.log()
    assert "Traceback" not in second.log()

    first.signal(signal.SIGKILL)
    first.wait(10)
    release(db_uri, "k")
    # No cleaner runs: the new process sees on this machine that the old one is gone.
    third = processes.worker("--id", "phoenix")
    try:
        doc = wait_for(lambda: db.archived.find_one({"_id": job_id}), timeout_s=60, message="the job archived")
    except AssertionError:
        for name in ("roster", "heartbeats", "scheduled", "metadata"):
            print(f"--- {name} ---")
            for d in db[name].find():
                print(d)
        raise
    assert doc["why"] == "done"
    assert doc["attempts"] == 2
    assert doc["crashes"] == 1
    assert [e["outcome"] for e in doc["executions"]] == ["crashed", "done"]
    assert "worker.recovered" in third.log()
    assert db.roster.find_one({"_id": "phoenix"})["pid"] == third.pid


def test_a_worker_over_its_memory_limit_is_replaced_by_its_supervisor(
        processes: Processes, db: Any, db_uri: str) -> None:
    bad = cli(db_uri, "worker", "start", "--memory-limit", "lots")
    assert bad.returncode == 2
    assert "invalid size 'lots'" in bad.stderr
    assert "Traceback" not in bad.stderr
    with Recruiter.connect(db_uri) as rec:
        rec.enqueue_many(Record(db_uri, n=i).as_job_of(rec) for i in range(3))
    processes.recruiter()
    supervisor = processes.worker("--id", "hungry", "--memory-limit", "1MB")  # always over it
    wait_for(lambda: db.archived.count_documents({"why": "done"}) == 3, timeout_s=120, message="three jobs")
    pids = {d["pid"] for d in db.ledger.find({"event": "start"})}
    assert len(pids) == 3, "each job ran in a fresh worker process"
    assert supervisor.pid not in pids, "each job ran in a fresh worker process"
    wait_for(lambda: supervisor.log().count("supervisor.replacing_worker") >= 3, timeout_s=30,
             message="the supervisor replacing its worker")
    assert "worker.memory_limit" in supervisor.log()
    # Each worker process registers its slot and the slot's look-ahead lane.
    wait_for(lambda: supervisor.log().count("worker.registered") >= 8, timeout_s=30,
             message="the fourth worker to be up")
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(30) == 0
