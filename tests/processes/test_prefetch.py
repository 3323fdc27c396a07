"""Look-ahead (``worker start --prefetch N``) with the real CLI processes: a job handed out
ahead and never started goes back without counting an attempt, whatever ends its hold.

Each test runs a worker whose first job blocks until the test releases it, and hands the
worker a second job, which the recruiter gives to the worker's look-ahead lane (``ahead``
names its lock token, :mod:`recruiter.domain.lanes`). Then the worker is SIGKILLed,
stopped (gracefully or forced) or the second job is cancelled, and the second job must:
never have started there, go back with its attempt given back (no crash, no unproven
return, even ``at_most_once``) and run exactly once elsewhere; or, cancelled, never run.
The chaos test runs with ``--prefetch 2`` (tests/chaos/test_chaos.py).
"""

from __future__ import annotations

import signal
from typing import Any

import pytest

from recruiter import Recruiter
from recruiter.domain.lanes import lane_ids
from tests.conftest import wait_for
from tests.processes.conftest import Proc, Processes
from tests.processes.test_shutdown_and_recovery import cli, started
from tests.workables import Record, WaitForRelease, release


def held_ahead_by(db: Any, job_id: object, runner: str) -> Any:
    """Wait until a look-ahead lane of ``runner`` holds ``job_id`` ahead, not started; its entry."""
    def ahead() -> Any:
        job = db.scheduled.find_one({"_id": job_id, "locked": True})
        entry = job and db.roster.find_one({"_id": job["locked_by"], f"assigned_to.{job['locked_by']}": job_id})
        return entry if entry and entry.get("ahead") == job["lock_token"] else None
    entry = wait_for(ahead, timeout_s=30, message=f"job {job_id} held ahead by {runner}")
    assert entry["runner"] == runner
    assert entry["_id"] in lane_ids(runner, 1)
    assert entry.get("started") != entry["ahead"], "held ahead, not marked started"
    return entry


def one_blocked_one_ahead(processes: Processes, db: Any, db_uri: str, *extra: str,
                          at_most_once: bool = False) -> tuple[Proc, object, object]:
    """A worker ``first`` (``--prefetch 1``) running a job that waits for the ``first`` release,
    and holding a second job (a Record) ahead."""
    with Recruiter.connect(db_uri) as rec:
        blocked = WaitForRelease(db_uri, "first").as_job_of(rec).enqueue()
    processes.recruiter()
    worker = processes.worker("--id", "first", "--prefetch", "1", *extra)
    started(db, blocked)
    with Recruiter.connect(db_uri) as rec:
        builder = Record(db_uri, n=2).as_job_of(rec)
        ahead = (builder.at_most_once() if at_most_once else builder).enqueue()
    entry = held_ahead_by(db, ahead, "first")
    running = db.scheduled.find_one({"_id": blocked})["locked_by"]
    assert entry["_id"] != running, "the ahead job is on the other lane of the busy slot"
    return worker, blocked, ahead


def back_without_an_attempt(db: Any, job_id: object) -> Any:
    """Wait until ``job_id`` is back in the queue, unlocked; check that nothing was counted."""
    job = wait_for(lambda: db.scheduled.find_one({"_id": job_id, "locked": False}), timeout_s=30,
                   message=f"job {job_id} back in the queue")
    assert job["attempts"] == 0, "its attempt given back"
    assert job.get("crashes", 0) == 0
    assert job.get("unproven_returns", 0) == 0, "a proven return: it never started"
    return job


def ahead_back_without_an_attempt(db: Any, job_id: object) -> Any:
    job = back_without_an_attempt(db, job_id)
    assert job.get("executions", []) == [], "no execution: it never started"
    return job


def ran_once_on(db: Any, job_id: object, worker: str) -> Any:
    """Wait until ``job_id`` is archived done; check it ran exactly once, on ``worker``."""
    doc = wait_for(lambda: db.archived.find_one({"_id": job_id}), timeout_s=60, message=f"job {job_id} archived")
    assert doc["why"] == "done", doc
    assert doc["attempts"] == 1
    assert doc.get("crashes", 0) == 0
    assert doc.get("unproven_returns", 0) == 0
    assert [e["outcome"] for e in doc["executions"]] == ["done"]
    assert [e["worker"] for e in db.ledger.find({"job": str(job_id), "event": "start"})] == [worker]
    return doc


