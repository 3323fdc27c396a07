"""The leader reads the beats no longer fresh at most every second of the rounds' clock
(recruiter.processes.roster_view, invariant 4), and a round with nothing to read sends nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from recruiter.processes.roster_view import STALE_READ_S, RosterView

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def test_stale_beats_are_read_at_the_first_round_then_at_most_every_period() -> None:
    view = RosterView()
    assert view.stale_due(T0)
    assert not view.stale_due(T0 + timedelta(seconds=STALE_READ_S / 2))
    assert not view.stale_due(T0 + timedelta(seconds=STALE_READ_S * 0.99))
    assert view.stale_due(T0 + timedelta(seconds=STALE_READ_S))
    assert not view.stale_due(T0 + timedelta(seconds=STALE_READ_S * 1.5))


def test_a_clock_stepped_back_or_a_new_leadership_reads_them_at_once() -> None:
    view = RosterView()
    assert view.stale_due(T0)
    assert view.stale_due(T0 - timedelta(seconds=3 * STALE_READ_S))  # the clock stepped back
    assert not view.stale_due(T0 - timedelta(seconds=3 * STALE_READ_S))
    view.reset()
    assert view.stale_due(T0 - timedelta(seconds=3 * STALE_READ_S))
