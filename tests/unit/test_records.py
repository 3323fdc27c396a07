"""The TypedDicts of recruiter.domain.records say what the writers write and what the checkers check.

Each writer's document has every required field of its TypedDict and no field the TypedDict does
not declare; the ``checked_*`` readers hand back the same document (typed) or the checker's reason.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from bson import ObjectId

from recruiter.domain.documents import (
    Malformed,
    checked_entry,
    checked_job,
    checked_outcome,
    entry_problem,
    outcome_problem,
)
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.domain.liveness import heartbeat_document, return_update
from recruiter.domain.outcome import Execution, Outcome, archived_document, decision_to_document
from recruiter.domain.records import (
    ArchivedJobDoc,
    DecisionDoc,
    ExecutionDoc,
    HeartbeatDoc,
    JobDoc,
    LastReturnDoc,
    OutcomeDoc,
    RosterEntryDoc,
)
from recruiter.domain.retry import Archive, MoveToGroup, RetryAt
from tests.unit.test_outcome import NOW, T0, Job, locked_job


def fields(shape: Any) -> tuple[set[str], set[str]]:
    """(required, all) fields of a TypedDict, read from its annotations.

    ``__required_keys__`` cannot be trusted here: under ``from __future__ import annotations``
    Python 3.11 counts a class-syntax ``NotRequired`` field as required.
    """
    every = set(shape.__annotations__)
    if not shape.__total__:
        return set(), every
    optional = {k for k, v in shape.__annotations__.items() if "NotRequired[" in (v if isinstance(v, str) else repr(v))}
    return every - optional, every


def assert_fits(doc: dict[str, Any], shape: Any) -> None:
    required, every = fields(shape)
    assert required <= set(doc), f"missing: {required - set(doc)}"
    assert set(doc) <= every, f"not declared in {shape.__name__}: {set(doc) - every}"


def execution(**error: Any) -> Execution:
    return Execution(attempt=1, kind="failed" if error else "done", worker="w1", pid=7, hostname="h",
                     scheduled_at=T0, started_at=T0, ended_at=NOW, assigned_at=T0, **error)


def test_a_new_job_is_a_job_document_and_passes_its_check() -> None:
    doc = build_job_document(Job(1), JobOptions(group="g", tenant="t", timeout_s=5.0, at_most_once=True), T0)
    assert_fits(dict(doc), JobDoc)
    assert checked_job(doc) is doc


def test_a_locked_and_an_archived_job_are_job_documents() -> None:
    job = locked_job(executions=2)
    assert_fits(job, JobDoc)
    assert checked_job(job) is job
    outcome = Outcome(job["_id"], job["lock_token"], 1, True, Archive("done"), execution(), result={"n": 1})
    assert_fits(archived_document(job, outcome.to_document(), NOW), ArchivedJobDoc)


def test_a_malformed_job_is_not_typed() -> None:
    job = locked_job()
    job["attempts"] = "three"
    found = checked_job(job)
    assert isinstance(found, Malformed)
    assert found.reason == "attempts: expected a whole number, got str"
    assert found.id == job["_id"]


@pytest.mark.parametrize("error", [{}, {"error_class": "builtins:ValueError", "message": "m", "trace": "t"},
                                   {"message": "interrupted"}])
def test_an_execution_is_an_execution_document(error: dict[str, Any]) -> None:
    assert_fits(execution(**error).to_document(), ExecutionDoc)


@pytest.mark.parametrize("decision", [Archive("done"), Archive("malformed", "why"), RetryAt(NOW),
                                      MoveToGroup("other", NOW)])
def test_an_outcome_is_an_outcome_document_and_passes_its_check(decision: Any) -> None:
    outcome = Outcome(ObjectId(), ObjectId(), 2, True, decision, execution(), result=None)
    doc = outcome.to_document()
    assert_fits(doc, OutcomeDoc)
    assert_fits(dict(decision_to_document(decision)), DecisionDoc)
    assert checked_outcome(doc) is doc


def test_the_heartbeat_and_the_last_return_are_their_documents() -> None:
    assert_fits(heartbeat_document("w1", ObjectId(), NOW, 1.0, 7, "h"), HeartbeatDoc)
    job = locked_job()
    _, update = return_update(job, {"pid": 7, "hostname": "h"}, NOW, "missed its heartbeats")
    assert_fits(update["$set"]["last_return"], LastReturnDoc)


def test_a_roster_entry_is_typed_when_well_formed_and_the_reason_otherwise() -> None:
    entry = {"_id": "w1", "work_on": ["g"], "available": True, "available_since": NOW, "created_at": NOW,
             "pid": 7, "hostname": "h", "session": ObjectId(), "heartbeat_interval_s": 1.0}
    assert_fits(entry, RosterEntryDoc)
    assert checked_entry(entry) is entry
    entry["outcome"] = {"job": ObjectId(), "token": ObjectId(), "executed": True}
    assert checked_entry(entry) == entry_problem(entry) == "outcome.decision: missing"


@pytest.mark.parametrize("outcome", [
    5, {"token": ObjectId(), "executed": True, "decision": {"archive": "done"}},
    {"job": ObjectId(), "token": "t", "executed": True, "decision": {"archive": "done"}},
    {"job": ObjectId(), "token": ObjectId(), "executed": True, "decision": {"retry_at": "soon"}},
])
def test_an_outcome_is_checked_once_named_in_its_entry_or_alone(outcome: Any) -> None:
    alone = outcome_problem(outcome)
    assert alone is not None
    assert checked_outcome(outcome) == alone
    in_entry = entry_problem({"_id": "w1", "outcome": outcome})
    assert in_entry == outcome_problem(outcome, "outcome")
    assert in_entry in (f"outcome.{alone}", f"outcome: {alone}")


def test_timedelta_arguments_of_the_policies() -> None:
    from recruiter.domain.durations import as_timedelta

    assert as_timedelta("1m30s", "wait") == timedelta(seconds=90)
    assert as_timedelta(2, "wait") == timedelta(seconds=2)
    with pytest.raises(ValueError, match=r"^wait must not be negative"):
        as_timedelta(-1, "wait")
