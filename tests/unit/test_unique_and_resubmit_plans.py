"""The pure parts of unique keys and resubmit: checks, documents, and what applying an outcome
to a resubmitted job writes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from bson import ObjectId
from hypothesis import given
from hypothesis import strategies as st
from pymongo.errors import BulkWriteError

from recruiter.domain.job import JobOptions, JobRefused, build_job_document
from recruiter.domain.outcome import LOCK_FIELDS, archived_document, crash_update, resubmit_update
from recruiter.domain.resubmit import AFTER_ATTEMPT, RESCHEDULED, due_at, flagged, plan_resubmit
from recruiter.domain.retry import Archive, RetryAt
from recruiter.domain.unique import MAX_KEY_CHARS, OnConflict, Scope, UniqueRefused, key_of, unique
from recruiter.store.unique import duplicates
from tests.unit.test_outcome import NOW, T0, Job, execution, locked_job, outcome_doc


def test_scopes_and_their_documents() -> None:
    plain = unique("k")
    assert (plain.scope, plain.reserves, plain.on_conflict) == (Scope.UNFINISHED, False, OnConflict.EXISTING)
    assert plain.field(T0) == {"key": "k", "scope": "unfinished"}
    period = unique("k", timedelta(hours=2), "resubmit")
    assert period.reserves
    assert period.on_conflict is OnConflict.RESUBMIT
    assert period.field(T0) == {"key": "k", "scope": "period", "until": T0 + timedelta(hours=2)}
    job_id = ObjectId()
    assert period.reservation(job_id, T0) == {"_id": "k", "job": job_id, "created_at": T0,
                                              "until": T0 + timedelta(hours=2)}
    forever = unique("k", "forever")
    assert "until" not in forever.reservation(job_id, T0)
    assert forever.reserves


@pytest.mark.parametrize(("args", "words"), [
    ((42,), "must be a string, got int"), (("",), "non-empty"), (("x" * (MAX_KEY_CHARS + 1),), "at most"),
    (("k", "always"), "scope"), (("k", timedelta(0)), "positive"), (("k", "forever", "merge"), "on_conflict"),
])
def test_bad_keys_and_options_are_refused_in_one_line(args: tuple[Any, ...], words: str) -> None:
    with pytest.raises(UniqueRefused, match=words) as info:
        unique(*args)
    assert "\n" not in str(info.value)


@given(st.one_of(st.integers(), st.none(), st.binary(), st.lists(st.text()), st.floats()))
def test_anything_but_a_string_is_refused_by_the_builder_option(key: object) -> None:
    with pytest.raises(JobRefused, match="unique key"):
        unique_builder_check(key)


def unique_builder_check(key: object) -> None:
    from recruiter.domain.builder import JobBuilder

    JobBuilder(Job(1), recruiter=None).unique(key)  # type: ignore[arg-type]


def test_the_job_document_carries_the_key_and_reads_back_tolerantly() -> None:
    doc = build_job_document(Job(1), JobOptions(unique=unique("a", timedelta(minutes=1))), T0)
    assert doc["unique"] == {"key": "a", "scope": "period", "until": T0 + timedelta(minutes=1)}
    assert key_of(dict(doc)) == "a"
    assert "unique" not in build_job_document(Job(1), JobOptions(), T0)
    for junk in ({}, {"unique": 3}, {"unique": {"key": 5}}, None, [1]):
        assert key_of(junk) is None


def test_a_resubmit_flags_a_locked_job_under_its_lock_and_reschedules_a_waiting_one() -> None:
    job = locked_job()
    write = plan_resubmit(job, None, NOW)
    assert write.filter == {"_id": job["_id"], "locked": True, "lock_token": {"$eq": job["lock_token"]}}
    assert write.update == {"$set": {"resubmit": {"at": None, "requested_at": NOW}}}
    assert write.result.state == AFTER_ATTEMPT
    waiting = {"_id": job["_id"], "locked": False}
    write = plan_resubmit(waiting, NOW + timedelta(hours=1), NOW)
    assert write.filter == {"_id": job["_id"], "locked": False}
    assert write.update == {"$set": {"scheduled_at": NOW + timedelta(hours=1)}}
    assert (write.result.state, write.result.at) == (RESCHEDULED, NOW + timedelta(hours=1))


@pytest.mark.parametrize("decision", [Archive("done"), Archive("tried-too-many-times"),
                                      RetryAt(NOW + timedelta(hours=5))])
def test_a_resubmitted_job_goes_back_to_the_queue_whatever_its_outcome(decision: Any) -> None:
    at = NOW + timedelta(minutes=2)
    job = locked_job(attempts=2, executions=1, resubmit={"at": at, "requested_at": NOW})
    assert flagged(job)
    assert due_at(job, NOW) == at
    out = outcome_doc(job, decision, ex=execution(2, "failed", error=True))
    filter_, update = resubmit_update(job, out, NOW)
    assert filter_ == {"_id": job["_id"], "lock_token": job["lock_token"]}
    assert update["$set"]["scheduled_at"] == at
    assert update["$set"]["status"] == "queued"
    assert update["$set"]["locked"] is False
    assert update["$set"]["executions"][-1] == out["execution"]
    assert update["$inc"] == {"resubmits": 1}  # the attempt counted at the lock stands
    assert {"resubmit", "lock_token", "crash_pending"} <= set(update["$unset"])


def test_a_resubmit_with_no_time_is_due_when_applied_and_junk_reads_as_none() -> None:
    assert due_at(locked_job(resubmit={"at": None}), NOW) == NOW
    assert due_at(locked_job(resubmit={"at": "soon"}), NOW) == NOW
    assert not flagged(locked_job(resubmit=True))


def test_the_flag_goes_with_the_lock() -> None:
    assert "resubmit" in LOCK_FIELDS
    job = locked_job(resubmit={"at": None, "requested_at": NOW})
    assert "resubmit" not in archived_document(job, outcome_doc(job, Archive("done")), NOW)
    _, update = crash_update(job, None, NOW, "worker died")
    assert "resubmit" in update["$unset"]  # the crash rerun is the run asked for


def test_a_batch_error_other_than_a_duplicate_key_is_raised() -> None:
    def error(*codes: int) -> BulkWriteError:
        return BulkWriteError({"writeErrors": [{"index": i, "code": c} for i, c in enumerate(codes)],
                               "writeConcernErrors": [], "nInserted": 0})

    assert duplicates(error(11000, 11000)) == [0, 1]
    with pytest.raises(BulkWriteError):
        duplicates(error(11000, 121))  # a document the validator refused