@pytest.mark.parametrize("at_most_once", [False, True], ids=["default", "at_most_once"])
def test_an_ahead_job_of_a_sigkilled_worker_runs_once_elsewhere_without_an_attempt(
        processes: Processes, db: Any, db_uri: str, at_most_once: bool) -> None:
    worker, blocked, ahead = one_blocked_one_ahead(processes, db, db_uri, at_most_once=at_most_once)
    worker.signal(signal.SIGKILL)
    worker.wait(10)
    release(db_uri, "first")  # the blocked job reruns (a crash) and ends
    processes.cleaner()
    processes.worker("--id", "second", "--prefetch", "1")

    doc = ran_once_on(db, ahead, lanes_of_second(db, ahead))
    assert doc["last_return"]["worker"] in lane_ids("first", 1)
    assert doc["last_return"].get("proven") is True, doc["last_return"]
    rerun = wait_for(lambda: db.archived.find_one({"_id": blocked}), timeout_s=60, message="the blocked job archived")
    assert rerun["why"] == "done"
    assert rerun["crashes"] == 1, "the running job of the killed worker is a crash, as without look-ahead"


def test_a_worker_restarted_with_its_id_gives_its_ahead_job_back_without_an_attempt(
        processes: Processes, db: Any, db_uri: str) -> None:
    """Restart recovery (no cleaner): the new process with the same ``--id`` takes over the
    lanes; the ``at_most_once`` job the old one held ahead is returned, not archived crashed."""
    worker, blocked, ahead = one_blocked_one_ahead(processes, db, db_uri, at_most_once=True)
    worker.signal(signal.SIGKILL)
    worker.wait(10)
    release(db_uri, "first")
    again = processes.worker("--id", "first", "--prefetch", "1")
    doc = wait_for(lambda: db.archived.find_one({"_id": ahead}), timeout_s=60, message="the ahead job archived")
    assert (doc["why"], doc["attempts"], doc.get("crashes", 0), doc.get("unproven_returns", 0)) == ("done", 1, 0, 0)
    assert doc["last_return"]["proven"] is True
    # Whoever came first gave it back: the restart's recovery, or a round taking back the lane of a
    # worker silent for three heartbeat intervals (a slow start of the new process).
    reason = doc["last_return"]["reason"]
    assert "was restarted" in reason or "missed its heartbeats" in reason, doc["last_return"]
    starts = list(db.ledger.find({"job": str(ahead), "event": "start"}))
    assert [(e["worker"] in lane_ids("first", 1), e["pid"]) for e in starts] == [(True, again.pid)]
    rerun = wait_for(lambda: db.archived.find_one({"_id": blocked}), timeout_s=60, message="the blocked job archived")
    assert (rerun["why"], rerun["crashes"]) == ("done", 1)


def lanes_of_second(db: Any, job_id: object) -> str:
    """The lane of worker ``second`` that ran ``job_id`` (either of its two)."""
    start = wait_for(lambda: db.ledger.find_one({"job": str(job_id), "event": "start"}), timeout_s=60,
                     message=f"job {job_id} started")
    assert start["worker"] in lane_ids("second", 1)
    return str(start["worker"])


