"""The heartbeat's updates and how a failed fence is read (pure parts of recruiter.heartbeat)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bson import ObjectId

from recruiter.processes.worker.heartbeat import JOB_TAKEN_AWAY, SlotView, beat_fields, lost_slots, slot_views
from recruiter.processes.worker.state import JobState, Running, Said, Slot
from recruiter.store.heartbeats import beat_writes

NOW = datetime(2026, 1, 1, tzinfo=UTC)
S1, S2 = ObjectId(), ObjectId()
JOB = ObjectId()


def test_a_beat_writes_the_heartbeat_documents_fenced_by_session_and_says_what_runs() -> None:
    token = ObjectId()
    views = [SlotView("w1", S1, None, None), SlotView("w2", S2, JOB, NOW, token)]
    idle, busy = beat_writes([(v.id, v.session, beat_fields(v, NOW, 5.0)) for v in views])
    fresh = NOW + timedelta(seconds=10)  # two intervals
    assert idle._filter == {"_id": "w1", "session": S1}
    assert idle._doc == {"$set": {"last_seen_at": NOW, "fresh_until": fresh, "working": False, "working_on": None,
                                  "working_token": None, "working_since": None, "working_in_thread": False,
                                  "progress": None}}
    assert busy._filter == {"_id": "w2", "session": S2}
    assert busy._doc == {"$set": {"last_seen_at": NOW, "fresh_until": fresh, "working": True, "working_on": JOB,
                                  "working_token": token, "working_since": NOW, "working_in_thread": False,
                                  "progress": None}}


def test_a_beat_says_a_job_runs_in_a_thread_and_a_halted_thread_still_checks_its_entry() -> None:
    slot = Slot("w1")
    slot.running = Running(JOB, NOW, token=ObjectId(), in_thread=True)
    (view,) = slot_views([slot])
    assert (view.job_id, view.in_thread, view.halting) == (JOB, True, False)
    assert beat_fields(view, NOW, 5.0)["working_in_thread"] is True
    assert slot.running.move(JobState.HALTED)  # cancelled: the thread runs on, the slot beats as idle
    (view,) = slot_views([slot])
    assert (view.job_id, view.halting) == (None, True)
    assert beat_fields(view, NOW, 5.0)["working_in_thread"] is False
    # Its entry gone (declared dead) or another session's: lost; merely no assignment: not lost.
    assert lost_slots([view], {}) == [(view, "the worker was declared dead and removed from the roster")]
    assert lost_slots([view], {"w1": {"session": ObjectId()}}) == [(view, "another process took over this worker id")]
    assert lost_slots([view], {"w1": {"session": slot.session}}) == []
    slot.running = Running(JOB, NOW, token=ObjectId())  # an async job, halted: nothing runs on
    assert slot.running.move(JobState.HALTED)
    assert slot_views([slot])[0].halting is False


def test_a_beat_carries_what_the_running_job_last_said_of_its_progress() -> None:
    slot = Slot("w1")
    assert slot_views([slot])[0].progress is None
    slot.running = Running(JOB, NOW, token=ObjectId())
    assert beat_fields(slot_views([slot])[0], NOW, 5.0)["progress"] is None  # said nothing yet
    slot.running.progress = Said(0.4, "copied 4 of 10 files", NOW)
    said = {"value": 0.4, "message": "copied 4 of 10 files", "at": NOW}
    assert beat_fields(slot_views([slot])[0], NOW, 5.0)["progress"] == said
    slot.running.progress = Said(None, "cleaning up", NOW)  # the newest value replaces the last
    assert beat_fields(slot_views([slot])[0], NOW, 5.0)["progress"] == {"value": None, "message": "cleaning up",
                                                                         "at": NOW}
    # An idle slot, and a job no longer reported (being recorded), carry none.
    assert beat_fields(SlotView("w1", S1, None, None, None, said), NOW, 5.0)["progress"] is None
    assert slot.running.move(JobState.RECORDING)
    assert slot_views([slot])[0].progress is None


def test_why_a_fence_failed() -> None:
    views = [SlotView("gone", S1, None, None), SlotView("replaced", S1, JOB, NOW),
             SlotView("cancelled", S1, JOB, NOW), SlotView("fine", S1, JOB, NOW)]
    entries = {
        "replaced": {"_id": "replaced", "session": S2, "assigned_to": {"replaced": JOB}},
        "cancelled": {"_id": "cancelled", "session": S1, "assigned_to": {"cancelled": ObjectId()}},
        "fine": {"_id": "fine", "session": S1, "assigned_to": {"fine": JOB}},
    }
    reasons = {v.id: r for v, r in lost_slots(views, entries)}
    assert set(reasons) == {"gone", "replaced", "cancelled"}
    assert "declared dead" in reasons["gone"]
    assert "took over" in reasons["replaced"]
    assert reasons["cancelled"] == JOB_TAKEN_AWAY
