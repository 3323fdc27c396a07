"""Reading just enough of the queue for one round: pure planning, no I/O.

The recruiter never reads the backlog. It runs the policy of
:mod:`recruiter.domain.selection` over what it has read so far (:class:`KnownSource`);
when the policy needs something not read yet (the next tenant of a group, more
jobs of one tenant), the source raises :class:`Missing`, the recruiter reads
that with one bounded query (:meth:`Knowledge.query_for`) and runs the policy
again. The first read of a round (:func:`first_queries`) asks for what the
cursor predicts, so with one group and one tenant a round needs a single read.

A :class:`Query` is the specification of one read: :meth:`Query.filter` and
:data:`SORT` say which rows it returns, in which order. The recruiter does not
send it as written: :mod:`recruiter.store.readahead` answers it with the same rows
through reads both MongoDB and the embedded server serve from the index (the
embedded server walks whole ranges and scans ``$unionWith`` branches). As
specified, each query is one index scan on MongoDB (index ``candidates`` in
:mod:`recruiter.store`, keys ``locked, group, tenant, status(-1), priority,
scheduled_at, _id``):

- the filter is ``locked: false`` (equality), then ``group`` (equality, or a
  range for the ring of groups), ``tenant`` (equality, or a range for the ring
  of tenants), ``status`` and ``priority`` (points), ``scheduled_at <= now``;
- the sort is the index's own key order after the equality fields, so the
  index scan yields documents already in order: no in-memory sort, and the scan
  stops after ``skip + limit`` matching keys;
- jobs that are not due yet sit inside the scanned ranges but fail the
  ``scheduled_at`` bound, so the scan seeks past them instead of reading them:
  keys examined are ``skip + limit`` plus at most one seek per (tenant, status,
  priority) it crosses, never the backlog;
- every limit is at most the number of free workers, so a round reads at most
  a small multiple of the free workers in documents, whatever the backlog.
"""

from __future__ import annotations

import math
import re
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from recruiter.domain.control import NOT_PAUSED, Paused
from recruiter.domain.job import Priority, Status
from recruiter.domain.naming import WORKER_GROUP_PREFIX
from recruiter.domain.placement import is_worker_group
from recruiter.domain.records import JobDoc
from recruiter.domain.refusals import refused_by
from recruiter.domain.selection import (
    ANY_GROUP,
    DEFAULT_POLICY,
    DEFAULT_TENANT,
    FIRST,
    LOW,
    UNLIMITED,
    Allowance,
    Candidate,
    CountingScheme,
    Cursor,
    FreeWorker,
    RoundPolicy,
    Selection,
    as_policy,
    select,
    select_from,
)

# The index key order after `locked`: the order in which a query's rows come (see the module doc).
SORT: list[tuple[str, int]] = [
    ("group", 1), ("tenant", 1), ("status", -1), ("priority", 1), ("scheduled_at", 1), ("_id", 1),
]
UNLOCKED_STATUSES = [Status.RETRYING.value, Status.QUEUED.value]


@dataclass(frozen=True)
class Query:
    """One bounded read of ready jobs, in index order.

    ``group=None`` reads the ring of groups (those after ``group_after``);
    ``tenant=None`` reads the ring of tenants (after ``tenant_after``). With
    ``lows_only`` it reads only fresh low-priority jobs (the LOW stream).
    """

    limit: int
    group: str | None = None
    group_after: str | None = None
    tenant: str | None = None
    tenant_after: str | None = None
    lows_only: bool = False
    skip: int = 0

    def filter(self, now: datetime, paused: Paused = NOT_PAUSED) -> dict[str, object]:
        f: dict[str, object] = {"locked": False}
        if self.group is not None:
            f["group"] = self.group
        else:
            group: dict[str, object] = {}
            if self.group_after is not None:
                group["$gt"] = self.group_after
            if paused.groups:
                group["$nin"] = sorted(paused.groups)
            # Only '*' workers read rings of groups, and they never take a worker's own group.
            group["$not"] = re.compile("^" + re.escape(WORKER_GROUP_PREFIX))
            f["group"] = group
        if self.tenant is not None:
            f["tenant"] = None if self.tenant == DEFAULT_TENANT else self.tenant
        else:
            tenant: dict[str, object] = {}
            if self.tenant_after is not None:
                # Strings only: the default tenant (null) sorts first, so it is never "after" anything.
                tenant["$gt"] = self.tenant_after
            if paused.tenants:
                tenant["$nin"] = sorted(paused.tenants)
            if tenant:
                f["tenant"] = tenant
        if self.lows_only:
            f["status"] = Status.QUEUED.value
            f["priority"] = Priority.LOW.value
        else:
            f["status"] = {"$in": UNLOCKED_STATUSES}
        f["scheduled_at"] = {"$lte": now}
        return f


