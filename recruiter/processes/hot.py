"""The leader's hot entries (:mod:`recruiter.domain.hot`): which idle entries it keeps hot, the
order in which a round serves the free entries, and the write of the marks after a round.

Two hooks in :class:`recruiter.processes.recruiter.RecruiterProcess`: :meth:`HotEntries.order`
sorts a round's free entries (and notes its idle ones), :meth:`HotEntries.mark` writes what
changed once the round is written. The write is outside the round's transaction: a mark is a
hint to a worker (poll fast), not a decision, and a deposed leader's marks only expire.

Invariant: :meth:`mark` writes only when the hot set changed or a mark is due for renewal; an
idle cluster whose hot entries stay idle costs one write per ``HOT_FOR - RENEW_BEFORE``. Marks
are kept only in groups the round ran dry (:func:`recruiter.domain.hot.dry_groups`); the marks of
idle entries whose group still has work are taken back, in one write.
"""

from __future__ import annotations

from datetime import datetime

import structlog

from recruiter.domain.hot import HOT, HOT_PER_GROUP, choose_hot, dry_groups, hot_until, serving_key
from recruiter.domain.lanes import lane_of
from recruiter.store import hot as hot_store
from recruiter.store.connection import StoreError, first_line
from recruiter.store.layout import AsyncColl, Document

log = structlog.get_logger("recruiter.recruiter")


class HotEntries:
    """The entries this leader marked hot, and until when."""

    def __init__(self, per_group: int = HOT_PER_GROUP) -> None:
        self.per_group = per_group
        self.marked: dict[object, datetime] = {}
        self.idle: list[Document] = []  # the last round's idle free entries, in serving order
        self.asked: list[Document] = []  # the last round's free entries it offered work (its lanes)
        self.writes = 0  # how many mark writes this leader sent (for tests and the bench)

    def order(self, free: list[Document], now: datetime) -> list[Document]:
        """``free`` in the order a round serves them (:func:`recruiter.domain.hot.serving_key`);
        notes the idle ones (each slot's own entry, not a look-ahead lane) for :meth:`mark`. A mark
        read in an entry that this leader did not write (a previous leader's) is taken as written."""
        for e in free:
            until = hot_until(e.get(HOT), now)
            if until is not None and e["_id"] not in self.marked:
                self.marked[e["_id"]] = until
        ordered = sorted(free, key=serving_key(now, {i: u for i, u in self.marked.items() if u > now}))
        self.idle = [e for e in ordered if lane_of(e) == 0]
        return ordered

    def offering(self, lanes: list[Document]) -> None:
        """The free entries the round offers work (its lanes), once chosen: a group of one of them
        that gets none is dry (:meth:`mark`)."""
        self.asked = lanes

    async def mark(self, roster: AsyncColl, offered: set[str], now: datetime) -> None:
        """After a round: keep up to ``per_group`` of the idle entries it did not give work
        (``offered``) hot, in the groups it ran dry; write the marks that are new or due for
        renewal, and take back those of idle entries no longer hot; nothing otherwise."""
        idle = [e for e in self.idle if e["_id"] not in offered]
        dry = dry_groups(self.asked, offered)
        self.idle, self.asked = [], []
        hot, due = choose_hot(idle, self.marked, now, self.per_group, groups=dry)
        idle_ids = {e["_id"] for e in idle}
        cooled = [i for i in self.marked if i not in hot and i in idle_ids]
        self.marked = hot
        if due:
            try:
                await hot_store.mark_hot(roster, {i: hot[i] for i in due})
                self.writes += 1
            except StoreError as exc:
                log.warning("hot.mark_failed", error=first_line(exc), detail="the next round marks them again")
                for i in due:
                    self.marked.pop(i, None)
        if cooled:
            try:
                await hot_store.unmark(roster, cooled)
                self.writes += 1
            except StoreError as exc:  # they expire within HOT_FOR; the next round does not try again
                log.warning("hot.unmark_failed", error=first_line(exc), detail="the marks expire on their own")

