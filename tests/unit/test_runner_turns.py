"""A slot's runner (recruiter.processes.worker.state.Runner): its lanes' jobs one at a time,
a job handed to the slot as idle before those it holds ahead."""

from __future__ import annotations

from bson import ObjectId

from recruiter.processes.worker.state import Runner, Slot, Turn


def turn(lane: str, *, ahead: bool) -> Turn:
    return Turn(Slot(lane), ObjectId(), ObjectId(), ahead)


def test_the_first_turn_goes_at_once_and_the_next_only_when_it_leaves() -> None:
    runner = Runner("w", lanes=3)
    first, second = turn("w", ahead=False), turn("w~1", ahead=True)
    runner.enter(first)
    runner.enter(second)
    assert first.go.is_set()
    assert not second.go.is_set()
    assert runner.after(first) is second
    runner.leave(first)
    assert second.go.is_set()
    assert runner.after(second) is None


def test_a_job_not_handed_out_ahead_goes_before_ahead_ones_still_waiting() -> None:
    runner = Runner("w", lanes=3)
    running, held, idle_job = turn("w~1", ahead=False), turn("w~2", ahead=True), turn("w", ahead=False)
    runner.enter(running)
    runner.enter(held)
    runner.enter(idle_job)
    # The running turn keeps the runner; the depth-0 job goes next, then the held one.
    assert runner.queue == [running, idle_job, held]
    runner.leave(running)
    assert idle_job.go.is_set()
    assert not held.go.is_set()


def test_an_ahead_turn_that_reaches_an_idle_runner_takes_it() -> None:
    runner = Runner("w", lanes=2)
    held = turn("w~1", ahead=True)
    runner.enter(held)
    assert held.go.is_set()
    late = turn("w", ahead=False)
    runner.enter(late)  # the held job already holds the runner: the late one waits
    assert runner.queue == [held, late]
    assert not late.go.is_set()


def test_a_turn_that_leaves_while_waiting_hands_nothing_over() -> None:
    runner = Runner("w", lanes=3)
    head, waiting, last = turn("w", ahead=False), turn("w~1", ahead=True), turn("w~2", ahead=True)
    for t in (head, waiting, last):
        runner.enter(t)
    runner.leave(waiting)  # given back while it waited (a stop)
    assert runner.queue == [head, last]
    assert not last.go.is_set()
    runner.leave(head)
    assert last.go.is_set()
