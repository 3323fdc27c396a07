"""When a busy slot is topped up, and which slots hold jobs (recruiter.domain.lanes, invariant 2)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from recruiter.domain.lanes import holding, run_seconds, slot_of, worth_topping_up

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_slot_is_topped_up_only_while_its_jobs_outlast_a_hand_off() -> None:
    assert worth_topping_up(None, 0.02), "a slot whose jobs are not known yet is topped up"
    assert worth_topping_up(0.1, 0.02)
    assert worth_topping_up(0.02, 0.02)
    assert not worth_topping_up(0.001, 0.02)


def test_run_seconds_reads_the_execution_dates_and_nothing_else() -> None:
    ran = {"execution": {"started_at": T0, "ended_at": T0 + timedelta(milliseconds=250)}}
    assert run_seconds(ran) == 0.25
    assert run_seconds({"execution": None}) is None
    assert run_seconds({"execution": {"started_at": "yesterday", "ended_at": T0}}) is None
    assert run_seconds({}) is None
    backwards = {"execution": {"started_at": T0, "ended_at": T0 - timedelta(seconds=1)}}
    assert run_seconds(backwards) == 0.0, "a clock that stepped back reads as no time, not negative"


def test_a_runner_holds_jobs_when_fewer_of_its_lanes_than_it_has_hold_none() -> None:
    unheld = [
        {"_id": "a", "runner": "a", "lanes": 2}, {"_id": "a~1", "runner": "a", "lanes": 2},  # idle
        {"_id": "b", "runner": "b", "lanes": 2},  # b~1 holds a job
        {"_id": "c", "runner": "c", "lanes": 1},  # no look-ahead: never holding while unheld
        {"_id": "old"},  # an older worker's entry
    ]
    assert holding(unheld) == {"b"}


def test_slot_of_drops_the_lane_only() -> None:
    assert slot_of("w-0~2") == "w-0"
    assert slot_of("w-0") == "w-0"
    assert slot_of("65a0f~1") == "65a0f"
