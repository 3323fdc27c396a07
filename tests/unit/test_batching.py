"""Short jobs in batches: how many lanes of a slot a round fills, and which outcomes are quiet
(recruiter.domain.batching; the round's use of it: recruiter.processes.lookahead)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from recruiter.domain.batching import MIN_ROUND_S, ROUNDS_HELD, batch_size, quiet_outcome, steady_lanes
from recruiter.processes.lookahead import LookAhead

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_batch_lasts_about_the_rounds_it_is_held_for_within_the_steady_lanes_and_all_lanes() -> None:
    assert batch_size(0.001, 0.006, 2, 17) == math.floor(ROUNDS_HELD * 0.006 / 0.001), "short jobs: rounds' worth"
    assert batch_size(0.0001, 0.01, 2, 17) == 17, "never more than the slot's lanes"
    assert batch_size(0.0, 0.01, 1, 9) == 9
    assert batch_size(0.5, 0.01, 2, 17) == 2, "long jobs: the steady lanes (--prefetch) only"
    assert batch_size(None, 0.01, 2, 17) == 2, "a slot whose jobs are not measured yet: steady lanes only"
    assert batch_size(0.001, 0.0, 1, 17) == math.floor(ROUNDS_HELD * MIN_ROUND_S / 0.001), "a round is never taken as 0"


def test_a_hostile_run_time_or_round_never_widens_a_batch_beyond_the_lanes() -> None:
    for run_s in (float("nan"), float("-inf"), -1.0):
        assert batch_size(run_s, 0.01, 2, 17) == 2
    assert batch_size(0.001, float("inf"), 2, 17) == math.floor(ROUNDS_HELD * MIN_ROUND_S / 0.001)
    assert batch_size(0.001, float("nan"), 1, 17) == math.floor(ROUNDS_HELD * MIN_ROUND_S / 0.001)
    assert batch_size(0.0001, 0.01, 40, 17) == 17, "steady never above the lanes"


def test_steady_lanes_are_the_recorded_prefetch_and_every_lane_of_an_entry_that_records_none() -> None:
    assert steady_lanes({"lanes": 17, "prefetch": 1}) == 2
    assert steady_lanes({"lanes": 17, "prefetch": 0}) == 1
    assert steady_lanes({"lanes": 2}) == 2, "an older worker: all its lanes, as before"
    assert steady_lanes({}) == 1
    for hostile in (True, -1, 17, 99, "1", 1.0, None, {"$gt": 0}):
        assert steady_lanes({"lanes": 17, "prefetch": hostile}) == 17, hostile


def test_only_a_short_job_followed_at_once_by_a_held_one_of_a_batching_worker_is_quiet() -> None:
    assert quiet_outcome(True, True, 0.001)
    assert not quiet_outcome(False, True, 0.001), "a worker without --batch rings as before"
    assert not quiet_outcome(True, False, 0.001), "the batch's last outcome rings"
    assert not quiet_outcome(True, True, 0.5), "after a long job the leader may top the slot up: it rings"
    assert not quiet_outcome(True, True, None)
    assert not quiet_outcome(True, True, -1.0)


def entry(lane: int, lanes: int, prefetch: int | None, runner: str = "w") -> dict[str, Any]:
    doc: dict[str, Any] = {"_id": runner if lane == 0 else f"{runner}~{lane}", "runner": runner, "lane": lane,
                           "lanes": lanes, "available": True, "available_since": T0}
    if prefetch is not None:
        doc["prefetch"] = prefetch
    return doc


def ran(look: LookAhead, runner: str, seconds: float) -> None:
    look.note_run_times([{"_id": runner, "runner": runner, "outcome": {
        "execution": {"started_at": T0, "ended_at": T0 + timedelta(seconds=seconds)}}}])


def test_a_round_fills_an_idle_slots_batch_lanes_only_while_its_jobs_are_short() -> None:
    look = LookAhead()
    look.round_took(0.01)
    lanes = [entry(k, 9, 1) for k in range(9)]
    assert [d for _, d in look.free_lanes(lanes, lanes, 100)] == [0, 1], "not measured: --prefetch lanes only"
    ran(look, "w", 0.0005)
    assert [d for _, d in look.free_lanes(lanes, lanes, 100)] == list(range(9)), "short jobs: every lane"
    ran(look, "w", 0.004)
    assert [d for _, d in look.free_lanes(lanes, lanes, 100)] == list(range(math.floor(ROUNDS_HELD * 0.01 / 0.004)))
    ran(look, "w", 1.0)
    assert [d for _, d in look.free_lanes(lanes, lanes, 100)] == [0, 1], "long jobs: --prefetch lanes only"


def test_an_older_workers_lanes_are_all_filled_as_before_whatever_its_run_time() -> None:
    look = LookAhead()
    look.round_took(0.01)
    ran(look, "w", 1.0)
    lanes = [entry(k, 3, None) for k in range(3)]
    assert [d for _, d in look.free_lanes(lanes, lanes, 100)] == [0, 1, 2]
