"""A throughput point measured over a steady window: the backlog is fed, never empty, and
only the jobs archived inside the window count.

The feeder keeps the jobs enqueued and not yet archived (``outstanding``) between
``low`` and ``high``: whenever fewer than ``low`` are left it enqueues a batch back
up to ``high`` (one ``enqueue_many``). ``low`` is chosen above what the workers can
hold at once (slots x lanes), so some jobs are always ready. After ``warm_up_s``
(imports, connections, first rounds), the window opens: the archived count and every
process's command stats are read at its start and at its end, at least
``window_s`` later. Then feeding stops and the backlog is drained, so the next
point starts from an empty queue.

Invariant: the figures of a window are differences of two readings taken at its
two ends; ``min_outstanding`` reports how close the backlog came to empty.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

POLL_S = 0.05


@dataclass(frozen=True)
class Plan:
    low: int  # outstanding jobs below which a batch is enqueued
    high: int  # outstanding jobs a batch tops up to
    warm_up_s: float
    window_s: float

    def __post_init__(self) -> None:
        if not 0 < self.low < self.high:
            raise ValueError("the backlog's bounds must be 0 < low < high")


@dataclass
class Feed:
    """What a window needs of a scenario: enqueue ``n`` jobs, count archived jobs, read every
    process's figures (as of now), check the processes are alive."""

    enqueue: Callable[[int], object]
    archived: Callable[[], int]
    flush: Callable[[], dict[str, Any]]
    check: Callable[[], None]
    what: str
    # The jobs enqueued and not archived yet, when the scenario can count them more cheaply than
    # through ``archived`` (the embedded server counts a collection by scanning it: counting the
    # growing ``archived`` every tick cost the server several percent of its time).
    outstanding: Callable[[], int] | None = None
    poll_s: float = POLL_S


def queued(db: Any) -> int:
    """A feeder's ``outstanding``: the jobs enqueued and not archived yet, which ``scheduled`` holds
    exactly (v1 too: it archives a job before deleting it), counted instead of the growing
    ``archived`` (see :attr:`Feed.outstanding`)."""
    return int(db["scheduled"].estimated_document_count())


def measure(feed: Feed, plan: Plan, on_window: Callable[[str], None] | None = None, *,
            drain: bool = True) -> dict[str, Any]:
    """Feed, warm up, measure one window, drain (unless the processes are stopped next, ``drain=False``).
    ``on_window('start'|'end')`` runs right after each end's reading (the capacity mode reads the
    recruiter's round timings there)."""
    base = feed.archived()
    enqueued = 0

    def tick() -> int:
        nonlocal enqueued
        outstanding = feed.outstanding() if feed.outstanding else enqueued - (feed.archived() - base)
        if outstanding < plan.low:
            feed.enqueue(plan.high - outstanding)
            enqueued += plan.high - outstanding
        feed.check()
        time.sleep(feed.poll_s)
        return outstanding

    started = time.perf_counter()
    tick()
    while time.perf_counter() - started < plan.warm_up_s:
        tick()
    t0, a0 = time.perf_counter(), feed.archived()
    s0 = feed.flush()
    if on_window:
        on_window("start")
    lowest = None
    while time.perf_counter() - t0 < plan.window_s:
        outstanding = tick()
        lowest = outstanding if lowest is None else min(lowest, outstanding)
    t1, a1 = time.perf_counter(), feed.archived()
    s1 = feed.flush()
    if on_window:
        on_window("end")
    if drain:
        _drain(feed, base, enqueued)
    jobs = a1 - a0
    seconds = t1 - t0
    return {"jobs": jobs, "seconds": seconds, "jobs_per_s": jobs / seconds, "warm_up_s": t0 - started,
            "min_outstanding": lowest, "low": plan.low, "high": plan.high, "enqueued": enqueued,
            "before": s0, "after": s1}


def _drain(feed: Feed, base: int, enqueued: int) -> None:
    deadline = time.monotonic() + 120
    while feed.archived() - base < enqueued:
        feed.check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{feed.what}: {enqueued - (feed.archived() - base)} jobs not archived "
                               f"120 s after the window")
        time.sleep(POLL_S)
