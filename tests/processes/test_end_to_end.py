"""The three processes end to end, started as real CLI processes and killed for real."""

from __future__ import annotations

import signal
import time
from collections import Counter
from datetime import timedelta
from typing import Any

from recruiter import Recruiter
from recruiter.domain.retry import ExponentialBackoff, RetryManyTimes
from tests.conftest import wait_for
from tests.processes.conftest import Processes
from tests.workables import AlwaysFails, AsyncRecord, Record, SlowUntilKilled


def archived_count(db: Any) -> int:
    return db.archived.count_documents({})


def starts_by_job(db: Any) -> Counter[str]:
    return Counter(d["job"] for d in db.ledger.find({"event": "start"}, {"job": 1}))


def test_300_jobs_in_two_groups_are_each_archived_once_by_a_worker_of_their_group(
        processes: Processes, db: Any, db_uri: str) -> None:
    workers = {"alpha": ["alpha-1", "alpha-2"], "beta": ["beta-1", "beta-2"]}
    with Recruiter.connect(db_uri) as rec:
        ids = rec.enqueue_many(
            (Record(db_uri, n=i) if i % 3 else AsyncRecord(db_uri, n=i)).as_job_of(rec).in_group(
                "alpha" if i % 2 else "beta")
            for i in range(300)
        )
    processes.recruiter()
    processes.cleaner()
    for group, names in workers.items():
        for name, wake in zip(names, ("change-stream", "poll"), strict=True):
            processes.worker("--group", group, "--id", name, "--wake", wake)

    wait_for(lambda: archived_count(db) == 300, timeout_s=120, message="300 archived jobs")

    assert db.scheduled.count_documents({}) == 0
    archived = {d["_id"]: d for d in db.archived.find()}
    assert set(archived) == set(ids)
    assert Counter(d["why"] for d in archived.values()) == {"done": 300}
    for doc in archived.values():
        assert doc["attempts"] == 1
        # The slot that ran it, whichever of its look-ahead lanes held it.
        assert doc["last_execution"]["worker"] in workers[doc["group"]], doc
    starts = starts_by_job(db)
    assert len(starts) == 300, "every job ran exactly once"
    assert set(starts.values()) == {1}, "every job ran exactly once"
    ran_in = {d["job"]: d["worker"] for d in db.ledger.find({"event": "start"})}
    assert all(ran_in[str(i)] in workers[archived[i]["group"]] for i in ids)
    # Both workers of each group took part: the one watching its entry and the one polling it.
    assert {d["last_execution"]["worker"] for d in archived.values()} == {n for ns in workers.values() for n in ns}


def test_failing_job_follows_exponential_backoff_then_tried_too_many_times(
        processes: Processes, db: Any, db_uri: str) -> None:
    initial = timedelta(milliseconds=300)
    with Recruiter.connect(db_uri) as rec:
        job_id = AlwaysFails(db_uri).as_job_of(rec).retry_with(ExponentialBackoff(times=2, initial=initial)).enqueue()
    processes.recruiter()
    processes.worker()

    doc = wait_for(lambda: db.archived.find_one({"_id": job_id}), timeout_s=60, message="the failing job archived")

    assert doc["why"] == "tried-too-many-times"
    assert doc["attempts"] == 3
    assert db.ledger.count_documents({"job": str(job_id), "event": "start"}) == 3
    executions = doc["executions"]
    assert [e["attempt"] for e in executions] == [1, 2, 3]
    assert all(e["outcome"] == "failed" and e["class"] == "builtins:ValueError" for e in executions), executions
    # Each retry was scheduled `initial * 2**(n-1)` after the failure that caused it.
    delays = [executions[i + 1]["scheduled_at"] - executions[i]["ended_at"] for i in range(2)]
    assert delays == [initial, initial * 2]
    # ...and did not start before it was due.
    assert all(e["started_at"] >= e["assigned_at"] >= e["scheduled_at"] for e in executions)


