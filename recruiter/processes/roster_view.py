"""What the leader knows of the roster between rounds: the free entries it has read, and their beats.

A round needs every free entry (available, not stopping) and every entry holding an
outcome. Reading them all each round costs the roster's size. The leader keeps instead
the free entries it has read, and each round reads only the entries that changed in a
way it must see (:func:`recruiter.store.roster.read_changed_entries`): those holding an
outcome, and those freed or stopped by their worker (a registration, a release, a step
down: each writes a new ``freed`` mark, which the round that reads it removes). Its own assignments take entries
out of what it keeps. Likewise each entry's heartbeat is kept as last read, and read
again only once it is no longer fresh, or no longer the entry's registration's.

Invariants:

1. What is kept is only ever a hint: every write a round makes to an entry is conditional
   (``available``, not ``stopping``), so an entry kept but gone, taken or stopped since is
   found out by the assignment, which rolls its job back, and is forgotten. An entry
   registered again since (a restart with the same id) is free as the one kept was, and takes
   the job; a restart that read the entry before the assignment finds it changed and reads it
   again (:func:`recruiter.store.roster_fences.holding_as_read`).
2. A beat is kept only while fresh: a worker process that stops beating is seen as stale
   when its last ``fresh_until`` passes, as with a read every round. A beat is the whole
   process's: one read for one entry refreshes every entry kept from that process's
   document (:meth:`RosterView.extend_beats`), so a process is read about once per freshness
   window, not once per entry.
3. The whole roster is read when a leadership starts and every ``whole_read_s`` (10 min).
   Every ``full_read_s`` (30 s) in between, a round checks what it keeps with one aggregation
   (:func:`recruiter.store.roster.settled_free`): the free entries with no ``freed`` mark and no
   outcome must be as many as the entries it keeps, less those of them this round read with a
   mark or an outcome, and their sessions must add up the same. Where they differ (an entry
   freed or registered again without a mark, by a worker of an older version or by hand; one
   kept but gone, taken or stopped since), the round reads the whole roster instead. So the
   check returns one document, not the roster. A malformed free entry is counted but never
   kept: while one is there, each check reads the whole roster, as every check did before.
4. The beats no longer fresh (whose entries may hold stranded jobs) are read at the first
   round of a leadership and then at most every ``stale_read_s`` (1 s) of the rounds' clock,
   not every round: a beat goes stale seconds after its last write (a multiple of the
   heartbeat interval, 5 s by default), so this delays taking a stranded job back by at
   most that second, and an idle round reads nothing for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from recruiter.domain.liveness import FROM_PROCESS, date_or_none, is_fresh
from recruiter.store import roster
from recruiter.store.layout import AsyncColl, Document

FULL_READ_S = 30.0
WHOLE_READ_S = 600.0
STALE_READ_S = 1.0


@dataclass(frozen=True)
class Read:
    """One round's read of the roster: its entries, and the ``freed`` marks to remove."""

    entries: list[Document]
    marks: list[tuple[object, object]]


def _kept(entry: Document) -> Document:
    """An entry as kept between rounds: without its outcome (read again while it holds one) or mark."""
    return {k: v for k, v in entry.items() if k not in ("outcome", roster.FREED)}


