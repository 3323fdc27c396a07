"""The poller's pace (recruiter.processes.worker.poller.Pace): the turnaround it learns after outcomes."""

from __future__ import annotations

import pytest

from recruiter.processes.worker.poller import Pace


def test_with_nothing_learnt_the_first_read_after_an_outcome_is_fast() -> None:
    pace = Pace(0.02, 0.5)
    assert pace.after_outcome(10.0) == 0.02
    assert pace.wait_s == 0.02


def test_the_turnaround_is_learnt_from_the_outcome_to_the_read_that_delivered() -> None:
    pace = Pace(0.02, 0.5)
    pace.after_outcome(10.0)
    pace.after_outcome(10.05)  # a second outcome before any delivery: the earliest one counts
    pace.delivered(10.2)
    assert pace.turnaround_s == pytest.approx(0.2)
    # The next outcome's first read waits for most of it, not for poll_from.
    assert pace.after_outcome(20.0) == pytest.approx(Pace.LEAD * 0.2)
    # An outcome later in the same wait brings the read no later than the first one's.
    assert pace.after_outcome(20.1) == pytest.approx(Pace.LEAD * 0.2 - 0.1)
    pace.delivered(20.3)
    assert pace.turnaround_s == pytest.approx((1 - Pace.WEIGHT) * 0.2 + Pace.WEIGHT * 0.3)


def test_a_learnt_turnaround_never_exceeds_poll_to_nor_makes_a_read_sooner_than_poll_from() -> None:
    pace = Pace(0.02, 0.5)
    pace.after_outcome(0.0)
    pace.delivered(30.0)  # a job that came long after (the queue had been empty)
    assert pace.turnaround_s == 0.5
    assert pace.after_outcome(40.0) == pytest.approx(Pace.LEAD * 0.5)
    assert pace.after_outcome(41.0) == 0.02  # that outcome's read is overdue: at once, at poll_from


def test_reads_that_find_nothing_after_an_outcome_come_every_sixth_of_the_turnaround_then_double() -> None:
    pace = Pace(0.02, 0.5)
    pace.after_outcome(0.0)
    pace.delivered(0.36)
    pace.after_outcome(1.0)
    pace.slower(1.27)  # the first read, at three quarters of the turnaround, found nothing
    assert pace.wait_s == pytest.approx(0.36 * Pace.STEP)
    pace.slower(1.33)
    assert pace.wait_s == pytest.approx(0.36 * Pace.STEP)
    pace.slower(1.0 + 0.36 * Pace.SPAN + 0.01)  # past the span: it doubles again
    assert pace.wait_s == pytest.approx(0.12)
    pace.slower(2.0)
    pace.slower(2.5)
    pace.slower(3.0)
    assert pace.wait_s == 0.5


def test_an_outcome_followed_by_no_job_for_poll_to_teaches_nothing() -> None:
    pace = Pace(0.02, 0.5)
    pace.after_outcome(0.0)
    pace.delivered(0.2)
    pace.after_outcome(1.0)
    pace.found_nothing(1.3)  # still within poll_to: it may come yet
    assert pace.outcome_at == 1.0
    pace.found_nothing(1.6)  # the queue was empty: that outcome is forgotten
    assert pace.outcome_at is None
    pace.delivered(9.0)  # a job enqueued much later teaches nothing either
    assert pace.turnaround_s == pytest.approx(0.2)
    # Idle again: the backoff doubles from poll_from, with no floor.
    pace.fast()
    pace.slower(10.0)
    assert pace.wait_s == 0.04
