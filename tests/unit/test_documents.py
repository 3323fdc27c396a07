"""The reader of untrusted documents: what it accepts, what it names, and that no
corruption of a job or roster entry makes it, or what runs after it, raise."""

from __future__ import annotations

import copy
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import bson
import pytest
from bson import DatetimeMS, Int64, ObjectId
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recruiter.domain.attempt import judge_crash
from recruiter.domain.candidates import candidate_from
from recruiter.domain.control import cursor_changes, cursor_document, read_cursor, read_switches
from recruiter.domain.documents import (
    WarnOnce,
    check_job,
    cursor_problem,
    entry_problem,
    job_problem,
    outcome_problem,
)
from recruiter.domain.job import JobOptions, Priority, Status, build_job_document
from recruiter.domain.outcome import archived_document, crash_update, is_archive, jobs_referenced_by, reschedule_update
from recruiter.domain.quarantine import MALFORMED, malformed_outcome, quarantine_copies, quarantined_document
from recruiter.domain.selection import Cursor, FreeWorker, select
from recruiter.store.scheduled import UNREACHABLE
from tests.unit.test_candidates import FakeCollection
from tests.unit.test_outcome import Job, locked_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(hours=1)


def queued_job(**changes: Any) -> dict[str, Any]:
    doc = build_job_document(Job(1), JobOptions(group="g", tenant="acme", tags=("a",), timeout_s=5), T0)
    doc.update(changes)
    return doc


def without(doc: dict[str, Any], field: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != field}


# -- what the reader accepts -----------------------------------------------------------------


def test_documents_the_producer_and_the_recruiter_write_are_well_formed() -> None:
    assert job_problem(queued_job()) is None
    assert job_problem(build_job_document(Job(2), JobOptions(), T0)) is None  # default tenant: null
    assert job_problem(locked_job()) is None
    assert job_problem(locked_job(crashes=2, crash_pending=True, last_execution={
        "attempt": 1, "scheduled_at": T0, "started_at": T0, "ended_at": T0, "message": "died"})) is None


def test_numbers_written_by_mongosh_as_doubles_and_unknown_fields_are_accepted() -> None:
    assert job_problem(queued_job(attempts=0.0, crashes=Int64(1), priority="high", extra={"x": [1]})) is None
    assert job_problem(queued_job(tenant=None, timeout_s=None, last_execution=None)) is None
    assert job_problem(queued_job(group="reports.daily", tenant="a,b")) is None  # names older versions allowed
    assert job_problem(without(without(queued_job(), "tags"), "executions")) is None


# -- what it names ----------------------------------------------------------------------------


