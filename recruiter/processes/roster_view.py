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
   (``available``, not ``stopping``, the session), so an entry kept but gone or stopped
   since is found out by the assignment, which rolls its job back, and is forgotten.
2. A beat is kept only while fresh: a worker process that stops beating is seen as stale
   when its last ``fresh_until`` passes, as with a read every round.
3. The whole roster is read again when a leadership starts and every ``full_read_s``
   (30 s), as a check: an entry freed by a worker of an older version (no ``freed`` mark)
   is seen by that read.
4. The beats no longer fresh (whose entries may hold stranded jobs) are read at the first
   round of a leadership and then at most every ``stale_read_s`` (1 s) of the rounds' clock,
   not every round: a beat goes stale seconds after its last write (a multiple of the
   heartbeat interval, 5 s by default), so this delays taking a stranded job back by at
   most that second, and an idle round reads nothing for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from recruiter.domain.liveness import is_fresh
from recruiter.store import roster
from recruiter.store.layout import AsyncColl, Document

FULL_READ_S = 30.0
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
    next_full: float | None = None  # loop time of the next whole read; None: the next read
    stale_read_s: float = STALE_READ_S
    next_stale: datetime | None = None  # the rounds' time of the next read of stale beats; None: the next round

    def reset(self) -> None:
        """Forget everything (a leadership starts): the next read is whole."""
        self.free.clear()
        self.beats.clear()
        self.next_full = None
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
        """Whether the round at loop time ``at`` reads the whole roster."""
        return self.next_full is None or at >= self.next_full

    async def read(self, coll: AsyncColl, at: float, well_formed: Callable[[list[Document]], list[Document]],
                   *, changed: bool = True) -> Read:
        """The round's entries at loop time ``at``: the whole roster when due, else what changed
        over what is kept (without ``changed``: what is kept, no read; for a round the doorbell
        woke for enqueues alone, so no entry rang since the last read). ``well_formed`` drops
        the malformed ones (never kept)."""
        if not changed and not self.full_due(at):
            return Read(list(self.free.values()), [])
        if self.full_due(at):
            entries = well_formed(await roster.read_round_entries(coll))
            self.next_full = at + self.full_read_s
            self.free = {e["_id"]: _kept(e) for e in entries if e.get("available")}
            self.beats = {k: v for k, v in self.beats.items() if k in self.free}
            return Read(entries, _marks(entries))
        # Well-formed first (a malformed _id may not be hashable), then one of an entry read twice.
        found = list({e["_id"]: e for e in well_formed(await roster.read_changed_entries(coll))}.values())
        for e in found:
            if e.get("available"):
                self.free[e["_id"]] = _kept(e)
            else:
                self.free.pop(e["_id"], None)
        ids = {e["_id"] for e in found}
        entries = [*found, *(e for i, e in self.free.items() if i not in ids)]
        return Read(entries, _marks(found))

    def taken(self, ids: Iterable[object]) -> None:
        """Entries a committed round gave work to (or found no longer available): not free."""
        for i in ids:
            self.free.pop(i, None)

    def needs_beat(self, entry: Document, now: datetime) -> bool:
        """Whether ``entry``'s beat must be read this round: the beat kept is not fresh, or is not
        its registration's (another ``session``: a restart took the entry over)."""
        return not is_fresh(self.beats.get(entry["_id"]), entry, now)


def _marks(entries: list[Document]) -> list[tuple[object, object]]:
    return [(e["_id"], e[roster.FREED]) for e in entries if roster.FREED in e]
