"""A running job's state: the moves the three sources (slot loop, heartbeat, forced stop) may make."""

from __future__ import annotations

from datetime import UTC, datetime

from bson import ObjectId

from recruiter.processes.worker.heartbeat import slot_views
from recruiter.processes.worker.state import MOVES, JobState, Running, Slot, SlotPhase

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def running(state: JobState = JobState.RUNNING) -> Running:
    r = Running(ObjectId(), NOW, token=ObjectId())
    r.state = state
    return r


def test_a_halted_or_recording_job_never_moves_again() -> None:
    for final in (JobState.HALTED, JobState.RECORDING):
        for to in JobState:
            r = running(final)
            assert r.move(to) is False
            assert r.state is final


def test_an_interrupted_job_may_still_be_halted_or_recorded_but_not_run_again() -> None:
    assert running(JobState.INTERRUPTED).move(JobState.HALTED)
    assert running(JobState.INTERRUPTED).move(JobState.RECORDING)
    r = running(JobState.INTERRUPTED)
    assert not r.move(JobState.RUNNING)
    assert r.state is JobState.INTERRUPTED


def test_every_move_is_in_the_table() -> None:
    for start in JobState:
        for to in JobState:
            r = running(start)
            assert r.move(to) is (to in MOVES[start])
            assert r.state is (to if to in MOVES[start] else start)


def test_heartbeats_report_a_job_only_while_it_runs_or_is_interrupted() -> None:
    slots = [Slot(f"w{i}") for i in range(6)]
    for slot, state in zip(slots, JobState, strict=False):
        slot.running = running(state)
    slots[4].phase = SlotPhase.LEFT
    slots[5].phase = SlotPhase.REPLACED
    views = {v.id: v for v in slot_views(slots)}
    assert set(views) == {"w0", "w1", "w2", "w3"}  # a slot that left or was replaced does not beat
    reported = {v.id for v in views.values() if v.job_id is not None}
    assert reported == {s.id for s in slots[:4] if s.running and s.running.state in
                        (JobState.RUNNING, JobState.INTERRUPTED)}
    for v in views.values():
        assert (v.working_since is None) is (v.job_id is None)
        assert (v.token is None) is (v.job_id is None)
