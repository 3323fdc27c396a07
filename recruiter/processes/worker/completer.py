"""A worker process's completer: the outcomes its slots finish within a few ms go in one write.

A slot that has an outcome to record hands its writes (the outcome, and the ``started``
mark of its next job, :mod:`recruiter.store.outcome_batches`) to the process's
:class:`Completer` and waits. The completer sends what it holds in one command as soon as
every slot that runs a job has handed its writes in (a process of one slot sends at once,
with no wait), or ``window_s`` after the first came. A slot of short jobs in batches
(:mod:`recruiter.domain.batching`) thus costs one command per job, and the slots of a
process that finish together cost one command for all.

Invariant: the completer changes how the writes travel, never what they are nor what a
slot concludes. Each write is fenced as when sent alone; a slot learns its writes landed
only when every write of the command matched; otherwise (:data:`None`) it writes its own
again alone (:meth:`recruiter.processes.worker.entry.RosterEntries.record`), where a write
that had landed is recognised by its lock token. A connection error reaches every slot of the
command, each of which tries again as it would alone. Every waiting slot gets an answer,
even when the command's task is cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from recruiter.store.connection import StoreError
from recruiter.store.layout import AsyncColl
from recruiter.store.outcome_batches import Write, write_together

# The longest the first outcome waits for other slots' before the command goes.
WINDOW_S = 0.002


@dataclass
class _Handed:
    writes: Sequence[Write]
    answer: asyncio.Future[bool | None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Completer:
    """Gathers the slots' outcome writes and sends them together (see the module doc)."""

    def __init__(self, roster: AsyncColl, busy: Callable[[], int], window_s: float = WINDOW_S) -> None:
        """``busy`` tells how many slots of the process run a job or record its outcome now."""
        self.roster = roster
        self.busy = busy
        self.window_s = window_s
        self.held: list[_Handed] = []
        self.timer: asyncio.TimerHandle | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.commands = 0  # commands sent (tests, the bench)

    async def write(self, writes: Sequence[Write]) -> bool | None:
        """Send ``writes`` with those other slots hand in meanwhile: True if all of them landed, None
        if that is not known (write them again alone). Raises the command's connection error."""
        handed = _Handed(writes)
        self.held.append(handed)
        if len(self.held) >= max(1, self.busy()):
            await self._send()
        elif self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(self.window_s, self._send_later)
        return await handed.answer

    def _send_later(self) -> None:
        task = asyncio.get_running_loop().create_task(self._send())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _send(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        batch, self.held = self.held, []
        if not batch:
            return
        self.commands += 1
        try:
            together = await write_together(self.roster, [w for h in batch for w in h.writes])
        except BaseException as exc:
            # A cancelled command reaches the other slots as a lost connection: they write again.
            failed = exc if isinstance(exc, StoreError) else StoreError(f"outcomes not sent: {type(exc).__name__}")
            for h in batch:
                if not h.answer.done():
                    h.answer.set_exception(failed)
            if not isinstance(exc, Exception):
                raise
            return  # each slot's answer carries the error
        for h in batch:
            if not h.answer.done():
                h.answer.set_result(together)