@dataclass
class RosterView:
    """The free entries and the beats one leader has read (see the module doc)."""

    full_read_s: float = FULL_READ_S
    free: dict[object, Document] = field(default_factory=dict)
    beats: dict[object, Document] = field(default_factory=dict)  # entry id -> its beat as last read
    next_full: float | None = None  # loop time of the next check; None: the next read is whole
    whole_read_s: float = WHOLE_READ_S
    next_whole: float | None = None  # loop time of the next whole read in place of a check
    stale_read_s: float = STALE_READ_S
    next_stale: datetime | None = None  # the rounds' time of the next read of stale beats; None: the next round

    def reset(self) -> None:
        """Forget everything (a leadership starts): the next read is whole."""
        self.free.clear()
        self.beats.clear()
        self.next_full = None
        self.next_whole = None
        self.next_stale = None

    def stale_due(self, now: datetime) -> bool:
        """Whether the round at ``now`` reads the beats no longer fresh (invariant 4); if so, the
        next such read is ``stale_read_s`` later. A clock that stepped back makes it due at once."""
        period = timedelta(seconds=self.stale_read_s)
        if self.next_stale is not None and now < self.next_stale and now >= self.next_stale - 2 * period:
            return False
        self.next_stale = now + period
        return True

    def full_due(self, at: float) -> bool:
        """Whether the round at loop time ``at`` reads the whole roster or checks it (invariant 3)."""
        return self.next_full is None or at >= self.next_full

    async def read(self, coll: AsyncColl, at: float, well_formed: Callable[[list[Document]], list[Document]],
                   *, changed: bool = True) -> Read:
        """The round's entries at loop time ``at``: what changed over what is kept, with the
        check's differences when due, or the whole roster (invariant 3). Without ``changed``:
        what is kept, no read (for a round the doorbell woke for enqueues alone, so no entry
        rang since the last read). ``well_formed`` drops the malformed ones (never kept)."""
        if not changed and not self.full_due(at):
            return Read(list(self.free.values()), [])
        settled: tuple[int, int] | None = None  # the check's figures, when it is due
        if self.full_due(at):
            if self.next_whole is None or at >= self.next_whole:  # None: a leadership's first read
                return await self._read_whole(coll, at, well_formed)
            self.next_full = at + self.full_read_s
            changes, settled = await asyncio.gather(roster.read_changed_entries(coll), roster.settled_free(coll))
        else:
            changes = await roster.read_changed_entries(coll)
        # Well-formed first (a malformed _id may not be hashable), then one of an entry read twice.
        found = list({e["_id"]: e for e in well_formed(changes)}.values())
        if settled is not None and settled != self._settled(found):
            return await self._read_whole(coll, at, well_formed)
        for e in found:
            if e.get("available"):
                self.free[e["_id"]] = _kept(e)
            else:
                self.free.pop(e["_id"], None)
        ids = {e["_id"] for e in found}
        entries = [*found, *(e for i, e in self.free.items() if i not in ids)]
        return Read(entries, _marks(found))

    def _settled(self, found: list[Document]) -> tuple[int, int]:
        """What :func:`recruiter.store.roster.settled_free` returns if nothing was missed: the
        entries kept, less those read now with a mark or an outcome (invariant 3)."""
        now_marked = {e["_id"] for e in found if e["_id"] in self.free and not roster.is_settled(e)}
        settled = [e for i, e in self.free.items() if i not in now_marked]
        return len(settled), sum(roster.session_stamp(e.get("session")) for e in settled)

    async def _read_whole(self, coll: AsyncColl, at: float,
                          well_formed: Callable[[list[Document]], list[Document]]) -> Read:
        entries = well_formed(await roster.read_round_entries(coll))
        self.next_full, self.next_whole = at + self.full_read_s, at + self.whole_read_s
        self.free = {e["_id"]: _kept(e) for e in entries if e.get("available")}
        self.beats = {k: v for k, v in self.beats.items() if k in self.free}
        return Read(entries, _marks(entries))

    def taken(self, ids: Iterable[object]) -> None:
        """Entries a committed round gave work to (or found no longer available): not free."""
        for i in ids:
            self.free.pop(i, None)

    def extend_beats(self, read: Iterable[Mapping[str, object]]) -> None:
        """Carry a process's latest beat, among those ``read`` this round, to every entry whose
        kept beat came from that process's document: one beat is the whole process's
        (:mod:`recruiter.domain.liveness`), so one read of it serves all its entries kept. An entry's
        session stays as it was read for that entry: a new registration of the slot writes a
        ``freed`` mark, so the round reads the entry again and finds the session changed."""
        latest: dict[str, tuple[datetime, datetime]] = {}  # repr of a process document's _id -> its beat
        for b in read:
            until, seen = date_or_none(b.get("fresh_until")), date_or_none(b.get("last_seen_at"))
            if FROM_PROCESS in b and until is not None and seen is not None:
                held = latest.get(repr(b[FROM_PROCESS]))
                if held is None or until > held[0]:
                    latest[repr(b[FROM_PROCESS])] = (until, seen)
        if not latest:
            return
        extended = {}
        for i, kept in self.beats.items():
            if FROM_PROCESS in kept and (new := latest.get(repr(kept[FROM_PROCESS]))) is not None:
                until = date_or_none(kept.get("fresh_until"))
                if until is None or until < new[0]:
                    extended[i] = {**kept, "fresh_until": new[0], "last_seen_at": new[1]}
        self.beats.update(extended)

    def needs_beat(self, entry: Document, now: datetime) -> bool:
        """Whether ``entry``'s beat must be read this round: the beat kept is not fresh, or is not
        its registration's (another ``session``: a restart took the entry over)."""
        return not is_fresh(self.beats.get(entry["_id"]), entry, now)


def _marks(entries: list[Document]) -> list[tuple[object, object]]:
    return [(e["_id"], e[roster.FREED]) for e in entries if roster.FREED in e]
