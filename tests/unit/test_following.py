"""The view of a job from its documents (domain/following.py), without I/O."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from bson import ObjectId
from hypothesis import given, settings
from hypothesis import strategies as st

from recruiter.domain.following import Progress, progress_of, running_in, view_of
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.domain.outcome import archived_document
from tests.unit.test_outcome import NOW, T0, Job, locked_job


def queued(**options: Any) -> dict[str, Any]:
    return build_job_document(Job(1), JobOptions(group="g", **options), T0)


def beat_of(job: dict[str, Any], **progress: Any) -> dict[str, Any]:
    return {"_id": job["locked_by"], "working": True, "working_on": job["_id"],
            "working_token": job["lock_token"], "progress": progress or None}


def test_a_due_job_never_tried_is_queued_and_a_later_one_delayed() -> None:
    due, later = queued(), queued(scheduled_at=NOW + timedelta(minutes=1))
    assert view_of(due["_id"], due, None, None, NOW).state == "queued"  # type: ignore[union-attr]
    view = view_of(later["_id"], later, None, None, NOW)
    assert view is not None
    assert view.state == "delayed"
    assert view.scheduled_at == NOW + timedelta(minutes=1)


def test_a_job_waiting_for_its_next_attempt_is_retrying_due_or_not() -> None:
    job = {**queued(), "status": "retrying", "attempts": 1, "scheduled_at": NOW + timedelta(hours=1)}
    view = view_of(job["_id"], job, None, None, NOW)
    assert view is not None
    assert view.state == "retrying"
    assert view.attempts == 1


def test_a_locked_job_is_assigned_until_its_workers_heartbeat_shows_it_running() -> None:
    job = locked_job()
    assigned = view_of(job["_id"], job, None, None, NOW)
    assert assigned is not None
    assert assigned.state == "assigned"
    assert assigned.worker == job["locked_by"]
    assert assigned.progress is None
    running = view_of(job["_id"], job, None, beat_of(job, value=0.4, message="copied 4 of 10", at=NOW), NOW)
    assert running is not None
    assert running.state == "running"
    assert running.progress == Progress(0.4, "copied 4 of 10", NOW)
    assert running.progress.describe() == "40% copied 4 of 10"


def test_a_beat_for_an_earlier_attempt_of_the_same_job_does_not_make_it_running() -> None:
    job = locked_job()
    stale = {**beat_of(job), "working_token": ObjectId()}
    assert not running_in(stale, job)
    view = view_of(job["_id"], job, None, stale, NOW)
    assert view is not None
    assert view.state == "assigned"


def test_an_archived_job_tells_why_and_its_result_and_wins_over_a_leftover_scheduled_copy() -> None:
    job = locked_job(executions=2)
    outcome = {"job": job["_id"], "token": job["lock_token"], "executed": True, "decision": {"archive": "done"},
               "execution": {"attempt": 1, "outcome": "done"}, "result": {"sum": 3}}
    archived = archived_document(job, outcome, NOW)
    view = view_of(job["_id"], job, archived, None, NOW)
    assert view is not None
    assert view.state == "archived"
    assert view.why == "done"
    assert view.succeeded
    assert view.result == {"sum": 3}
    assert view.archived_at == NOW
    assert len(view.executions) == 3
    assert view.class_name is not None
    assert view.class_name.endswith(":Job")


def test_no_document_is_no_view() -> None:
    assert view_of(ObjectId(), None, None, None, NOW) is None


def test_progress_out_of_range_or_of_another_job_is_not_shown() -> None:
    job = locked_job()
    assert progress_of(beat_of(job, value=float("nan"), message="m", at=NOW), job) == Progress(None, "m", NOW)
    assert progress_of(beat_of(job, value=7, message=None, at=NOW), job) == Progress(None, None, NOW)
    other = {**beat_of(job, value=0.5, message="x", at=NOW), "working_on": ObjectId()}
    assert progress_of(other, job) is None
    assert Progress(None, None, None).describe() == "-"


ANY = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5) | st.just(NOW)
    | st.builds(ObjectId),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
FIELDS = st.sampled_from(["locked", "locked_by", "lock_token", "status", "scheduled_at", "workable", "attempts",
                          "executions", "last_execution", "tags", "group", "tenant", "why", "progress",
                          "working_on", "working_token", "created_at", "archived_at"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(FIELDS, ANY), st.one_of(st.none(), st.dictionaries(FIELDS, ANY)),
       st.one_of(st.none(), st.dictionaries(FIELDS, ANY)), st.booleans())
def test_any_documents_give_a_view_and_never_raise(scheduled: dict[str, Any], archived: dict[str, Any] | None,
                                                  beat: dict[str, Any] | None, in_archive: bool) -> None:
    view = view_of(1, scheduled, archived if in_archive else None, beat, NOW)
    assert view is not None
    assert view.state in ("queued", "delayed", "retrying", "assigned", "running", "archived")
    assert all(isinstance(t, str) for t in view.tags)
    if view.progress is not None:
        assert view.progress.value is None or 0.0 <= view.progress.value <= 1.0