def candidate_from(doc: JobDoc, now: datetime | None = None) -> Candidate:
    """The selection's view of a job (checked by recruiter.domain.documents.check_job) at ``now``
    (which decides whether the processes that refused it may have it again)."""
    return Candidate(
        doc["_id"], doc["group"], doc["scheduled_at"],
        tenant=doc.get("tenant") or DEFAULT_TENANT,
        priority=doc.get("priority") or Priority.LOW.value,
        retrying=doc.get("status") == Status.RETRYING.value,
        refused_by=refused_by(doc, now),
    )


@dataclass(frozen=True)
class Need:
    """What the policy asked for and has not been read: ``kind`` is ``groups``
    (the ring of groups after ``after``), ``tenants`` (the ring of tenants of
    ``group`` after ``after``) or ``stream`` (jobs of one tenant from ``index``)."""

    kind: str
    group: str | None = None
    after: str | None = None
    tenant: str = DEFAULT_TENANT
    stream: int = FIRST
    index: int = 0


class Missing(Exception):  # a signal to read more, not an error
    def __init__(self, need: Need) -> None:
        super().__init__(need)
        self.need = need


class Coverage:
    """Parts of a ring known to hold no keys but the ones read: spans (after, upto]."""

    def __init__(self) -> None:
        self._spans: list[tuple[tuple[int, str], tuple[int, str]]] = []

    @staticmethod
    def _lo(after: str | None) -> tuple[int, str]:
        return (0, "") if after is None else (1, after)

    @staticmethod
    def _hi(upto: str | None) -> tuple[int, str]:
        return (2, "") if upto is None else (1, upto)

    def add(self, after: str | None, upto: str | None) -> None:
        """Mark (after, upto] as known; ``after=None`` is the start, ``upto=None`` the end."""
        spans = sorted([*self._spans, (self._lo(after), self._hi(upto))])
        merged = [spans[0]]
        for lo, hi in spans[1:]:
            if lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        self._spans = merged

    def covers(self, after: str | None, upto: str | None) -> bool:
        lo, hi = self._lo(after), self._hi(upto)
        return any(a <= lo and hi <= b for a, b in self._spans)


@dataclass
class Stream:
    items: list[Candidate] = field(default_factory=list)
    complete: bool = False

    def merge(self, offset: int, items: list[Candidate], complete: bool) -> None:
        if offset <= len(self.items) and offset + len(items) >= len(self.items):
            self.items = self.items[:offset] + items
        if complete and offset <= len(self.items):
            self.complete = True


@dataclass
class GroupKnowledge:
    tenants: dict[str, tuple[Stream, Stream]] = field(default_factory=dict)
    coverage: Coverage = field(default_factory=Coverage)

    def streams(self, tenant: str) -> tuple[Stream, Stream]:
        return self.tenants.setdefault(tenant, (Stream(), Stream()))


