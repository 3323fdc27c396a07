"""Fan-in with the real CLI processes (issue 42): 1 000 parts, then one final job that runs
once, after every part is archived; the same with the leader SIGKILLed in the middle (a standby
takes over); and a job waited for that is deleted by hand while its dependents wait (gone).

A worker SIGKILLed holding a step is tests/processes/test_workflows.py's."""

from __future__ import annotations

import signal
from typing import Any

from recruiter import Recruiter, fan_in
from tests.conftest import long_or_short, wait_for
from tests.flow_workables import Part, Step, Sum
from tests.processes.conftest import Processes

# Parts of the fan-in: 1 000 (issue 42's size; its dependent is stored with edges, over 100).
# Of the fan-in whose leader is SIGKILLed: 1 000 in the long tier (RECRUITER_LONG_TESTS=1), 150
# by default (CI's two cores). RECRUITER_FAN_IN_PARTS sets both. Many slots, each holding two
# jobs ahead.
FAN_IN_PARTS = int(long_or_short("RECRUITER_FAN_IN_PARTS", 1000, 1000))
PARTS = int(long_or_short("RECRUITER_FAN_IN_PARTS", 150, 1000))
SLOTS = ["--concurrency", "16", "--prefetch", "2"]


def _enqueue(db_uri: str, parts: int) -> list[Any]:
    with Recruiter.connect(db_uri) as rec:
        return rec.enqueue_many(fan_in(rec, [Part(n) for n in range(parts)], Sum(db_uri)))


def _check_ran_once_after_all(db: Any, jobs: list[Any]) -> None:
    *parts, final = jobs
    wait_for(lambda: db.archived.find_one({"_id": final}), timeout_s=60 + len(parts) / 5,
             message="the final job archived")
    assert db.archived.count_documents({"_id": {"$in": parts}, "why": "done"}) == len(parts)
    assert db.archived.find_one({"_id": final})["why"] == "done"
    starts = list(db.ledger.find({"job": str(final), "event": "start"}))
    assert len(starts) == 1, f"the final job started {len(starts)} times"
    last_part = max(d["archived_at"] for d in db.archived.find({"_id": {"$in": parts}}, {"archived_at": 1}))
    assert starts[0]["at"] >= last_part, "the final job started before its last part was archived"
    assert starts[0]["total"] == sum(range(len(parts)))
    assert db.scheduled.count_documents({}) == 0


def test_a_fan_in_of_many_parts_runs_its_final_job_once_after_every_part(
        processes: Processes, db: Any, db_uri: str) -> None:
    jobs = _enqueue(db_uri, FAN_IN_PARTS)
    processes.recruiter()
    processes.worker(*SLOTS)
    _check_ran_once_after_all(db, jobs)


def test_the_leader_sigkilled_during_a_fan_in_a_standby_releases_the_final_job_once(
        processes: Processes, db: Any, db_uri: str) -> None:
    jobs = _enqueue(db_uri, PARTS)
    recruiters = [processes.recruiter(), processes.recruiter()]
    processes.cleaner()
    processes.worker(*SLOTS)
    wait_for(lambda: db.archived.count_documents({}) >= PARTS // 3, timeout_s=60 + PARTS / 5,
             message="a third of the parts archived")
    lease = db.metadata.find_one({"_id": "recruiter"}) or {}
    leader = next(p for p in recruiters if str(lease.get("owner", "")).split(":")[1:2] == [str(p.pid)])
    leader.signal(signal.SIGKILL)
    leader.wait(10)
    assert db.archived.count_documents({}) < PARTS, "every part was archived before the leader was killed"
    wait_for(lambda: (db.metadata.find_one({"_id": "recruiter"}) or {}).get("epoch", 0) > lease["epoch"],
             timeout_s=30, message="the standby to take the lease")
    _check_ran_once_after_all(db, jobs)


def test_a_job_waited_for_deleted_by_hand_resolves_its_dependents_as_gone(
        processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        upstream = Step(db_uri, n=1).as_job_of(rec).schedule_in(hours=1).enqueue()
        cancelled = Step(db_uri, n=2).as_job_of(rec).after(upstream).enqueue()
        runs = Step(db_uri, n=3).as_job_of(rec).after(upstream, if_failed="run").enqueue()
    processes.recruiter()
    processes.worker()
    wait_for(lambda: db.roster.count_documents({}) >= 1, timeout_s=60, message="the worker registered")
    assert db.scheduled.count_documents({"after.held": True}) == 2  # both wait
    db.scheduled.delete_one({"_id": upstream})  # an operator's delete: no archived copy either

    wait_for(lambda: db.archived.count_documents({"_id": {"$in": [cancelled, runs]}}) == 2, timeout_s=60,
             message="both dependents archived")
    gone = db.archived.find_one({"_id": cancelled})
    assert gone["why"] == "upstream-failed"
    assert gone["reason"] == f"job {upstream} it waited for ended gone"
    assert db.archived.find_one({"_id": runs})["why"] == "done"
    assert [e["n"] for e in db.ledger.find({"event": "start"})] == [3]  # the one that runs anyway, once