@pytest.mark.parametrize(("changes", "reason"), [
    ({"tenant": 7}, "tenant: expected a non-empty string or null, got int"),
    ({"tenant": ""}, "tenant: expected a non-empty string or null, got an empty string"),
    ({"group": 3}, "group: expected a non-empty string, got int"),
    ({"group": "*"}, "group: '*' is reserved for workers that take any group"),
    ({"group": "a\x00b"}, "group: expected a string without NUL characters"),
    ({"group": {"name": "g"}}, "group: expected a non-empty string, got dict"),
    ({"tenant": "t" * 201}, "tenant: too long: 201 characters, at most 200"),
    ({"status": "running"}, "status: expected one of queued, retrying, assigned, got 'running'"),
    ({"status": "assigned"}, "status: expected queued or retrying for an unlocked job, got 'assigned'"),
    ({"locked": "false"}, "locked: expected true or false, got str"),
    ({"locked": True}, "status: expected 'assigned' for a locked job, got 'queued'"),
    ({"priority": 1}, "priority: expected one of high, low, got int"),
    ({"scheduled_at": "2026-01-01"}, "scheduled_at: expected a date, got str"),
    ({"scheduled_at": DatetimeMS(2**62)},
     "scheduled_at: expected a date, got a date outside the range Python can read"),
    ({"attempts": math.nan}, "attempts: expected a whole number, got NaN"),
    ({"attempts": math.inf}, "attempts: expected a whole number, got infinity"),
    ({"attempts": 1.5}, "attempts: expected a whole number, got float"),
    ({"attempts": -1}, "attempts: expected a whole number from 0 to 2147483647, got -1"),
    ({"attempts": 2**62}, "attempts: expected a whole number from 0 to 2147483647, got 4611686018427387904"),
    ({"attempts": True}, "attempts: expected a whole number, got bool"),
    ({"crashes": "2"}, "crashes: expected a whole number, got str"),
    ({"workable": "pkg:Job"}, "workable: expected an embedded document, got str"),
    ({"workable": {"parameters": {}}}, "workable.class: missing"),
    ({"workable": {"class": "a:B", "parameters": [1]}},
     "workable.parameters: expected an embedded document or null, got list"),
    ({"workable": {"class": "a:B", "method": 5}}, "workable.method: expected a non-empty string or null, got int"),
    ({"retry_policy": None}, "retry_policy: expected an embedded document, got null"),
    ({"timeout_s": 0}, "timeout_s: expected a positive number of seconds or null, got 0"),
    ({"timeout_s": math.nan}, "timeout_s: expected a positive number of seconds or null, got NaN"),
    ({"tags": "a,b"}, "tags: expected an array, got str"),
    ({"tags": ["a", 5]}, "tags.1: expected a non-empty string, got int"),
    ({"executions": [{}, "x"]}, "executions.1: expected an embedded document, got str"),
    ({"last_execution": "boom"}, "last_execution: expected an embedded document or null, got str"),
    ({"last_execution": {"attempt": "1"}}, "last_execution.attempt: expected a whole number or null, got str"),
    ({"last_execution": {"ended_at": 5}}, "last_execution.ended_at: expected a date or null, got int"),
    ({"_id": {"a": 1}}, "_id: expected an ObjectId, a string or a number, got dict"),
])
def test_a_malformed_job_is_named_by_its_field(changes: dict[str, Any], reason: str) -> None:
    assert job_problem(queued_job(**changes)) == reason


@pytest.mark.parametrize("field", ["_id", "group", "status", "locked", "priority", "scheduled_at", "created_at",
                                   "attempts", "workable", "retry_policy"])
def test_a_missing_required_field_is_named(field: str) -> None:
    assert job_problem(without(queued_job(), field)) == f"{field}: missing"


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("lock_token", "abc", "lock_token: expected an ObjectId, got str"),
    ("locked_by", None, "locked_by: expected a non-empty string, got null"),
    ("locked_at", 0, "locked_at: expected a date, got int"),
])
def test_a_malformed_lock_is_named(field: str, value: Any, reason: str) -> None:
    assert job_problem({**locked_job(), field: value}) == reason
    assert job_problem(without(locked_job(), field)) == f"{field}: missing"


def test_check_job_keeps_the_document_and_its_id_for_the_quarantine() -> None:
    doc = queued_job(tenant=3)
    found = check_job(doc)
    assert found is not None
    assert found.id == doc["_id"]
    assert found.document is doc
    assert check_job(queued_job()) is None
    assert check_job([1, 2]) is not None  # not even a document