def test_a_cancelled_ahead_job_never_starts_and_the_worker_goes_on(
        processes: Processes, db: Any, db_uri: str) -> None:
    worker, blocked, ahead = one_blocked_one_ahead(processes, db, db_uri)
    out = cli(db_uri, "jobs", "cancel", str(ahead), "--reason", "not wanted")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"{ahead}: cancelled"), out.stdout
    archived = db.archived.find_one({"_id": ahead})
    assert archived["why"] == "cancelled"

    release(db_uri, "first")
    assert wait_for(lambda: db.archived.find_one({"_id": blocked}), timeout_s=30,
                    message="the blocked job archived")["why"] == "done"
    with Recruiter.connect(db_uri) as rec:
        following = Record(db_uri, n=3).as_job_of(rec).enqueue()
    wait_for(lambda: db.archived.find_one({"_id": following, "why": "done"}), timeout_s=30,
             message="the worker takes work after the cancel")
    assert db.ledger.count_documents({"job": str(ahead)}) == 0, "the cancelled job never started"
    assert worker.popen.poll() is None
    assert db.archived.count_documents({"_id": ahead}) == 1


def test_a_graceful_stop_finishes_the_running_job_and_gives_the_ahead_one_back(
        processes: Processes, db: Any, db_uri: str) -> None:
    worker, blocked, ahead = one_blocked_one_ahead(processes, db, db_uri, "--grace-period", "10m")
    worker.signal(signal.SIGTERM)
    ahead_back_without_an_attempt(db, ahead)
    assert worker.popen.poll() is None, "still running the first job"
    release(db_uri, "first")
    assert worker.wait(30) == 0
    first = db.archived.find_one({"_id": blocked})
    assert (first["why"], first["attempts"], [e["outcome"] for e in first["executions"]]) == ("done", 1, ["done"])
    processes.worker("--id", "second", "--prefetch", "1")
    ran_once_on(db, ahead, lanes_of_second(db, ahead))


def test_a_forced_stop_gives_both_back_without_an_attempt(processes: Processes, db: Any, db_uri: str) -> None:
    worker, blocked, ahead = one_blocked_one_ahead(processes, db, db_uri, "--grace-period", "10m")
    worker.signal(signal.SIGTERM)
    wait_for(lambda: "worker.stopping" in worker.log(), timeout_s=30, message="the graceful stop")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    ahead_back_without_an_attempt(db, ahead)
    interrupted = back_without_an_attempt(db, blocked)
    assert interrupted["executions"][-1]["outcome"] == "interrupted"
    assert db.ledger.count_documents({"job": str(ahead)}) == 0

    release(db_uri, "first")
    processes.worker("--id", "second", "--prefetch", "1")
    ran_once_on(db, ahead, lanes_of_second(db, ahead))
    again = wait_for(lambda: db.archived.find_one({"_id": blocked}), timeout_s=60, message="the first job archived")
    assert again["why"] == "done"
    assert again["attempts"] == 1
    assert [e["outcome"] for e in again["executions"]] == ["interrupted", "done"]


def test_jobs_handed_to_an_idle_slot_together_start_in_the_order_served(
        processes: Processes, db: Any, db_uri: str) -> None:
    """The waiting bound (tests/unit/test_lanes_selection.py): a job taken at depth d starts
    after the d jobs of its slot before it, so jobs of one group and tenant handed out in one
    round start in FIFO order, the first at once."""
    processes.recruiter()
    processes.worker("--id", "solo", "--prefetch", "2")
    idle = {"runner": "solo", "available": True}
    # Batches of different sizes, so that the lanes' order of availability (which decides
    # their depths) is not the order of their ids.
    for batch, size in enumerate([2, 3, 1, 3, 2, 3]):
        wait_for(lambda: db.roster.count_documents(idle) == 3, timeout_s=30, message="the three lanes idle")
        with Recruiter.connect(db_uri) as rec:
            ids = [h.id for h in rec.enqueue_many(Record(db_uri, n=10 * batch + i).as_job_of(rec) for i in range(size))]
        wait_for(lambda: db.archived.count_documents({"_id": {"$in": ids}, "why": "done"}) == size,  # noqa: B023
                 timeout_s=30, message=f"batch {batch} done")
        starts = sorted(db.ledger.find({"job": {"$in": [str(i) for i in ids]}, "event": "start"}),
                        key=lambda e: e["at"])
        assert [e["job"] for e in starts] == [str(i) for i in ids], \
            f"batch {batch} {[str(i)[-4:] for i in ids]} started as {[(e['job'][-4:], e['worker']) for e in starts]}"
