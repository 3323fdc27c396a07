"""The leading recruiter's history over time: it counts the outcomes its rounds apply and writes them once a minute.

A bus subscriber (:class:`Timeline`): each :class:`~recruiter.domain.events.OutcomeApplied`
(emitted once the round that applied the outcome committed) is counted in memory
(:class:`recruiter.domain.timeline.Tally`). Before each round the recruiter calls
:meth:`Timeline.flush_if_due`: once the minute has turned since the last write, the buckets
counted since go to ``timeline`` as one bulk upsert, in a transaction fenced by the lease
like the round's writes (a deposed leader writes nothing). Its cost: one transaction a
minute (the fence, the bulk write, the commit), whatever the number of jobs.

Invariant: never breaks a round. A failed write is logged and tried again at the next
minute with the same totals (a write sets totals, never adds: repeating it is harmless). A
lost lease writes nothing; what was counted is dropped when a leadership of another epoch
begins (the successor counts under its own, see :mod:`recruiter.domain.timeline`).
"""

from __future__ import annotations

from datetime import datetime

import structlog

from recruiter.domain.clock import Clock
from recruiter.domain.events import Event, LeaseWon, OutcomeApplied
from recruiter.domain.timeline import MINUTE, Tally, bucket_start
from recruiter.processes.events import Bus
from recruiter.processes.leadership import Leadership, LostLease
from recruiter.store.connection import StoreError, first_line
from recruiter.store.timeline import timeline_of, write_buckets

log = structlog.get_logger("recruiter.timeline")


class Timeline:
    """What one recruiter counted for the history, and when it last wrote it."""

    def __init__(self, clock: Clock, owner: str) -> None:
        self.clock = clock
        self.owner = owner
        self.tally = Tally()
        self.epoch: int | None = None  # the leadership the counts belong to
        self.written_minute: datetime | None = None  # the minute of the last write, or of the last that failed

    @classmethod
    def on(cls, bus: Bus, clock: Clock, owner: str) -> Timeline:
        """A timeline subscribed to ``bus``."""
        timeline = cls(clock, owner)
        bus.subscribe(timeline)
        return timeline

    def __call__(self, event: Event) -> None:
        if isinstance(event, OutcomeApplied):
            self.tally.count(event.group, event.kind, event.wait_s, event.at)
        elif isinstance(event, LeaseWon) and event.role == "recruiter" and event.owner == self.owner:
            self._lead(event.epoch)

    def _lead(self, epoch: int | None) -> None:
        """A leadership began: counts of another epoch cannot be written under this one."""
        if epoch != self.epoch:
            self.tally.clear()
            self.epoch, self.written_minute = epoch, None

    async def flush_if_due(self, leadership: Leadership) -> int:
        """Note that the leader runs now; once the minute has turned since the last write, write
        what was counted (see the module doc). How many bucket documents were written."""
        now = self.clock.now()
        self.tally.cover(now)
        minute = bucket_start(now, MINUTE)
        if self.written_minute is not None and minute <= self.written_minute:
            return 0
        if self.epoch is None:  # a lease taken without the leadership loop (tests drive rounds): what it counted
            self.epoch = leadership.lease.epoch
        return await self.flush(leadership, now)

    async def flush(self, leadership: Leadership, now: datetime) -> int:
        """Write the counted buckets not written yet, fenced by the lease; never raises but a cancellation."""
        epoch = self.epoch if self.epoch is not None else 0
        self.tally.expire(now)
        keys = self.tally.pending()
        docs = self.tally.documents(keys, epoch)
        try:
            async with leadership.fenced() as inside:
                written = await write_buckets(timeline_of(inside), docs)
        except LostLease:  # kept: written if this leader takes its lease back with its epoch, else cleared
            return 0
        except StoreError as exc:  # the history never stops a round: tried again next minute, not next round
            log.warning("timeline.not_written", buckets=len(docs), error=first_line(exc))
            self.written_minute = bucket_start(now, MINUTE)
            return 0
        self.tally.written(keys, now)
        self.written_minute = bucket_start(now, MINUTE)
        return written
