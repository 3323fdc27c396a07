"""The overview that fits a screen at any number of groups: totals, the groups that need attention, and one
page of groups (filtered by name), each with its tenant count and its tenants only on demand.

Made from :class:`recruiter.admin.stats.Stats` (read once, then cut as each front end asks: the
dashboard's overview, ``recruiter stats --view summary``), so it reads nothing itself.

Invariants: everything it returns is bounded whatever the number of groups and tenants:
``size`` (at most ``MAX_PAGE_SIZE``) group rows, ``ATTENTION_SHOWN`` groups per reason for
attention, ``TENANTS_SHOWN`` tenants of the one group asked, ``PAUSED_SHOWN`` paused names, each
with the count of what it leaves out. The groups of jobs aimed at one worker (``@worker:<id>``,
:mod:`recruiter.domain.placement`) are summed apart (:class:`WorkerGroups`) and listed only when
asked for (``worker_groups``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from recruiter.admin.stats import Depth, GroupStats, Stats, TenantStats, Window
from recruiter.domain.placement import is_worker_group

DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 200
ATTENTION_SHOWN = 5
TENANTS_SHOWN = 50
PAUSED_SHOWN = 20
FAILING_WINDOW = 1  # the 5-minute window: a group with a failure in it is failing


@dataclass(frozen=True)
class OverviewQuery:
    """What one view asks for: ``name`` (a part of the group's name, any case), the ``page`` (from 1) of ``size``
    groups, the tenants of the group ``tenants_of``, and the ``@worker:`` groups listed or summed apart."""

    name: str | None = None
    page: int = 1
    size: int = DEFAULT_PAGE_SIZE
    tenants_of: str | None = None
    worker_groups: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.size <= MAX_PAGE_SIZE:
            raise ValueError(f"page size must be a whole number from 1 to {MAX_PAGE_SIZE}")
        if self.page < 1:
            raise ValueError("page must be a whole number from 1")


@dataclass(frozen=True)
class GroupRow:
    """One group of the page: its depth and windows summed over its tenants, and how many tenants it has."""

    group: str
    depth: Depth
    windows: tuple[Window, ...]
    tenants: int
    paused: bool
    held: bool  # a limit of the group (or one of its tenants) holds jobs back


@dataclass(frozen=True)
class Attention:
    """The groups to look at first, for one ``reason`` (``oldest ready``, ``failing``, ``paused``, ``held by a
    limit``): the first ``ATTENTION_SHOWN`` (``rows``) of ``count``."""

    reason: str
    rows: tuple[GroupRow, ...]
    count: int


@dataclass(frozen=True)
class WorkerGroups:
    """The ``@worker:<id>`` groups (jobs aimed at one worker), summed: how many, their depth, their windows."""

    count: int
    depth: Depth
    windows: tuple[Window, ...]


@dataclass(frozen=True)
class Tenants:
    """The tenants of one group, the most ready first: the first ``TENANTS_SHOWN`` of ``count``."""

    group: str
    rows: tuple[TenantStats, ...]
    count: int


@dataclass(frozen=True)
class Overview:
    at: datetime
    query: OverviewQuery
    groups: int  # operator groups (the @worker: ones are in worker_groups)
    tenants: int  # (group, tenant) pairs of those groups
    depth: Depth  # summed over the operator groups
    windows: tuple[Window, ...]  # summed: archived, failed (percentiles: the worst group's)
    attention: tuple[Attention, ...]
    matching: int  # groups the name filter keeps
    pages: int
    rows: tuple[GroupRow, ...]
    expanded: Tenants | None  # the tenants asked for (query.tenants_of), if that group exists
    worker_groups: WorkerGroups
    paused_groups: tuple[str, ...]  # the first PAUSED_SHOWN
    paused_tenants: tuple[str, ...]
    paused_count: int  # groups and tenants paused in all

    @property
    def page(self) -> int:
        return min(self.query.page, self.pages)


def overview_of(figures: Stats, query: OverviewQuery = OverviewQuery()) -> Overview:
    """The bounded overview of ``figures`` for ``query`` (see the module doc)."""
    held = {v.group for v in figures.limits if v.held}
    paused = set(figures.paused.groups)
    operator = [g for g in figures.groups if not is_worker_group(g.group)]
    aimed = [g for g in figures.groups if is_worker_group(g.group)]
    listed = figures.groups if query.worker_groups else operator
    rows = [_row(g, g.group in paused, g.group in held) for g in listed]
    needle = (query.name or "").casefold()
    matching = [r for r in rows if needle in r.group.casefold()] if needle else rows
    pages = max(1, math.ceil(len(matching) / query.size))
    first = (min(query.page, pages) - 1) * query.size
    return Overview(
        at=figures.at, query=query, groups=len(operator), tenants=sum(len(g.tenants) for g in operator),
        depth=sum((g.depth for g in operator), Depth()), windows=sum_windows(g.windows for g in operator),
        attention=_attention([r for r in rows if not is_worker_group(r.group)]), matching=len(matching),
        pages=pages, rows=tuple(matching[first:first + query.size]), expanded=_tenants(figures, query.tenants_of),
        worker_groups=WorkerGroups(len(aimed), sum((g.depth for g in aimed), Depth()),
                                   sum_windows(g.windows for g in aimed)),
        paused_groups=figures.paused.groups[:PAUSED_SHOWN], paused_tenants=figures.paused.tenants[:PAUSED_SHOWN],
        paused_count=len(figures.paused.groups) + len(figures.paused.tenants))


def _row(g: GroupStats, paused: bool, held: bool) -> GroupRow:
    return GroupRow(g.group, g.depth, g.windows, len(g.tenants), paused, held)


def sum_windows(windows: Iterable[Sequence[Window]]) -> tuple[Window, ...]:
    """The windows of many groups summed: archived and failed added, each time the highest of the groups'."""
    out: list[Window] = []
    for group in windows:
        for i, w in enumerate(group):
            if i == len(out):
                out.append(Window(w.seconds))
            s = out[i]
            out[i] = replace(s, archived=s.archived + w.archived, failed=s.failed + w.failed,
                             wait_p50_s=_max(s.wait_p50_s, w.wait_p50_s), wait_p95_s=_max(s.wait_p95_s, w.wait_p95_s),
                             run_p50_s=_max(s.run_p50_s, w.run_p50_s), run_p95_s=_max(s.run_p95_s, w.run_p95_s),
                             sampled=s.sampled or w.sampled)
    return tuple(out)


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def _failed(r: GroupRow) -> int:
    return r.windows[FAILING_WINDOW].failed if len(r.windows) > FAILING_WINDOW else 0


def _attention(rows: list[GroupRow]) -> tuple[Attention, ...]:
    """Per reason, the groups that need it most first (ties: by name)."""
    reasons: tuple[tuple[str, list[GroupRow], Callable[[GroupRow], float]], ...] = (
        ("oldest ready", [r for r in rows if r.depth.oldest_ready_s is not None and r.depth.ready > r.depth.paused],
         lambda r: -(r.depth.oldest_ready_s or 0.0)),
        ("failing", [r for r in rows if _failed(r)], lambda r: -_failed(r)),
        ("paused", [r for r in rows if r.paused], lambda r: -r.depth.ready),
        ("held by a limit", [r for r in rows if r.held], lambda r: -r.depth.ready),
    )
    return tuple(Attention(reason, _first(found, key), len(found)) for reason, found, key in reasons)


def _first(rows: list[GroupRow], key: Callable[[GroupRow], float]) -> tuple[GroupRow, ...]:
    return tuple(sorted(rows, key=lambda r: (key(r), r.group))[:ATTENTION_SHOWN])


def _tenants(figures: Stats, group: str | None) -> Tenants | None:
    if group is None:
        return None
    for g in figures.groups:
        if g.group == group:
            ranked = sorted(g.tenants, key=lambda t: (-t.depth.ready, -(t.depth.oldest_ready_s or 0.0), t.tenant))
            return Tenants(group, tuple(ranked[:TENANTS_SHOWN]), len(g.tenants))
    return None


def filtered(figures: Stats, *, groups: Sequence[str] = (), tenants: Sequence[str] = (),
             worker_groups: bool = False) -> Stats:
    """``figures`` kept to the ``groups`` (exact names; none: every one) and, within them, the ``tenants`` (a
    group with none of them is left out; its figures become those of the tenants kept); the ``@worker:`` groups
    only if ``worker_groups`` or named (workers_by_group likewise)."""
    def wanted(name: str) -> bool:
        return name in groups if groups else (worker_groups or not is_worker_group(name))

    kept = []
    for g in figures.groups:
        if not wanted(g.group):
            continue
        if tenants:
            ts = tuple(t for t in g.tenants if t.tenant in tenants)
            if not ts:
                continue
            g = GroupStats(g.group, sum((t.depth for t in ts), Depth()), _tenant_windows(ts), ts)
        kept.append(g)
    return replace(figures, groups=tuple(kept),
                   workers_by_group={k: v for k, v in figures.workers_by_group.items() if wanted(k)})


def _tenant_windows(tenants: Sequence[TenantStats]) -> tuple[Window, ...]:
    """Tenants' windows summed (one tenant: its own, exact percentiles)."""
    return tenants[0].windows if len(tenants) == 1 else sum_windows(t.windows for t in tenants)
