"""The recruiter's round timings (recruiter.processes.round_stats): phases summed per committed
round, idle and unfinished rounds kept apart, from the round events it subscribes to; nothing
recorded when the variable is unset."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest

from recruiter.domain.events import RoundAbandoned, RoundCommitted, RoundIdle
from recruiter.processes import round_stats
from recruiter.processes.round_stats import PHASES, RoundStats, RoundTimer
from recruiter.store.monitoring import on_flush, write_periodically
from tests.conftest import wait_for


def test_phases_are_summed_over_committed_rounds_only() -> None:
    stats = RoundStats()
    for _ in range(2):
        stats.begin()
        for phase in PHASES:
            stats.mark(phase)
        stats.end(3, 2, idle=False)
    stats.begin()
    stats.mark("read_roster")
    stats.mark("plan")
    stats.end(0, 0, idle=True)
    stats.begin()
    stats.mark("plan")
    stats.begin()  # the previous round raised before its end: unfinished, not counted
    stats.mark("plan")
    stats.end(1, 0, idle=False)
    snap = stats.snapshot()
    assert (snap["rounds"], snap["idle_rounds"], snap["unfinished"]) == (3, 1, 1)
    assert (snap["assigned"], snap["applied"]) == (7, 4)
    seconds = snap["seconds"]
    assert isinstance(seconds, dict)
    assert set(seconds) == set(PHASES)
    assert all(v >= 0 for v in seconds.values())
    assert snap["max_round_s"] > 0
    idle_phases = snap["idle_phases"]
    assert isinstance(idle_phases, dict)
    assert set(idle_phases) == {"read_roster", "plan"}  # an idle round's phases are kept apart
    assert sum(idle_phases.values()) <= snap["idle_seconds"]


def test_a_mark_outside_a_round_is_ignored() -> None:
    stats = RoundStats()
    stats.mark("lock")
    stats.end(5, 5, idle=False)
    assert stats.snapshot()["rounds"] == 0
    assert stats.snapshot()["seconds"] == dict.fromkeys(PHASES, 0.0)


def test_unset_variable_records_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(round_stats.ROUND_STATS_ENVVAR, raising=False)
    assert round_stats.from_environment() is None
    assert not hasattr(round_stats, "_stats")  # no module-global recorder: the process's edge injects one


def test_the_round_events_feed_the_totals() -> None:
    stats = RoundStats()
    stats(RoundCommitted(assigned=3, applied=2, free_workers=4, duration_s=0.5, phases={"plan": 0.1, "lock": 0.2}))
    stats(RoundIdle(duration_s=0.25, phases={"read_roster": 0.05}))
    stats(RoundAbandoned("lost the lease"))
    snap = stats.snapshot()
    assert (snap["rounds"], snap["idle_rounds"], snap["unfinished"]) == (1, 1, 1)
    assert (snap["assigned"], snap["applied"], snap["max_round_s"]) == (3, 2, 0.5)
    assert snap["seconds"] == {**dict.fromkeys(PHASES, 0.0), "plan": 0.1, "lock": 0.2}
    assert (snap["idle_seconds"], snap["idle_phases"]) == (0.25, {"read_roster": 0.05})


def test_the_timer_splits_a_round_into_phases() -> None:
    timer = RoundTimer()
    timer.mark("plan")  # outside a round: ignored
    assert not timer.running
    timer.begin()
    timer.mark("plan")
    timer.mark("lock")
    phases, took = timer.finish()
    assert set(phases) == {"plan", "lock"}
    assert took >= sum(phases.values())
    assert not timer.running


def test_the_file_holds_the_totals_and_sigusr2_wakes_every_writer(tmp_path: Path) -> None:
    path = tmp_path / "rounds.json"
    stats = RoundStats()
    stats.begin()
    stats.mark("plan")
    stats.end(4, 0, idle=False)
    write_periodically(stats.snapshot, str(path), "test-round-stats")  # writes at once, from its thread
    wait_for(lambda: path.exists() and json.loads(path.read_text())["assigned"] == 4, timeout_s=5)
    # The command stats and the round timings share the process's one SIGUSR2 handler.
    first, second = threading.Event(), threading.Event()
    on_flush(first.set)
    on_flush(second.set)
    os.kill(os.getpid(), signal.SIGUSR2)
    wait_for(lambda: first.is_set() and second.is_set(), timeout_s=5)