@pytest.mark.parametrize(("entry", "reason"), [
    ({"work_on": "billing"}, "work_on: expected an array, got str"),
    ({"work_on": ["a", 1]}, "work_on.1: expected a non-empty string, got int"),
    ({"available": "yes"}, "available: expected true or false, got str"),
    ({"available_since": "2026"}, "available_since: expected a date or null, got str"),
    ({"last_seen_at": None}, "last_seen_at: expected a date, got null"),
    ({"_id": 5}, "_id: expected a non-empty string, got int"),
    ({"assigned_to": ["x"]}, "assigned_to: expected an embedded document or null, got list"),
    ({"outcome": "done"}, "outcome: expected an embedded document, got str"),
    ({"outcome": {"token": ObjectId(), "executed": True, "decision": {"archive": "done"}}}, "outcome.job: missing"),
    ({"outcome": {"job": 1, "token": ObjectId(), "executed": 1, "decision": {"archive": "done"}}},
     "outcome.executed: expected true or false, got int"),
    ({"outcome": {"job": 1, "token": ObjectId(), "executed": True, "decision": {"retry_at": "soon"}}},
     "outcome.decision.retry_at: expected a date, got str"),
    ({"outcome": {"job": 1, "token": ObjectId(), "executed": True, "decision": []}},
     "outcome.decision: expected an embedded document, got list"),
])
def test_a_malformed_roster_entry_is_named_by_its_field(entry: dict[str, Any], reason: str) -> None:
    good = {"_id": "w1", "work_on": ["*"], "available": True, "available_since": T0, "last_seen_at": T0}
    assert entry_problem(good) is None
    assert entry_problem({**good, **entry}) == reason


def test_metadata_documents() -> None:
    assert cursor_problem({"_id": "fairness", "last_group": "g", "last_tenant": {"g": ""}, "counts": {"g": {"%": 2}}}) \
        is None
    assert cursor_problem({"last_tenant": "x"}) == "last_tenant: expected an embedded document, got str"
    assert cursor_problem({"counts": {"g": {"t": "2"}}}) == "counts.g.t: expected a whole number, got str"
    cursor, problem = read_cursor({"last_group": 5})
    assert cursor == Cursor()
    assert problem == "last_group: expected a non-empty string or null, got int"
    warned = WarnOnce()
    logged: list[dict[str, Any]] = []

    class Log:
        def warning(self, event: str, **kw: Any) -> None:
            logged.append({"event": event, **kw})

    for _ in range(3):  # read every round, warned about once
        paused = read_switches({"groups": ["a", {"b": 1}], "tenants": ["t"]}, warned, Log())
    assert paused.groups == frozenset()
    assert paused.tenants == frozenset({"t"})
    assert [e["reason"] for e in logged] == ["groups.1: expected a non-empty string, got dict"]


def test_a_replaced_cursor_document_reads_back_as_the_same_cursor() -> None:
    cursor = Cursor("g.1", {"g.1": "acme$", "h": ""}, {("g.1", "acme$"): 2, ("h", ""): 1})
    doc = cursor_document(cursor)
    assert read_cursor(doc) == (cursor, None)


# -- quarantine copies ------------------------------------------------------------------------


def test_the_archived_copy_keeps_the_document_with_why_and_reason() -> None:
    doc = queued_job(tenant=3)
    found = check_job(doc)
    assert found is not None
    copy_ = quarantined_document(found, NOW)
    assert copy_["why"] == MALFORMED
    assert copy_["reason"].startswith("tenant:")
    assert copy_["tenant"] == 3
    assert copy_["archived_at"] == NOW
    assert "_id" not in copy_
    assert len(quarantine_copies([found, found], NOW)) == 1  # one archive and one delete per job


def test_field_names_an_update_cannot_store_are_kept_as_raw_bson() -> None:
    doc = queued_job(group=5, **{"$where": "x", "a.b": 1})
    found = check_job(doc)
    assert found is not None
    copy_ = quarantined_document(found, NOW)
    assert bson.decode(copy_["original_bson"])["$where"] == "x"
    assert copy_["reason"].startswith("group:")


def test_a_worker_handed_a_malformed_job_archives_it_as_malformed_without_running_it() -> None:
    job = locked_job(created_at="yesterday")
    problem = job_problem(job)
    assert problem == "created_at: expected a date, got str"
    outcome = malformed_outcome(job, problem).to_document()
    assert is_archive(outcome)
    assert not outcome["executed"]
    assert outcome["decision"]["reason"] == problem
    archived = archived_document(job, outcome, NOW)
    assert archived["why"] == MALFORMED
    assert archived["reason"] == problem
    assert archived["attempts"] == 0


