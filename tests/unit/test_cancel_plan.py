"""The pure decision of a cancel (recruiter.domain.cancel.plan_cancel), state by state, and the
operations the store sends for it (recruiter.store.cancel.cancel_writes)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from bson import ObjectId

from recruiter.domain.cancel import (
    FINISHING,
    RUNS_ON,
    WAS_ASSIGNED,
    WAS_WAITING,
    CancelResult,
    halt_line,
    parse_job_id,
    plan_cancel,
)
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.store.cancel import cancel_writes
from tests.unit.test_outcome import NOW, T0, Job, locked_job


def queued() -> dict[str, Any]:
    return build_job_document(Job(1), JobOptions(group="g"), T0)


def test_a_waiting_job_is_deleted_only_if_still_unlocked_and_archived_without_an_execution() -> None:
    job = queued()
    plan = plan_cancel(job, None, NOW, "no longer wanted")
    writes = cancel_writes(plan)
    assert plan.state == WAS_WAITING
    assert writes.roster == []
    (delete,) = writes.scheduled
    assert delete._filter == {"_id": job["_id"], "locked": False, "attempts": 0}
    (upsert,) = writes.archived
    assert upsert._filter == {"_id": job["_id"]}
    assert upsert._upsert is True
    archived = upsert._doc["$setOnInsert"]
    assert archived["why"] == "cancelled"
    assert archived["done"] is False
    assert archived["cancel_reason"] == "no longer wanted"
    assert archived["archived_at"] == NOW
    assert "last_execution" not in archived
    assert archived["executions"] == []
    assert "status" not in archived
    assert archived["locked"] is False


def test_an_assigned_job_is_archived_with_a_cancelled_execution_and_its_assignment_removed() -> None:
    job = locked_job()
    entry = {"_id": "w1", "assigned_to": {"w1": job["_id"]}, "working_on": job["_id"],
             "working_since": T0 + timedelta(seconds=2), "pid": 42, "hostname": "h"}
    plan = plan_cancel(job, entry, NOW, None)
    writes = cancel_writes(plan)
    assert (plan.state, plan.worker) == (WAS_ASSIGNED, "w1")
    assert writes.scheduled[0]._filter == {"_id": job["_id"], "lock_token": {"$eq": job["lock_token"]}}
    archived = writes.archived[0]._doc["$setOnInsert"]
    last = archived["last_execution"]
    assert last["outcome"] == "cancelled"
    assert last["message"] == "cancelled"
    assert (last["worker"], last["pid"], last["hostname"]) == ("w1", 42, "h")
    assert last["assigned_at"] == job["locked_at"]
    assert last["started_at"] == entry["working_since"]
    assert last["ended_at"] == NOW
    assert archived["attempts"] == 1
    for field in ("locked_by", "locked_at", "lock_token", "lock_epoch"):
        assert field not in archived
    (fence,) = writes.roster
    assert fence._filter == {"_id": "w1", "assigned_to.w1": job["_id"]}
    # The entry keeps the job as halting: flow control counts it until the worker has stopped it.
    assert fence._doc == {"$unset": {"assigned_to": ""},
                          "$set": {"job": None, "halting": {"job": job["_id"], "group": job["group"],
                                                            "tenant": job.get("tenant"), "since": NOW}}}
    assert archived["halt"] == {"worker": "w1", "session": None, "in_thread": False, "requested_at": NOW,
                                "ended_at": None}


def test_a_job_shown_running_in_a_thread_runs_on_and_says_so() -> None:
    job = locked_job()
    session = ObjectId()
    entry = {"_id": "w1", "session": session, "assigned_to": {"w1": job["_id"]}, "working_on": job["_id"],
             "working_since": T0, "working_in_thread": True}
    plan = plan_cancel(job, entry, NOW, None)
    assert (plan.state, plan.worker) == (RUNS_ON, "w1")
    archived = cancel_writes(plan).archived[0]._doc["$setOnInsert"]
    assert archived["halt"] == {"worker": "w1", "session": session, "in_thread": True, "requested_at": NOW,
                                "ended_at": None}
    text = CancelResult(job["_id"], plan.state, worker="w1").describe()
    assert text == (f"{job['_id']}: cancelled, still running in a thread on worker w1 until it returns (a thread "
                    "cannot be stopped); its slot is held until then, and its outcome is discarded")
    # Another job in a thread on that slot, or a thread not shown running this job: not "running on".
    assert plan_cancel(job, {**entry, "working_on": ObjectId()}, NOW, None).state == WAS_ASSIGNED
    assert plan_cancel(job, {**entry, "working_in_thread": "yes"}, NOW, None).state == WAS_ASSIGNED


def test_the_halt_line_says_whether_the_job_has_stopped() -> None:
    assert halt_line({"why": "done"}) is None
    assert halt_line({"halt": "junk"}) is None
    running = {"halt": {"worker": "w1", "in_thread": True, "requested_at": NOW, "ended_at": None}}
    assert halt_line(running) == ("still running in a thread on worker w1 until it returns "
                                  "(its slot is held until then)")
    halting = {"halt": {"worker": "w1", "in_thread": False, "ended_at": None}}
    assert halt_line(halting) == "being halted on worker w1 (its slot is held until it has stopped)"
    ended = {"halt": {**running["halt"], "ended_at": NOW}}
    assert halt_line(ended, lambda d: "T") == "stopped at T on worker w1 (in its thread); its slot was held until then"
    gone = {"halt": {**ended["halt"], "worker_gone": True}}
    assert halt_line(gone, lambda d: "T") == ("ended with its worker w1, removed as dead at T; its slot was held "
                                              "until then")


def test_a_lock_whose_entry_no_longer_names_the_job_leaves_nothing_halting() -> None:
    job = locked_job()
    plan = plan_cancel(job, {"_id": "w1", "assigned_to": {"w1": ObjectId()}}, NOW, None)
    assert plan.fence is None
    assert "halt" not in cancel_writes(plan).archived[0]._doc["$setOnInsert"]


def test_a_job_not_yet_started_has_no_start_time() -> None:
    job = locked_job()
    plan = plan_cancel(job, {"_id": "w1", "assigned_to": {"w1": job["_id"]}}, NOW, None)
    assert cancel_writes(plan).archived[0]._doc["$setOnInsert"]["last_execution"]["started_at"] is None


def test_a_job_whose_outcome_is_recorded_is_left_alone() -> None:
    job = locked_job()
    plan = plan_cancel(job, {"_id": "w1", "outcome": {"job": job["_id"]}}, NOW, None)
    writes = cancel_writes(plan)
    assert (plan.state, plan.worker) == (FINISHING, "w1")
    assert writes.scheduled == writes.archived == writes.roster == []


def test_a_lock_whose_worker_is_gone_is_cancelled_without_touching_the_roster() -> None:
    job = locked_job()
    plan = plan_cancel(job, None, NOW, None)
    writes = cancel_writes(plan)
    assert plan.state == WAS_ASSIGNED
    assert writes.roster == []
    assert len(writes.scheduled) == 1


@pytest.mark.parametrize("text", ["", "xyz", "6b02242be2ebdb14e0a9d42", "6b02242be2ebdb14e0a9d42g"])
def test_job_ids_are_checked(text: str) -> None:
    with pytest.raises(ValueError, match="is not a job id"):
        parse_job_id(text)
    assert parse_job_id("6b02242be2ebdb14e0a9d426") == ObjectId("6b02242be2ebdb14e0a9d426")