def _blocks(rows: list[Candidate]) -> list[tuple[str, str, list[Candidate]]]:
    blocks: list[tuple[str, str, list[Candidate]]] = []
    for c in rows:
        if blocks and blocks[-1][:2] == (c.group, c.tenant):
            blocks[-1][2].append(c)
        else:
            blocks.append((c.group, c.tenant, [c]))
    return blocks


class Knowledge:
    """What a round has read of the ready jobs, and what that proves about the rest."""

    def __init__(self, workers: Sequence[FreeWorker], allowance: Allowance = UNLIMITED) -> None:
        self.allowance = allowance
        self.groups: dict[str, GroupKnowledge] = {}
        self.group_coverage = Coverage()
        self.workers = list(workers)
        self.documents = 0

    def group(self, name: str) -> GroupKnowledge:
        return self.groups.setdefault(name, GroupKnowledge())

    def add(self, query: Query, rows: list[Candidate]) -> None:
        """Record the result of ``query``: rows in index order, at most ``query.limit``."""
        self.documents += len(rows)
        full = len(rows) >= query.limit
        blocks = _blocks(rows)
        for i, (g, t, block) in enumerate(blocks):
            # A tenant's jobs end inside the result unless its block is the last of a full result.
            ends = i < len(blocks) - 1 or not full
            first, low = self.group(g).streams(t)
            if query.lows_only:
                low.merge(query.skip, block, ends)
                continue
            firsts = [c for c in block if c.stream == FIRST]
            lows = [c for c in block if c.stream == LOW]
            first.merge(query.skip, firsts, ends or bool(lows))
            if lows or ends:
                low.merge(0, lows, ends)
        if query.tenant is not None and query.group is not None and not rows:
            # Nothing from this offset on: the tenant's stream ends there.
            first, low = self.group(query.group).streams(query.tenant)
            if not query.lows_only:
                first.merge(query.skip, [], True)
            low.merge(0 if not query.lows_only else query.skip, [], True)
        if query.lows_only or query.tenant is not None:
            return
        last = blocks[-1] if blocks and full else None
        if query.group is not None:
            self.group(query.group).coverage.add(query.tenant_after, last[1] if last else None)
            return
        # A ring of groups: each group it read is known from its first tenant on.
        seen = list(dict.fromkeys(g for g, _, _ in blocks))
        for g in seen:
            self.group(g).coverage.add(None, last[1] if last and g == last[0] else None)
        self.group_coverage.add(query.group_after, last[0] if last else None)

    def candidates(self) -> list[Candidate]:
        return [c for gk in self.groups.values() for pair in gk.tenants.values() for s in pair for c in s.items]

    # -- planning ---------------------------------------------------------------------------

    def demand(self, group: str | None) -> int:
        """Most jobs ``group`` (None: any group) could get this round: its free workers, and no
        more than its limit allows (a round does not read what it cannot hand out)."""
        takers = sum(1 for w in self.workers if (w.takes_any if group is None else w.takes(group)))
        left = None if group is None else self.allowance.left((group, None))
        return takers if left is None else min(takers, left)

    def query_for(self, need: Need) -> Query:
        """The bounded read that answers ``need``.

        Limits share the group's demand among the tenants known so far, since a
        tenant gets at most its share; reading too little only costs one more read."""
        if need.kind == "groups":
            return Query(limit=max(1, self.demand(None)), group_after=need.after)
        assert need.group is not None
        demand = max(1, self.demand(need.group))
        known = len(self.group(need.group).tenants)
        if need.kind == "tenants":
            return Query(limit=math.ceil(demand / (known + 1)), group=need.group, tenant_after=need.after)
        return Query(limit=math.ceil(demand / max(1, known)), group=need.group, tenant=need.tenant,
                     lows_only=need.stream == LOW, skip=need.index)


