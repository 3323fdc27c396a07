"""Liveness decisions without I/O: who may be given work, and returned versus crashed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId
from hypothesis import given
from hypothesis import strategies as st

from recruiter.domain.job import JobOptions, build_job_document
from recruiter.domain.liveness import (
    FRESH_BEATS,
    MAX_UNPROVEN_RETURNS,
    TAKE_BACK_BEATS,
    fresh_until,
    heartbeat_document,
    is_fresh,
    missed_beats,
    rescue_kind,
    rescue_update,
    shown_started,
)
from recruiter.domain.outcome import LOCK_FIELDS
from tests.unit.test_outcome import NOW, T0, Job, locked_job

SESSION = ObjectId()
ENTRY = {"_id": "w1", "session": SESSION, "pid": 7, "hostname": "h"}


def beat(seen_s_ago: float = 0.0, interval_s: float = 1.0, **extra: Any) -> dict[str, Any]:
    doc = heartbeat_document("w1", SESSION, NOW - timedelta(seconds=seen_s_ago), interval_s, 7, "h")
    doc.update(extra)
    return doc


# -- freshness ---------------------------------------------------------------------------------


def test_an_entry_is_fresh_within_two_of_its_own_intervals() -> None:
    assert fresh_until(NOW, 5.0) == NOW + timedelta(seconds=FRESH_BEATS * 5.0)
    assert is_fresh(beat(1.9, interval_s=1.0), ENTRY, NOW)
    assert not is_fresh(beat(2.0, interval_s=1.0), ENTRY, NOW)
    assert is_fresh(beat(9.0, interval_s=5.0), ENTRY, NOW)  # each entry by its own interval
    # Taken back only after TAKE_BACK_BEATS intervals of silence: later than given no work.
    assert missed_beats(beat(TAKE_BACK_BEATS), NOW)
    assert not missed_beats(beat(TAKE_BACK_BEATS - 0.1), NOW)
    assert not missed_beats(beat(2.5, interval_s=1.0), NOW)
    assert not is_fresh(beat(2.5), ENTRY, NOW)


def test_no_heartbeat_another_sessions_or_a_malformed_one_is_not_fresh() -> None:
    assert not is_fresh(None, ENTRY, NOW)
    assert not is_fresh(beat(session=ObjectId()), ENTRY, NOW)
    for bad in (None, "2099-01-01", 12, {"$date": 1}):
        b = beat(fresh_until=bad, last_seen_at=bad)
        assert not is_fresh(b, ENTRY, NOW)
        assert missed_beats(b, NOW)


# -- returned or crashed -------------------------------------------------------------------------


def assigned(**extra: Any) -> dict[str, Any]:
    return locked_job(attempts=1, **extra)


def test_a_job_the_heartbeats_never_showed_running_is_returned() -> None:
    job = assigned()
    assert not shown_started(job, beat())
    assert rescue_kind(job, beat()) == "returned"
    assert rescue_kind(job, None) == "returned"
    # The heartbeat showed another attempt (an earlier lock of the same job): not this one.
    earlier = beat(working=True, working_on=job["_id"], working_token=ObjectId())
    assert rescue_kind(job, earlier) == "returned"


def test_a_job_the_heartbeats_showed_running_is_a_crash() -> None:
    job = assigned()
    running = beat(working=True, working_on=job["_id"], working_token=job["lock_token"])
    assert shown_started(job, running)
    assert rescue_kind(job, running) == "crashed"
    assert not shown_started({**job, "lock_token": None}, beat(working_token=None))


def test_an_at_most_once_job_is_always_a_crash() -> None:
    assert rescue_kind(assigned(at_most_once=True), beat()) == "crashed"
    assert rescue_kind(assigned(at_most_once=True), None) == "crashed"


def test_unproven_returns_are_limited_then_count_as_crashes() -> None:
    assert rescue_kind(assigned(unproven_returns=MAX_UNPROVEN_RETURNS - 1), beat()) == "returned"
    assert rescue_kind(assigned(unproven_returns=MAX_UNPROVEN_RETURNS), beat()) == "crashed"
    for bad in ("1", -1, 1.5, True, None):
        assert rescue_kind(assigned(unproven_returns=bad), beat()) == "crashed"


def test_a_returned_job_counts_no_attempt_no_crash_and_keeps_its_place() -> None:
    job = assigned(unproven_returns=1)
    kind, (filter_, update) = rescue_update(job, ENTRY, beat(30), NOW, "silent")
    assert kind == "returned"
    assert filter_ == {"_id": job["_id"], "lock_token": job["lock_token"], "locked": True}
    s = update["$set"]
    assert s["locked"] is False
    assert s["attempts"] == 0
    assert s["status"] == "queued"
    assert s["unproven_returns"] == 2
    assert s["last_return"] == {"worker": "w1", "pid": 7, "hostname": "h", "assigned_at": job["locked_at"],
                                "returned_at": NOW, "reason": "silent"}
    assert set(update["$unset"]) == set(LOCK_FIELDS)
    assert "$inc" not in update
    assert "$push" not in update
    assert "scheduled_at" not in s
    assert "crash_pending" not in s


def test_a_returned_retry_is_retrying_again() -> None:
    _, (_, update) = rescue_update(locked_job(attempts=3), ENTRY, None, NOW, "silent")
    assert update["$set"]["attempts"] == 2
    assert update["$set"]["status"] == "retrying"


def test_a_crash_is_recorded_with_the_heartbeats_start_time() -> None:
    job = assigned()
    running = beat(working=True, working_on=job["_id"], working_token=job["lock_token"],
                   working_since=T0 + timedelta(seconds=3))
    kind, (_, update) = rescue_update(job, ENTRY, running, NOW, "stopped heartbeating")
    assert kind == "crashed"
    assert update["$inc"] == {"crashes": 1}
    assert update["$set"]["crash_pending"] is True
    assert update["$set"]["last_execution"]["started_at"] == T0 + timedelta(seconds=3)
    assert update["$set"]["last_execution"]["pid"] == 7


def test_at_most_once_is_stored_only_when_asked() -> None:
    assert "at_most_once" not in build_job_document(Job(1), JobOptions(), T0)
    assert build_job_document(Job(1), JobOptions(at_most_once=True), T0)["at_most_once"] is True


@given(st.dictionaries(st.sampled_from(["attempts", "unproven_returns", "at_most_once", "lock_token", "locked_by",
                                        "locked_at"]),
                       st.one_of(st.none(), st.integers(-3, 5), st.text(max_size=3), st.booleans())))
def test_rescue_never_raises_and_never_returns_an_at_most_once_job(changes: dict[str, Any]) -> None:
    job = {**assigned(), **changes}
    kind, (_, update) = rescue_update(job, ENTRY, beat(), NOW, "r")
    if job.get("at_most_once"):
        assert kind == "crashed"
    if kind == "returned":
        assert isinstance(update["$set"]["attempts"], int)
        assert update["$set"]["attempts"] >= 0
        assert update["$set"]["unproven_returns"] <= MAX_UNPROVEN_RETURNS


@pytest.mark.parametrize("returns", range(MAX_UNPROVEN_RETURNS + 2))
def test_a_job_that_kills_its_worker_before_the_first_beat_ends_up_crashing(returns: int) -> None:
    expected = "returned" if returns < MAX_UNPROVEN_RETURNS else "crashed"
    assert rescue_kind(assigned(unproven_returns=returns), beat()) == expected


def test_a_worker_is_dead_after_the_setting_and_twice_its_own_interval() -> None:
    from recruiter.domain.liveness import is_dead

    now = datetime(2026, 11, 25, tzinfo=UTC)

    def beat(silent_s: float, interval: object) -> dict[str, object]:
        return {"last_seen_at": now - timedelta(seconds=silent_s), "heartbeat_interval_s": interval}

    assert is_dead(beat(7, 1.0), now, 6.0)
    assert not is_dead(beat(5, 1.0), now, 6.0)
    assert not is_dead(beat(8, 5.0), now, 6.0)  # beats every 5 s: dead only after 10 s
    assert is_dead(beat(11, 5.0), now, 6.0)
    for odd in (None, "5", True, -1, 1e300, float("nan")):  # not believed: the setting alone
        assert is_dead(beat(7, odd), now, 6.0)
    assert is_dead({"last_seen_at": "yesterday"}, now, 6.0)
