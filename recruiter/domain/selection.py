"""Choosing which ready job goes to which free worker: pure, no I/O.

This is the only place the assignment policy lives. :func:`select` takes the
free workers, the candidate jobs, the fairness cursor and ``now``, and returns
the assignments and the new cursor. The policy, level by level:

1. **Groups.** Each turn of a round serves one group, in ring order (groups
   sorted by name, wrapping), continuing after the group the last turn served,
   even across rounds. A group's turn goes to the most specific free worker
   that takes it (fewest groups; ``*`` last), so a worker shared by several
   groups is shared turn by turn and a busy group cannot starve a quiet one.
2. **Tenants.** Within a group, tenants are served round-robin in ring order
   (the default tenant ``""`` first, then names sorted), from the tenant after
   the one the group served last.
3. **Priority.** Within a tenant of a group, due retrying jobs go first. Then
   the counting scheme (``4,1``: four high, one low, again) picks the
   priority, falling back to the other one when the wanted one has no job; a
   fallback does not advance the scheme.
4. **FIFO** by ``scheduled_at``, then by id.

The turns go on until no group has both a job left and a free worker that
takes it, so no worker is left idle while a job of its groups waits.

Look-ahead (:mod:`recruiter.domain.lanes`): a free worker may be a lane of a
busy slot (``depth`` > 0), and a turn's job goes to a lane that would start it
now before any deeper lane, then to the most specific worker. So idle slots
get what they would get without look-ahead; deeper lanes only add turns to the
round, for the groups they take (see the bound in :mod:`recruiter.domain.lanes`).

A job aimed at one worker is in that worker's reserved group (``@worker:ID``,
:mod:`recruiter.domain.placement`), which only that worker's slots name: ``*``
takes any group but those, so such a job is never given to another worker.

:func:`select_from` runs the same policy over a :class:`Source`, which is how
the recruiter runs it on partial knowledge of the queue: its source raises when
it is asked for something it has not read yet (see :mod:`recruiter.domain.candidates`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from recruiter.domain.job import Priority
from recruiter.domain.naming import ANY_GROUP as ANY_GROUP  # re-exported: the selection speaks of it
from recruiter.domain.placement import is_worker_group

DEFAULT_TENANT = ""  # jobs without a tenant; real tenant names are never empty

# The two streams of one (group, tenant), in the order the candidates index gives them:
# FIRST = due retrying jobs (high, then low) followed by fresh high ones; LOW = fresh low ones.
FIRST = 1
LOW = 2


@dataclass(frozen=True)
class FreeWorker:
    id: str
    groups: tuple[str, ...]
    # How many jobs this lane's runner holds before this lane's job would start
    # (recruiter.domain.lanes): 0 for an idle slot, more for a look-ahead lane.
    depth: int = 0
    # The worker process the lane belongs to (its registration token; the id if unknown): a
    # job is never given to a process that refused it (recruiter.domain.refusals).
    process: str = ""

    @property
    def process_key(self) -> str:
        return self.process or self.id

    @property
    def takes_any(self) -> bool:
        return ANY_GROUP in self.groups

    def takes(self, group: str) -> bool:
        """Whether the worker takes ``group``; ``*`` is any group but the reserved groups of
        jobs aimed at one worker (:mod:`recruiter.domain.placement`), taken only by name."""
        return group in self.groups or (self.takes_any and not is_worker_group(group))

    @property
    def specificity(self) -> tuple[int, bool, int]:
        """Sort key: a lane that would start the job now first (``depth``), then the worker
        that can do the least."""
        return self.depth, self.takes_any, len(self.groups)


@dataclass(frozen=True)
class Candidate:
    id: object  # the job's _id: opaque here, only compared and used as a key
    group: str
    scheduled_at: datetime
    tenant: str = DEFAULT_TENANT
    priority: str = Priority.LOW.value
    retrying: bool = False
    refused_by: frozenset[str] = frozenset()  # processes that could not run it (recruiter.domain.refusals)

    @property
    def stream(self) -> int:
        return FIRST if self.retrying or self.priority == Priority.HIGH.value else LOW

    @property
    def order(self) -> tuple[bool, bool, datetime, str]:
        """Order within a (group, tenant), the same as the candidates index:
        retrying first (status descending), then high (priority ascending), then
        scheduled_at, then id."""
        return not self.retrying, self.priority != Priority.HIGH.value, self.scheduled_at, str(self.id)


@dataclass(frozen=True)
class Assignment:
    worker_id: str
    job_id: object


@dataclass(frozen=True)
class CountingScheme:
    """``high`` high-priority jobs, then ``low`` low-priority ones, and again."""

    high: int = 4
    low: int = 1

    def __post_init__(self) -> None:
        if self.high < 0 or self.low < 0 or self.high + self.low == 0:
            raise ValueError(f"counting scheme needs two counts >= 0, not both 0; got {self.high},{self.low}")

    @classmethod
    def parse(cls, text: str) -> CountingScheme:
        parts = text.split(",")
        try:
            high, low = (int(p.strip()) for p in parts)
        except ValueError:
            raise ValueError(f"invalid counting scheme {text!r}: expected HIGH,LOW such as 4,1") from None
        return cls(high, low)

    def wants_high(self, position: int) -> bool:
        return position % (self.high + self.low) < self.high

    def advance(self, position: int) -> int:
        return (position + 1) % (self.high + self.low)

    def __str__(self) -> str:
        return f"{self.high},{self.low}"


DEFAULT_SCHEME = CountingScheme()


# A limit's key: (group, None) for a whole group, (group, tenant) for one tenant of it.
LimitKey = tuple[str, str | None]


@dataclass(frozen=True)
class Allowance:
    """How many more jobs each limited group, and tenant of a group, may be handed out this
    round (:mod:`recruiter.domain.limits` computes it); keys not in ``remaining`` are unlimited.
    ``paced``: the keys with a rate limit, whose jobs go only to workers that start them now."""

    remaining: Mapping[LimitKey, int] = field(default_factory=dict)
    paced: frozenset[LimitKey] = frozenset()

    def left(self, key: LimitKey) -> int | None:
        return self.remaining.get(key)

    def exhausted_groups(self) -> frozenset[str]:
        return frozenset(g for (g, t), n in self.remaining.items() if t is None and n <= 0)


UNLIMITED = Allowance()


@dataclass(frozen=True)
class RoundPolicy:
    """Everything the selection obeys besides the queue and the workers, as one value: the
    counting scheme, the pause switches, and what the limits allow (:class:`Allowance`)."""

    scheme: CountingScheme = DEFAULT_SCHEME
    paused_groups: frozenset[str] = frozenset()
    paused_tenants: frozenset[str] = frozenset()
    allowance: Allowance = UNLIMITED

    def paced(self, group: str, tenant: str) -> bool:
        paced = self.allowance.paced
        return bool(paced) and ((group, None) in paced or (group, tenant) in paced)


DEFAULT_POLICY = RoundPolicy()


def as_policy(policy: RoundPolicy | CountingScheme) -> RoundPolicy:
    """A policy; a counting scheme alone is the policy with that scheme and nothing else."""
    return RoundPolicy(policy) if isinstance(policy, CountingScheme) else policy


@dataclass(frozen=True)
class Cursor:
    """Where the rings and schemes stand; kept in ``metadata`` between rounds.

    ``last_group``: the group the last turn served. ``last_tenant``: per group,
    the tenant it served last. ``counts``: per (group, tenant), the position in
    the counting scheme; 0 is left out, so the map only holds tenants mid-scheme.
    """

    last_group: str | None = None
    last_tenant: Mapping[str, str] = field(default_factory=dict)
    counts: Mapping[tuple[str, str], int] = field(default_factory=dict)


@dataclass(frozen=True)
class Selection:
    assignments: list[Assignment]
    cursor: Cursor


class Source(Protocol):
    """Ready jobs, as the policy walks them. ``after=None`` means from the start."""

    def next_group(self, after: str | None) -> str | None:
        """The first group after ``after`` with a ready job; None past the last."""

    def next_tenant(self, group: str, after: str | None) -> str | None:
        """The first tenant of ``group`` after ``after`` with a ready job; None past the last."""

    def job(self, group: str, tenant: str, stream: int, index: int) -> Candidate | None:
        """The ``index``-th job of a stream of (group, tenant); None past its end."""


class ListSource:
    """A :class:`Source` over a plain list of candidates (complete knowledge)."""

    def __init__(self, candidates: Iterable[Candidate], now: datetime) -> None:
        streams: dict[tuple[str, str], tuple[list[Candidate], list[Candidate]]] = {}
        for c in {c.id: c for c in candidates if c.scheduled_at <= now}.values():
            streams.setdefault((c.group, c.tenant), ([], []))[c.stream - 1].append(c)
        for pair in streams.values():
            for stream in pair:
                stream.sort(key=lambda c: c.order)
        self._streams = streams
        self._groups = sorted({g for g, _ in streams})
        self._tenants: dict[str, list[str]] = {}
        for g, t in sorted(streams):
            self._tenants.setdefault(g, []).append(t)

    def next_group(self, after: str | None) -> str | None:
        return _after(self._groups, after)

    def next_tenant(self, group: str, after: str | None) -> str | None:
        return _after(self._tenants.get(group, []), after)

    def job(self, group: str, tenant: str, stream: int, index: int) -> Candidate | None:
        items = self._streams[(group, tenant)][stream - 1]
        return items[index] if index < len(items) else None


def _after(ordered: list[str], after: str | None) -> str | None:
    i = 0 if after is None else bisect.bisect_right(ordered, after)
    return ordered[i] if i < len(ordered) else None


def select(workers: Sequence[FreeWorker], candidates: Iterable[Candidate], cursor: Cursor, now: datetime,
           policy: RoundPolicy | CountingScheme = DEFAULT_POLICY) -> Selection:
    """Assign the due ``candidates`` to ``workers`` by the policy; each job at most once."""
    return select_from(ListSource(candidates, now), workers, cursor, policy)


def select_from(source: Source, workers: Sequence[FreeWorker], cursor: Cursor,
                policy: RoundPolicy | CountingScheme = DEFAULT_POLICY) -> Selection:
    return _Round(source, workers, cursor, as_policy(policy)).run()


def _ring(first: str | None, step: Callable[[str | None], str | None], start: str | None, skip: set[str]) -> str | None:
    """Walk a ring from after ``start``, wrapping once; the first key not in ``skip``.

    ``first`` is the key after ``start``; ``step(after)`` gives the next one."""
    key, wrapped = first, start is None
    while True:
        if key is None:
            if wrapped:
                return None
            wrapped, key = True, step(None)
            continue
        if wrapped and start is not None and key > start:
            return None
        if key not in skip:
            return key
        key = step(key)


class _Round:
    def __init__(self, source: Source, workers: Sequence[FreeWorker], cursor: Cursor,
                 policy: RoundPolicy) -> None:
        self.source = source
        self.policy = policy
        self.scheme = policy.scheme
        self.left = dict(policy.allowance.remaining)
        self.free = list(workers)
        self.last_group = cursor.last_group
        self.last_tenant = dict(cursor.last_tenant)
        self.counts = dict(cursor.counts)
        self.taken: dict[tuple[str, str], list[int]] = {}
        # Groups with no job left this round; paused ones, and those whose limit allows none, from the start.
        self.empty_groups: set[str] = set(policy.paused_groups) | policy.allowance.exhausted_groups()
        self.empty_tenants: dict[str, set[str]] = {}

    def run(self) -> Selection:
        assignments: list[Assignment] = []
        while self.free:
            group = self._next_group()
            if group is None:
                break
            job = self._next_job(group)
            if job is None:
                self.empty_groups.add(group)
                continue
            able = [w for w in self.free if w.takes(group) and w.process_key not in job.refused_by]
            if self.policy.paced(group, job.tenant):
                able = [w for w in able if w.depth == 0]  # a rate counts starts: never held ahead
            if not able:
                continue  # only processes that refused it are free: left for another worker
            worker = min(able, key=lambda w: w.specificity)
            self.free.remove(worker)
            assignments.append(Assignment(worker.id, job.id))
            self.last_group = group
            self._count(group, job.tenant)
        counts = {k: v for k, v in self.counts.items() if v}
        return Selection(assignments, Cursor(self.last_group, self.last_tenant, counts))

    def _count(self, group: str, tenant: str) -> None:
        """One more job of ``group`` and ``tenant`` handed out: spend their allowances."""
        for key in ((group, None), (group, tenant)):
            if key in self.left:
                self.left[key] -= 1
                if self.left[key] <= 0:
                    if key[1] is None:
                        self.empty_groups.add(group)
                    else:
                        self.empty_tenants.setdefault(group, set()).add(tenant)

    def _next_group(self) -> str | None:
        """The next group in the ring that a free worker takes and that may have a job."""
        start = self.last_group
        if any(w.takes_any for w in self.free):
            while (group := _ring(self.source.next_group(start), self.source.next_group, start,
                                  self.empty_groups)) is not None:
                if any(w.takes(group) for w in self.free):
                    return group
                self.empty_groups.add(group)  # a worker's own group, and that worker is not free
            return None
        named = sorted({g for w in self.free for g in w.groups} - self.empty_groups)
        later = [g for g in named if start is None or g > start]
        ring = later or named
        return ring[0] if ring else None

    def _next_job(self, group: str) -> Candidate | None:
        """The next job of ``group``: round-robin over its tenants."""
        start = self.last_tenant.get(group)
        empty = self.empty_tenants.setdefault(group, set())

        def step(after: str | None) -> str | None:
            return self.source.next_tenant(group, after)

        while (tenant := _ring(step(start), step, start, empty)) is not None:
            if tenant in self.policy.paused_tenants or self.left.get((group, tenant), 1) <= 0:
                empty.add(tenant)  # paused, or its limit allows no more this round
                continue
            job = self._take(group, tenant)
            if job is not None:
                self.last_tenant[group] = tenant
                return job
            empty.add(tenant)
        return None

    def _take(self, group: str, tenant: str) -> Candidate | None:
        """The next job of one tenant: retrying first, then by the counting scheme."""
        key = (group, tenant)
        taken = self.taken.setdefault(key, [0, 0])
        first = self.source.job(group, tenant, FIRST, taken[0])
        if first is not None and first.retrying:
            taken[0] += 1
            return first
        position = self.counts.get(key, 0)
        if self.scheme.wants_high(position) and first is not None:
            taken[0] += 1
            self.counts[key] = self.scheme.advance(position)
            return first
        low = self.source.job(group, tenant, LOW, taken[1])
        if low is not None:
            taken[1] += 1
            if not self.scheme.wants_high(position):
                self.counts[key] = self.scheme.advance(position)
            return low
        if first is not None:  # wanted low, there is none: fall back to high
            taken[0] += 1
            return first
        return None

