"""The poller's pace (recruiter.processes.worker.poller.Pace): the turnaround it learns after outcomes."""

from __future__ import annotations

import itertools

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
    pace.found_nothing(20.15)  # that first read came too early
    pace.delivered(20.3)
    assert pace.turnaround_s == pytest.approx((1 - Pace.WEIGHT) * 0.2 + Pace.WEIGHT * 0.3)


def test_a_leader_slower_than_poll_to_is_learnt_and_read_for_later() -> None:
    """A round of seconds (a backlog on a busy server): the job comes long after poll_to, and the
    reads after the next outcome wait for it instead of reading every poll_to from the outcome on."""
    pace = Pace(0.02, 0.5)
    pace.after_outcome(0.0)
    for at in (0.5, 1.0, 1.5, 2.0, 2.5):
        pace.found_nothing(at)
        pace.slower(at)
    assert pace.outcome_at == 0.0  # not forgotten: a job may come yet
    pace.delivered(2.7)
    assert pace.turnaround_s == pytest.approx(2.7)
    assert pace.after_outcome(10.0) == pytest.approx(Pace.LEAD * 2.7)
    pace.found_nothing(12.1)
    pace.slower(12.1)
    assert pace.wait_s == pytest.approx(Pace.STEP * 2.7)


def test_a_learnt_turnaround_never_exceeds_its_ceiling_nor_makes_a_read_sooner_than_poll_from() -> None:
    pace = Pace(0.02, 0.5)
    pace.after_outcome(0.0)
    pace.delivered(30.0)  # a job that came long after (with nothing learnt, nothing was forgotten)
    assert pace.turnaround_s == Pace.LONGEST_S
    assert pace.after_outcome(40.0) == pytest.approx(Pace.LEAD * Pace.LONGEST_S)
    assert pace.after_outcome(45.0) == 0.02  # that outcome's read is overdue: at once, at poll_from


def test_a_job_already_there_at_the_first_read_brings_the_turnaround_down_fast() -> None:
    """Learnt at 4 s (a slow leader, or a quiet spell), the turnaround is about halved by each job
    the first read after its outcome finds waiting."""
    pace = Pace(0.02, 0.5)
    pace.after_outcome(0.0)
    pace.delivered(4.0)
    learnt = [pace.turnaround_s]
    at = 10.0
    for _ in range(5):
        at += pace.after_outcome(at)
        pace.delivered(at)  # the first read delivered
        learnt.append(pace.turnaround_s)
        at += 1.0
    assert all(b < 0.7 * a for a, b in itertools.pairwise(learnt))
    assert learnt[-1] < 0.7


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


def test_an_outcome_followed_by_no_job_for_a_few_turnarounds_teaches_nothing() -> None:
    pace = Pace(0.02, 0.5)
    pace.after_outcome(0.0)
    pace.delivered(0.2)
    pace.after_outcome(1.0)
    pace.found_nothing(1.3)  # still within poll_to: it may come yet
    assert pace.outcome_at == 1.0
    pace.found_nothing(1.0 + max(0.5, Pace.FORGET * 0.2) + 0.01)  # the queue was empty: forgotten
    assert pace.outcome_at is None
    pace.delivered(9.0)  # a job enqueued much later teaches nothing either
    assert pace.turnaround_s == pytest.approx(0.2)
    # Idle again: the backoff doubles from poll_from, with no floor.
    pace.fast()
    pace.slower(10.0)
    assert pace.wait_s == 0.04


def test_a_turnaround_under_poll_to_is_learnt_as_usual_from_an_early_job() -> None:
    """Under poll_to, a job already there at the first read is learnt at that read's time, with the
    usual weight: a turnaround that varies by a round is not halved by each early job."""
    pace = Pace(0.02, 0.5)
    pace.after_outcome(0.0)
    pace.delivered(0.2)
    pace.after_outcome(1.0)
    pace.delivered(1.15)  # the first read delivered
    assert pace.turnaround_s == pytest.approx((1 - Pace.WEIGHT) * 0.2 + Pace.WEIGHT * 0.15)
