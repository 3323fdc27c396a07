"""Answering the planner's candidate queries with reads whose cost does not grow with the backlog.

:mod:`recruiter.domain.candidates` plans a round as bounded queries ("the first ``limit``
ready jobs of this range, in index order"). MongoDB serves such a query from the
``candidates`` index and stops after ``limit`` keys. The embedded server
(SecantusDB 0.7) does not: measured with ``explain``, it serves from an index only
a filter of equalities on a prefix of the index keys plus ONE range on the next
key, it walks that whole range (a ``limit`` or a sort does not stop the walk), and
it reads a ``$unionWith`` branch, an ``$or`` or a second range by scanning. So a
query over "every ready job of a group" costs the group's backlog there.

:class:`ReadAhead` answers each query exactly (the same rows, in the same order)
from knowledge it keeps between rounds, refilled by reads of the shape both
servers serve from the index:

- **Substreams.** The ready jobs of one (group, tenant) are, in index order, four
  substreams: (status, priority) = (retrying, high), (retrying, low), (queued,
  high), (queued, low). A substream read is equalities on ``locked, group, tenant,
  status, priority`` plus a range on ``scheduled_at`` (and, to split a tie on
  ``scheduled_at``, an equality on it plus a range on ``_id``).
- **Fences.** Reading a substream up to ``now`` (keys only) records a fence every
  :data:`WINDOW` keys. Later rounds read from the start of the substream up to
  the first fence only: taken jobs are locked, so that range holds what is left
  of one window plus jobs put back before it (stragglers), never the backlog.
  A read asks for the ``limit`` first jobs of that range (MongoDB stops there;
  SecantusDB walks the range, one window). A fence is dropped when its window
  runs dry; the last fence is the time of the keys read, and past it the
  substream is read up to ``now`` again.
- **Directory.** The tenants of each group, and the groups, seen so far. A ring
  query (the next tenants of a group, the next groups) walks the known ones in
  order and reads the gaps between them (a range on ``tenant`` or ``group``):
  a gap holds only jobs of tenants or groups not seen yet, so it is empty in
  steady state and read whole, keys only, once when new ones appear.

Cost per round: about one window per substream read plus one empty gap per ring
step. What is read whole, once, is what no earlier read has seen (a new tenant's
jobs, a burst past the last fence): proportional to the jobs that arrived, not
to the backlog at each round. The exception is a recruiter process's start: it
reads the keys of every queued job once (:meth:`ReadAhead.warm`), before it
asks for the lease, since the embedded server answers nothing else while it
walks them (about 9 s per 100 000 jobs on an idle 2-CPU machine).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from typing import TypeVar

from recruiter.domain.candidates import Query
from recruiter.domain.control import Paused
from recruiter.domain.placement import is_worker_group
from recruiter.domain.records import Query as Filter
from recruiter.store.candidate_keys import (
    AIMED_PROBE,
    EVERY_TENANT,
    KEYS,
    LOW_ONLY,
    SUBSTREAMS,
    Fence,
    Substream,
    above,
    is_ready,
    placeable,
    row_order,
    substream_filter,
    tenant_gaps,
    tenant_of,
    up_to,
    well_typed,
)

# Named here too, as callers use them.
from recruiter.store.candidate_keys import WINDOW as WINDOW
from recruiter.store.candidate_keys import WORKER_GROUPS as WORKER_GROUPS
from recruiter.store.layout import Document

A = TypeVar("A")
B = TypeVar("B")

# find(filter, projection, limit): with a limit, the first ``limit`` by (scheduled_at, _id).
Find = Callable[[Filter, Filter | None, int], Awaitable[list[Document]]]


async def both(first: Coroutine[object, object, A], second: Coroutine[object, object, B]) -> tuple[A, B]:
    """Run two reads at once; the first to fail cancels the other and is raised as itself
    (callers handle a store error, not a group of them)."""
    try:
        async with asyncio.TaskGroup() as reads:
            a, b = reads.create_task(first), reads.create_task(second)
    except ExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return a.result(), b.result()


class ReadAhead:
    """The leader's knowledge of the ready jobs between rounds (see the module doc).

    ``find(filter, projection)`` runs one read; the answers are the rows of
    :meth:`answer`, and the whole documents read are kept in :attr:`documents`.
    """

    def __init__(self, find: Find) -> None:
        self.find = find
        self.groups: dict[str, set[str]] = {}
        self.substreams: dict[tuple[str, str, str, str], Substream] = {}
        self.documents: dict[object, Document] = {}
        # Jobs a read met whose index keys this reader cannot place (a group or tenant that
        # is not a string, an unknown status or priority, a scheduled_at that is not a date):
        # never answered as candidates; left here, by id, for the quarantine of malformed jobs.
        self.unplaceable: list[object] = []
        # Which workers' reserved groups hold unlocked jobs, as one probe read at ``_aimed_at``
        # saw them (None: too many to list; each such group is then read as any other).
        self._aimed: set[str] | None = None
        self._aimed_at: datetime | None = None
        self.reads = 0
        self.rows_read = 0
        # The gaps read in this round, by filter: a round asks for the same gap again when its
        # first read left a worker without a job ("the next tenants after ..."), and within one
        # round that read would find what the first found, or what the next round reads anyway.
        self._gaps_read: dict[str, list[Document]] = {}
        # Likewise the streams of one (group, tenant) read in this round, by (group, tenant, parts):
        # how many rows were asked, and the rows.
        self._streams_read: dict[tuple[str, str, tuple[tuple[str, str], ...]], tuple[int, list[Document]]] = {}

    def new_round(self) -> None:
        """A round begins: gaps and streams are read again."""
        self._gaps_read.clear()
        self._streams_read.clear()

    async def _find(self, filter_: Filter, projection: Filter | None,
                    limit: int = 0) -> list[Document]:
        rows = await self.find(filter_, projection, limit)
        self.reads += 1
        self.rows_read += len(rows)
        return rows

    def take_found(self) -> tuple[dict[object, Document], list[object]]:
        """Hand over what the reads since the last call met: the whole documents read (by
        ``_id``) and the ids of jobs whose keys could not be placed; forget them here."""
        found, self.documents, self.unplaceable = (self.documents, self.unplaceable), {}, []
        return found

    async def warm(self, now: datetime) -> None:
        """Learn every group, tenant and substream at once: the keys of every queued job.

        Costs the backlog, once (the rounds would otherwise read the same keys, a
        group or a tenant at a time, while holding the lease)."""
        if not self.groups:
            await self._gap({"locked": False}, now)

    async def answer(self, queries: list[Query], now: datetime, paused: Paused) -> list[list[Document]]:
        """The rows each query asks for, in index order (documents, some with only their keys).
        The probe of the workers' own groups is read at the same time as the other queries'
        answers, which do not depend on it; the queries aimed at workers are answered after."""
        aimed = [is_worker_group(q.group) for q in queries]
        rows: list[list[Document]] = [[] for _ in queries]

        async def the_others() -> None:
            for i, q in enumerate(queries):
                if not aimed[i]:
                    rows[i] = await self._answer(q, now, paused)

        if self._aimed_at != now and any(aimed):
            await both(self._probe_aimed(now), the_others())
        else:
            await the_others()
        for i, q in enumerate(queries):
            if aimed[i]:
                rows[i] = await self._answer(q, now, paused)
        return rows

    async def _probe_aimed(self, now: datetime) -> None:
        """Learn, with one read per round, which workers' reserved groups hold unlocked jobs.

        Every free worker names its own reserved group, and most are empty: read one by
        one, they would cost a read per free worker per round. The probe reads the keys
        of the whole reserved range (one range on ``group``), at most ``AIMED_PROBE``;
        past that it gives up and the groups are read one by one."""
        keys = await self._find({"locked": False, "group": WORKER_GROUPS}, {"group": 1}, AIMED_PROBE)
        groups = {k.get("group") for k in keys}
        self._aimed = {g for g in groups if isinstance(g, str)} if len(keys) < AIMED_PROBE else None
        self._aimed_at = now

    async def _answer(self, q: Query, now: datetime, paused: Paused) -> list[Document]:
        need = q.skip + q.limit
        if is_worker_group(q.group) and self._aimed is not None and q.group not in self._aimed:
            return []  # this round's probe found no unlocked job aimed at that worker
        if q.group is None:
            rows = await self._groups_ring(q.group_after, need, now, paused)
        elif q.tenant is None:
            rows = await self._tenants_ring(q.group, q.tenant_after, need, now, paused)
        else:
            rows = await self._stream(q.group, q.tenant, LOW_ONLY if q.lows_only else SUBSTREAMS, need, now)
        return rows[q.skip:need]

    # -- rings: known keys in order, and the gaps between them ------------------------------

    async def _groups_ring(self, after: str | None, need: int, now: datetime, paused: Paused) -> list[Document]:
        rows: list[Document] = []
        lower = after
        for g in [*sorted(k for k in self.groups if after is None or k > after), None]:
            span: dict[str, str] = {} if lower is None else above(lower)
            if g is not None:
                span["$lt"] = g
            found = await self._gap({"locked": False, **({"group": span} if span else {})}, now)
            # A ring of groups is read for '*' workers, which never take a worker's own group.
            rows += [d for d in found if d["group"] not in paused.groups and tenant_of(d) not in paused.tenants
                     and not is_worker_group(d["group"])]
            if len(rows) >= need or g is None:
                break
            if g not in paused.groups and not is_worker_group(g):
                rows += await self._tenants_ring(g, None, need - len(rows), now, paused)
            if len(rows) >= need:
                break
            lower = g
        return rows

    async def _tenants_ring(self, group: str, after: str | None, need: int, now: datetime,
                            paused: Paused) -> list[Document]:
        known = sorted(t for t in self.groups.get(group, ()) if after is None or t > after)
        first = min(self.groups.get(group, ()), default=None)
        if after is None or known or first is None or first in paused.tenants:
            return await self._ring_of_tenants(group, after, known, need, now, paused)
        # No tenant known past ``after``: this ring is one gap read, and unless that gap holds a
        # new tenant the next question is the ring from its start, whose first known tenant's
        # stream is then read at the same time as the gap (kept for this round, :meth:`_stream`).
        rows, _ = await both(self._ring_of_tenants(group, after, known, need, now, paused),
                             self._stream(group, first, SUBSTREAMS, need, now))
        return rows

    async def _ring_of_tenants(self, group: str, after: str | None, known: list[str], need: int, now: datetime,
                               paused: Paused) -> list[Document]:
        rows: list[Document] = []
        lower = after
        for t in [*known, None]:
            found = []
            for span in tenant_gaps(lower, t):
                where = {"locked": False, "group": group} | ({} if span is EVERY_TENANT else {"tenant": span})
                found += await self._gap(where, now)
            rows += sorted((d for d in found if tenant_of(d) not in paused.tenants), key=row_order)
            if len(rows) >= need or t is None:
                break
            if t not in paused.tenants:
                rows += await self._stream(group, t, SUBSTREAMS, need - len(rows), now)
            if len(rows) >= need:
                break
            lower = t
        return rows

    async def _gap(self, filter_: Filter, now: datetime) -> list[Document]:
        """Jobs of groups or tenants not seen yet (keys only); learn them, return the ready ones in order.
        A gap read once in a round is not read again in it (:meth:`new_round`)."""
        gap = repr(filter_)
        found = self._gaps_read.get(gap)
        if found is None:
            found = self._gaps_read[gap] = await self._find(filter_, KEYS)
        self.unplaceable += [k.get("_id") for k in found if not well_typed(k)]
        keys = [k for k in found if is_ready(k, now) or placeable(k)]
        by_substream: dict[tuple[str, str, str, str], list[Document]] = {}
        for k in keys:
            self.groups.setdefault(k["group"], set()).add(tenant_of(k))
            for status, priority in SUBSTREAMS:
                by_substream.setdefault((k["group"], tenant_of(k), status, priority), [])
            if is_ready(k, now):
                by_substream[(k["group"], tenant_of(k), k["status"], k["priority"])].append(k)
        for key, ks in by_substream.items():
            self.substreams[key] = Substream.from_keys(ks, now)
        return sorted((k for k in keys if is_ready(k, now)), key=lambda d: (d["group"], *row_order(d)))

    # -- one (group, tenant): its substreams, each up to its first fence ----------------------

    async def _stream(self, group: str, tenant: str, parts: list[tuple[str, str]], need: int,
                      now: datetime) -> list[Document]:
        """The first ``need`` ready jobs of ``parts`` of one (group, tenant), whole. Read once per
        round for as many rows (or fewer, if that read found the stream had no more)."""
        key = (group, tenant, tuple(parts))
        if (known := self._streams_read.get(key)) is not None and (need <= known[0] or len(known[1]) < known[0]):
            rows = known[1][:need]
        else:
            found = await asyncio.gather(*(self._substream((group, tenant, s, p), need, now) for s, p in parts))
            rows = [d for part in found for d in part][:need]
            self._streams_read[key] = (need, rows)
        self.documents.update((d["_id"], d) for d in rows)  # whole documents, handed over with the answer
        return rows

    async def _substream(self, key: tuple[str, str, str, str], need: int, now: datetime) -> list[Document]:
        state = self.substreams.get(key)
        base = substream_filter(*key)
        fresh = state is None or len(state.fences) <= 1
        if state is None or fresh:
            # Nothing known past the last keys read: read the substream up to now; whole
            # documents if it holds no more than asked (the usual case), else its keys.
            ready = {**base, "scheduled_at": up_to(now)}
            rows = sorted((d for d in await self._find(ready, None, need + 1) if is_ready(d, now)), key=row_order)
            if len(rows) <= need:
                self.substreams[key] = Substream.from_keys(rows, now)
                self.documents.update((d["_id"], d) for d in rows)
                return rows
            keys = [k for k in await self._find(ready, KEYS) if is_ready(k, now)]
            self.substreams[key] = state = Substream.from_keys(keys, now)
        while True:
            rows = await self._window(base, state.fences[0], now, need)
            if len(rows) >= need:
                break
            if len(state.fences) == 1:
                if fresh:
                    break  # read up to now: the substream has no more
                state.fences.clear()  # past the last keys read: read up to now again
                return await self._substream(key, need, now)
            state.fences.pop(0)  # that window ran dry: the next one starts where it ended
        return rows[:need]

    async def _window(self, base: Filter, fence: Fence, now: datetime, need: int) -> list[Document]:
        """The first ``need`` whole documents of a substream up to ``fence`` (from its start)."""
        at, last_id = fence
        parts: list[list[Document]]
        if last_id is None:
            parts = [await self._find({**base, "scheduled_at": up_to(min(at, now))}, None, need)]
        else:
            parts = [*await asyncio.gather(
                self._find({**base, "scheduled_at": {"$lt": at}}, None, need),
                self._find({**base, "scheduled_at": at, "_id": {"$lte": last_id}}, None, need))]
        rows = sorted((d for part in parts for d in part if is_ready(d, now)), key=row_order)[:need]
        self.documents.update((d["_id"], d) for d in rows)
        return rows