def first_queries(workers: Sequence[FreeWorker], cursor: Cursor, allowance: Allowance = UNLIMITED) -> list[Query]:
    """The reads a round starts with, predicted from the cursor.

    Each group a worker names, and each group ``*`` workers served before, is
    read from after its last tenant (the ring's next tenants) and, for named
    groups, from the start (the wrap). ``*`` workers also read the ring of
    groups from after the last group and from the start. In the usual case of
    one group and one tenant one of these reads already holds the round.
    """
    knowledge = Knowledge(workers, allowance)
    queries: list[Query] = []
    star = any(w.takes_any for w in workers)
    closed = allowance.exhausted_groups()
    named = sorted({g for w in workers for g in w.groups if g != ANY_GROUP} - closed)
    if star:
        if cursor.last_group is not None:
            queries.append(Query(limit=knowledge.demand(None), group_after=cursor.last_group))
        queries.append(Query(limit=knowledge.demand(None)))
        # Groups served before, from the one after the last group: their next tenants.
        served = sorted(cursor.last_tenant)
        later = [g for g in served if cursor.last_group is None or g > cursor.last_group]
        earlier = [g for g in served if g not in later]
        for g in [*later, *earlier][: len(workers)]:
            if g not in named and g not in closed and not is_worker_group(g):  # '*' never takes a worker's own
                queries.append(Query(limit=knowledge.demand(g), group=g, tenant_after=cursor.last_tenant[g]))
    for g in named:
        if g in cursor.last_tenant:
            queries.append(Query(limit=knowledge.demand(g), group=g, tenant_after=cursor.last_tenant[g]))
        queries.append(Query(limit=knowledge.demand(g), group=g))
    return queries


class KnownSource:
    """A :class:`recruiter.domain.selection.Source` over :class:`Knowledge`; raises
    :class:`Missing` where the knowledge does not decide the answer."""

    def __init__(self, knowledge: Knowledge) -> None:
        self.k = knowledge

    def next_group(self, after: str | None) -> str | None:
        known = sorted(g for g, gk in self.k.groups.items() if gk.tenants and (after is None or g > after))
        upto = known[0] if known else None
        if self.k.group_coverage.covers(after, upto):
            return upto
        raise Missing(Need("groups", after=after))

    def next_tenant(self, group: str, after: str | None) -> str | None:
        gk = self.k.group(group)
        known = sorted(t for t in gk.tenants if after is None or t > after)
        upto = known[0] if known else None
        if gk.coverage.covers(after, upto):
            return upto
        raise Missing(Need("tenants", group=group, after=after))

    def job(self, group: str, tenant: str, stream: int, index: int) -> Candidate | None:
        s = self.k.group(group).streams(tenant)[stream - 1]
        if index < len(s.items):
            return s.items[index]
        if s.complete:
            return None
        raise Missing(Need("stream", group=group, tenant=tenant, stream=stream, index=index))


def dedupe(queries: Iterable[Query]) -> list[Query]:
    return list(dict.fromkeys(queries))


Plan = Generator[list[Query], list[list[Candidate]], Selection]


def plan_round(workers: Sequence[FreeWorker], cursor: Cursor, now: datetime,
               policy: RoundPolicy | CountingScheme = DEFAULT_POLICY) -> Plan:
    """The reads of one round and then its selection, as a generator.

    It yields the queries of one read (to run as one round trip) and is sent
    back their rows, in order; it returns the :class:`~recruiter.domain.selection.Selection`.
    Each read after the first answers one :class:`Missing`, so a round makes at
    most about one read per free worker; past ``2 x workers + 4`` reads (only
    possible if the queue changes under the round) it selects from what it read.
    """
    policy = as_policy(policy)
    knowledge = Knowledge(workers, policy.allowance)
    queries = dedupe(first_queries(workers, cursor, policy.allowance))
    for _ in range(2 * len(workers) + 4):
        results = yield queries
        for query, rows in zip(queries, results, strict=True):
            knowledge.add(query, rows)
        try:
            return select_from(KnownSource(knowledge), workers, cursor, policy)
        except Missing as missing:
            queries = [knowledge.query_for(missing.need)]
    return select(workers, knowledge.candidates(), cursor, now, policy)