def test_sigkilled_worker_is_removed_and_its_job_runs_again_elsewhere(
        processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        # The default policy (DoNotDoItAgain): a crash is not a failure, the policy is not asked.
        job_id = SlowUntilKilled(db_uri, first_attempt_s=120).as_job_of(rec).enqueue()
    processes.recruiter()
    processes.cleaner()
    first = processes.worker("--id", "first")
    first_start = wait_for(lambda: db.ledger.find_one({"job": str(job_id), "event": "start"}),
                           timeout_s=30, message="the long job to start")
    assert first_start["worker"] == "first"
    # Killed once its heartbeat shows the job running: a crash, not a return (recruiter.liveness).
    wait_for(lambda: db.heartbeats.find_one({"ids": "first", "slots.first.working_on": job_id}), timeout_s=30,
             message="the heartbeat to show the job running")
    processes.worker("--id", "second")

    first.signal(signal.SIGKILL)
    first.wait(10)

    doc = wait_for(lambda: db.archived.find_one({"_id": job_id}), timeout_s=60, message="the job to finish elsewhere")
    assert doc["why"] == "done"
    assert db.roster.find_one({"_id": "first"}) is None, "the cleaner removed the dead worker"
    crashed, done = doc["executions"]
    assert crashed["crashed"] is True
    assert crashed["worker"] == "first"
    assert crashed["attempt"] == 1
    assert crashed["class"] == "recruiter.retry:WorkerCrashed"
    assert done["outcome"] == "done"
    assert done["worker"] == "second"
    assert done["attempt"] == 2
    assert doc["crashes"] == 1
    assert doc["attempts"] == 2


def _leader(db: Any) -> dict[str, Any]:
    return db.metadata.find_one({"_id": "recruiter"}) or {}


def test_standby_recruiter_takes_over_after_sigkill_without_losing_or_doubling_jobs(
        processes: Processes, db: Any, db_uri: str) -> None:
    lease_ttl_s = 2.0
    recruiters = [processes.recruiter(), processes.recruiter()]
    processes.cleaner()
    for i in range(3):
        processes.worker("--id", f"w{i}")
    with Recruiter.connect(db_uri) as rec:
        ids = rec.enqueue_many(Record(db_uri, n=i, sleep_s=0.01).as_job_of(rec) for i in range(200))

    wait_for(lambda: archived_count(db) >= 30, timeout_s=60, message="some jobs done before the kill")
    lease = wait_for(lambda: _leader(db).get("owner") and _leader(db), message="a leader")
    leader_pid = int(lease["owner"].split(":")[1])
    leader = next(p for p in recruiters if p.pid == leader_pid)
    leader.signal(signal.SIGKILL)
    killed_at = time.monotonic()
    leader.wait(10)

    wait_for(lambda: _leader(db).get("epoch", 0) > lease["epoch"], timeout_s=3 * lease_ttl_s,
             interval_s=0.02, message="the standby to take the lease")
    takeover_s = time.monotonic() - killed_at
    print(f"standby took over {takeover_s:.2f}s after the leader was killed (lease {lease_ttl_s}s)")
    assert takeover_s <= lease_ttl_s + 1.0
    new_owner = int(_leader(db)["owner"].split(":")[1])
    assert new_owner != leader_pid

    wait_for(lambda: archived_count(db) == 200, timeout_s=120, message="all 200 jobs archived")
    assert {d["_id"] for d in db.archived.find({}, {"_id": 1})} == set(ids)
    assert db.archived.count_documents({"why": "done"}) == 200
    starts = starts_by_job(db)
    assert len(starts) == 200, "no job was lost or run twice"
    assert set(starts.values()) == {1}, "no job was lost or run twice"


def test_sigterm_lets_the_running_job_finish_and_be_archived_before_exit(
        processes: Processes, db: Any, db_uri: str) -> None:
    processes.recruiter()
    worker = processes.worker("--id", "busy")
    with Recruiter.connect(db_uri) as rec:
        job_id = Record(db_uri, n=1, sleep_s=2.0).as_job_of(rec).enqueue()
    wait_for(lambda: db.ledger.find_one({"job": str(job_id), "event": "start"}), timeout_s=30,
             message="the job to start")

    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0

    # Checked once, right after the exit: nothing was left for later.
    assert db.ledger.find_one({"job": str(job_id), "event": "end"}) is not None
    doc = db.archived.find_one({"_id": job_id})
    assert doc is not None
    assert doc["why"] == "done"
    assert db.roster.find_one({"_id": "busy"}) is None, "the worker deregistered"


def test_a_paused_worker_declared_dead_cannot_record_its_outcome(
        processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        job_id = SlowUntilKilled(db_uri, first_attempt_s=4).as_job_of(rec).retry_with(
            RetryManyTimes(times=3, wait=0)).enqueue()
    processes.recruiter()
    processes.cleaner()
    zombie = processes.worker("--id", "zombie")
    wait_for(lambda: db.ledger.find_one({"job": str(job_id), "event": "start"}), timeout_s=30,
             message="the first attempt to start")
    # Paused once its heartbeat shows the job running: a crash, not a return (recruiter.liveness).
    wait_for(lambda: db.heartbeats.find_one({"ids": "zombie", "slots.zombie.working_on": job_id}), timeout_s=30,
             message="the heartbeat to show the job running")
    zombie.signal(signal.SIGSTOP)
    try:
        wait_for(lambda: db.roster.find_one({"_id": "zombie"}) is None, timeout_s=30,
                 message="the cleaner to declare the paused worker dead")
        processes.worker("--id", "live")
        doc = wait_for(lambda: db.archived.find_one({"_id": job_id}), timeout_s=30, message="the job done elsewhere")
    finally:
        zombie.signal(signal.SIGCONT)
    # The zombie wakes up and finds its entry gone. Either its job ends first and its outcome
    # is discarded (then it registers again), or its heartbeat finds out first: a job in a
    # thread cannot be stopped, so it ends its process (status 70) rather than run beside the rerun.
    wait_for(lambda: "job.outcome_discarded" in zombie.log() or zombie.popen.poll() is not None, timeout_s=30,
             message="the zombie to discard its outcome or exit")
    if zombie.popen.poll() is None:
        wait_for(lambda: db.roster.find_one({"_id": "zombie"}), timeout_s=30, message="the zombie to register again")
    else:
        assert zombie.popen.poll() == 70
        assert "worker.exit_now" in zombie.log()
    assert doc["why"] == "done"
    assert [(e["worker"], e["outcome"]) for e in doc["executions"]] == [("zombie", "crashed"), ("live", "done")]
    assert db.archived.count_documents({}) == 1
    assert db.scheduled.count_documents({}) == 0
