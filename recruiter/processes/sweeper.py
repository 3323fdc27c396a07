"""The leader's sweep: a side task that looks for malformed jobs no candidate read can meet.

Invariant: at most one look runs at a time, in a task of its own, so rounds go on meanwhile;
the next look starts no sooner than the sweep interval after the last one ended, and at least
20 times as long as that one took (so the sweep costs the server 5% at most). What a look found
is handed to the next round once (:meth:`Sweeper.take`), which quarantines it; a look that fails
is warned of (``sweep.failed``) and tried again at the next due time.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from recruiter.domain.documents import Malformed
from recruiter.processes.upkeep import sweep
from recruiter.store.connection import StoreError, first_line
from recruiter.store.layout import Collections

log = structlog.get_logger("recruiter.recruiter")


class Sweeper:
    """Looks for malformed jobs that no candidate read meets, in a task of its own so rounds
    go on meanwhile; the next round quarantines what it found (:meth:`take`)."""

    def __init__(self, c: Collections) -> None:
        self.c = c
        self.task: asyncio.Task[None] | None = None
        self.due = 0.0
        self.found: list[Malformed] = []

    def start(self, interval_s: float) -> None:
        loop = asyncio.get_running_loop()
        if self.task is not None or loop.time() < self.due:
            return

        async def look() -> None:
            started = loop.time()
            try:
                self.found.extend(await sweep(self.c.scheduled))
            except StoreError as exc:
                log.warning("sweep.failed", error=first_line(exc))
            finally:
                took = loop.time() - started
                self.due = loop.time() + max(interval_s, 20 * took)
                self.task = None

        self.task = asyncio.create_task(look(), name="recruiter.sweep")

    def take(self) -> list[Malformed]:
        found, self.found = self.found, []
        return found

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, StoreError):
                await self.task
            self.task = None
        self.due = 0.0
