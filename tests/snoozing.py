"""Job classes that snooze (``return Snooze(...)``), for the tests; workers import them as ``tests.snoozing``.

Each notes every run in the test database's ``ledger`` (:func:`tests.workables.note`), so a
test can count the runs of a job; each snoozes for its first ``times`` runs, then is done.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from recruiter import JobContext, Snooze, Workable, job
from tests.workables import ledger, note


def runs_of(uri: str, job_id: str) -> int:
    """How many times job ``job_id`` ran so far (its ``ran`` notes)."""
    return int(ledger(uri).count_documents({"job": job_id, "event": "ran"}))


class SnoozesThenDone(Workable):
    """Snoozes ``seconds`` on each of its first ``times`` runs, then returns how many runs it took."""

    def __init__(self, ledger_uri: str, times: int = 2, seconds: float = 0.0) -> None:
        self.ledger_uri = ledger_uri
        self.times = times
        self.seconds = seconds

    def execute(self, ctx: JobContext) -> Any:
        note(self.ledger_uri, ctx, "ran")
        runs = runs_of(self.ledger_uri, ctx.job_id)
        return Snooze(self.seconds) if runs <= self.times else runs


class AsyncSnoozesThenDone(SnoozesThenDone):
    async def execute(self, ctx: JobContext) -> Any:  # type: ignore[override]
        return await asyncio.to_thread(SnoozesThenDone.execute, self, ctx)


class TimedSnoozesThenDone(SnoozesThenDone):
    """Runs in a child process (it has a timeout): its snooze crosses the pipe."""

    timeout_s = 60.0


class SnoozesUntil(Workable):
    """Snoozes until ``at`` once (an aware datetime, or what a test makes of it), then is done."""

    def __init__(self, ledger_uri: str, at: datetime) -> None:
        self.ledger_uri = ledger_uri
        self.at = at

    def execute(self, ctx: JobContext) -> Any:
        note(self.ledger_uri, ctx, "ran")
        return Snooze(until=self.at) if runs_of(self.ledger_uri, ctx.job_id) == 1 else "woke"


class SnoozesForEver(Workable):
    """Snoozes every time: capped by its ``max_snoozes``."""

    max_snoozes = 3

    def __init__(self, ledger_uri: str) -> None:
        self.ledger_uri = ledger_uri

    def execute(self, ctx: JobContext) -> Any:
        note(self.ledger_uri, ctx, "ran")
        return Snooze(timedelta(0))


class HostileSnooze(Workable):
    """Returns a snooze whose field was tampered with after its checks: ``kind`` says how."""

    def __init__(self, ledger_uri: str, kind: str) -> None:
        self.ledger_uri = ledger_uri
        self.kind = kind

    def execute(self, ctx: JobContext) -> Any:
        note(self.ledger_uri, ctx, "ran")
        snooze = Snooze(1)
        bad: dict[str, object] = {"negative": -5.0, "nan": float("nan"), "huge": 1e300, "text": "soon",
                                  "far": None}
        if self.kind == "far":
            object.__setattr__(snooze, "seconds", None)
            object.__setattr__(snooze, "until", datetime(9999, 12, 31, tzinfo=ctx.scheduled_at.tzinfo
                                                         if ctx.scheduled_at else None))
        else:
            object.__setattr__(snooze, "seconds", bad[self.kind])
        return snooze


@job(max_snoozes=5)
def snoozing_function(ctx: JobContext, ledger_uri: str, times: int) -> Any:
    """A function job that snoozes its first ``times`` runs."""
    note(ledger_uri, ctx, "ran")
    return Snooze(0) if runs_of(ledger_uri, ctx.job_id) <= times else "done"