def test_judge_crash_survives_a_job_without_created_at() -> None:
    job = without(locked_job(crash_pending=True, crashes=1), "created_at")
    judge_crash(job, NOW, max_crashes=3)  # no KeyError: decided by the policy


def test_the_sweep_filter_is_plain_data() -> None:
    bson.encode(UNREACHABLE)
    assert list(UNREACHABLE) == ["$nor"]


# -- property: random corruptions --------------------------------------------------------------

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.integers(-(2**80), 2**80),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
    st.sampled_from(["", "*", "a\x00", "$x", "a.b"]),
    st.binary(max_size=4), st.builds(ObjectId), st.datetimes(timezones=st.just(UTC)),
    st.builds(DatetimeMS, st.integers(-(2**62), 2**62)),
    st.sampled_from(list(Status) + list(Priority) + ["running", "done"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                      max_leaves=8)
JOB_PATHS = ["_id", "group", "tenant", "status", "locked", "priority", "scheduled_at", "created_at", "attempts",
             "crashes", "crash_pending", "workable", "workable.class", "workable.parameters", "workable.method",
             "retry_policy", "retry_policy.class", "timeout_s", "tags", "executions", "last_execution",
             "last_execution.attempt", "last_execution.ended_at", "locked_by", "lock_token", "locked_at",
             "lock_epoch", "done", "new_field"]


def corrupt(doc: dict[str, Any], path: str, value: Any, delete: bool) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    *parents, leaf = path.split(".")
    target: Any = doc
    for p in parents:
        if not isinstance(target, dict):
            return doc
        target = target.setdefault(p, {})
    if isinstance(target, dict):
        if delete:
            target.pop(leaf, None)
        else:
            target[leaf] = value
    return doc


@st.composite
def corrupted_jobs(draw: st.DrawFn) -> Any:
    base = draw(st.sampled_from([queued_job(), locked_job(last_execution={"attempt": 1, "ended_at": T0}),
                                 queued_job(status="retrying", priority="high", tenant=None)]))
    for _ in range(draw(st.integers(1, 3))):
        base = corrupt(base, draw(st.sampled_from(JOB_PATHS)), draw(values), draw(st.booleans()))
    return base if draw(st.integers(0, 30)) else draw(values)  # now and then not a document at all


def unlocked(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "locked": False, "status": "queued"}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corrupted_jobs(), st.lists(st.sampled_from(["g", "h", "*"]), min_size=1, max_size=3))
def test_no_corruption_of_a_job_makes_the_reader_or_the_selection_raise(doc: Any, groups: list[str]) -> None:
    problem = job_problem(doc)
    assert problem is None or (isinstance(problem, str) and problem)
    found = check_job(doc)
    assert (found is None) == (problem is None)
    if found is not None:
        for _, copy_ in quarantine_copies([found], NOW):
            bson.encode({"$setOnInsert": copy_})  # the archived copy can be written
        return
    # Well-formed: everything the recruiter, worker and cleaner do with it works.
    candidate = candidate_from(unlocked(doc))
    others = [candidate_from(queued_job(group=g, tenant=t)) for g in ("g", "h") for t in ("acme", "zeta")]
    workers = [FreeWorker(f"w{i}", (g,)) for i, g in enumerate(groups)]
    selection = select(workers, [candidate, *others], Cursor(), NOW + timedelta(days=400_000))
    update = cursor_changes(Cursor(), selection.cursor)
    if update:
        bson.encode(update)  # group and tenant names are storable field names
    FakeCollection([candidate, *others]).plan(workers, Cursor())
    judge_crash(doc, NOW, max_crashes=3)
    if doc["locked"]:
        crash_update(doc, None, NOW, "test")
        outcome = malformed_outcome(doc, "x").to_document()
        archived_document(doc, outcome, NOW)


