"""The pure decision of a cancel (recruiter.domain.cancel.plan_cancel), state by state, and the
operations the store sends for it (recruiter.store.cancel.cancel_writes)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from bson import ObjectId

from recruiter.domain.cancel import FINISHING, WAS_ASSIGNED, WAS_WAITING, parse_job_id, plan_cancel
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
    assert writes.scheduled[0]._filter == {"_id": job["_id"], "lock_token": job["lock_token"]}
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
    assert fence._doc == {"$unset": {"assigned_to": ""}, "$set": {"job": None}}


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