ENTRY_PATHS = ["_id", "work_on", "available", "available_since", "last_seen_at", "stopping", "assigned_to",
               "working_on", "outcome", "outcome.job", "outcome.token", "outcome.executed", "outcome.decision",
               "outcome.decision.archive", "outcome.decision.retry_at", "outcome.decision.group", "outcome.execution"]


def storable(doc: Any) -> bool:
    try:
        bson.encode(doc)
    except (bson.errors.InvalidDocument, OverflowError, TypeError):
        return False
    return True


@st.composite
def corrupted_entries(draw: st.DrawFn) -> Any:
    job_id = ObjectId()
    entry: dict[str, Any] = {
        "_id": "w1", "work_on": ["g"], "available": True, "available_since": T0, "last_seen_at": T0,
        "assigned_to": {"w1": job_id}, "working_on": job_id,
        "outcome": {"job": job_id, "token": ObjectId(), "attempt": 1, "executed": True,
                    "decision": draw(st.sampled_from([{"archive": "done"}, {"retry_at": T0}])),
                    "execution": None, "result": None}}
    for _ in range(draw(st.integers(1, 3))):
        entry = corrupt(entry, draw(st.sampled_from(ENTRY_PATHS)), draw(values), draw(st.booleans()))
    return entry


@settings(max_examples=300, deadline=None)
@given(st.lists(corrupted_entries(), min_size=1, max_size=4))
def test_no_corruption_of_a_roster_entry_makes_the_recruiter_or_cleaner_raise(entries: list[Any]) -> None:
    # An entry is read from the database, so it is something BSON can hold (no int over 64 bits, no NUL key).
    entries = [e for e in entries if storable(e)]
    kept = [e for e in entries if entry_problem(e) is None]
    for e in entries:
        jobs_referenced_by(e)  # the cleaner reads any entry it removes
        outcome_problem(e.get("outcome"))
    free = sorted((e for e in kept if e.get("available") and e.get("work_on")),
                  key=lambda e: (e.get("available_since") or NOW, e["_id"]))
    workers = [FreeWorker(e["_id"], tuple(e["work_on"])) for e in free]
    select(workers, [candidate_from(queued_job())], Cursor(), NOW)
    for e in kept:
        if e.get("outcome"):
            outcome = e["outcome"]
            job = {**locked_job(), "lock_token": outcome["token"]}
            if is_archive(outcome):
                bson.encode(archived_document(job, outcome, NOW))
            else:
                bson.encode(reschedule_update(job, outcome)[1])


@pytest.mark.parametrize(("changes", "reason"), [
    ({"workable": {"class": "a:B", "parameters": {"order": {"$where": "1"}}}},
     "workable.parameters.order.$where: field name starts with '$'"),
    ({"executions": [{"attempt": 1}, {"note": {"a.b": 1}}]}, "executions.1.note.a.b: field name holds a '.'"),
    ({"$comment": "by hand"}, "$comment: field name starts with '$'"),
    ({"retry_policy": {"class": "a:P", "parameters": {"x": [{"$gt": 1}]}}},
     "retry_policy.parameters.x.0.$gt: field name starts with '$'"),
])
def test_a_job_whose_copy_an_update_cannot_write_is_malformed(changes: dict[str, Any], reason: str) -> None:
    problem = job_problem(queued_job(**changes))
    assert problem is not None
    assert problem.startswith(reason)
    locked = locked_job()
    locked.update(changes)
    assert job_problem(locked) == problem  # locked or not


def test_a_job_nested_deeper_than_its_copy_can_be_is_malformed() -> None:
    def nested(levels: int) -> dict[str, Any]:
        doc: dict[str, Any] = {"s": 1}
        for _ in range(1, levels):
            doc = {"s": doc}
        return doc

    # workable (1) . parameters (2) . d (3) . then the nested fields
    assert job_problem(queued_job(workable={"class": "a:B", "parameters": {"d": nested(95)}})) is None
    assert job_problem(queued_job(workable={"class": "a:B", "parameters": {"d": nested(96)}})) == (
        "document: nested 99 levels deep; a job copied into the roster may nest 98")
