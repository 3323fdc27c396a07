"""``recruiter stats``: depth per group and per tenant, throughput, failures and latency over recent
windows, workers and leases, at a bounded cost (:mod:`recruiter.store.stats`).

Definitions (every figure is exact, unless ``sampled`` says the percentiles come from the
newest ``sample_limit`` jobs of a window):

- ``ready``: unlocked jobs due now (queued, or retrying whose delay has passed): what the
  recruiter may assign; ``paused``: those of them whose group or tenant is paused;
  ``delayed``: unlocked, due later, never tried; ``retrying``: unlocked, waiting for their next
  attempt; ``assigned``: locked for a worker that has not shown it running; ``running``: locked,
  and the worker's heartbeat shows it running; ``oldest_ready_s``: how long the oldest ready job
  has been due.
- over each window (1 min, 5 min, 1 h, ending now): ``archived``, ``failed`` (archived with any
  why but ``done``), ``throughput_per_s`` (archived per second), ``failure_rate`` (failed over
  archived), and the wait (due to started) and run (started to ended) times of the last attempt,
  p50 and p95 by the nearest-rank method, over the jobs whose last attempt has those times.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from recruiter.admin.limits import LimitView, listing
from recruiter.admin.releases import ReleasesView, live_releases
from recruiter.admin.status import LeaseView, PausedNames, leases, paused_names
from recruiter.admin.workers import MALFORMED, WorkerView, workers
from recruiter.domain.following import running_in
from recruiter.domain.lanes import slot_of
from recruiter.store import Document, SyncCollections, SyncDb, heartbeats_by_worker
from recruiter.store.stats import archived_counts, archived_times, locked_jobs, waiting_depth

WINDOWS_S = (60, 300, 3600)
SAMPLE_LIMIT = 5_000  # per slice of the windows (1m, 1m-5m, 5m-1h): at most 15 000 documents
Key = tuple[str, str]  # (group, tenant); a job without a tenant is under ""


@dataclass(frozen=True)
class Depth:
    ready: int = 0
    delayed: int = 0
    retrying: int = 0
    assigned: int = 0
    running: int = 0
    paused: int = 0
    oldest_ready_s: float | None = None

    def __add__(self, other: Depth) -> Depth:
        ages = [a for a in (self.oldest_ready_s, other.oldest_ready_s) if a is not None]
        return Depth(self.ready + other.ready, self.delayed + other.delayed, self.retrying + other.retrying,
                     self.assigned + other.assigned, self.running + other.running, self.paused + other.paused,
                     max(ages) if ages else None)


@dataclass(frozen=True)
class Window:
    """The jobs archived over the last ``seconds``."""

    seconds: int
    archived: int = 0
    failed: int = 0
    wait_p50_s: float | None = None
    wait_p95_s: float | None = None
    run_p50_s: float | None = None
    run_p95_s: float | None = None
    sampled: bool = False

    @property
    def throughput_per_s(self) -> float:
        return self.archived / self.seconds

    @property
    def failure_rate(self) -> float | None:
        return self.failed / self.archived if self.archived else None


@dataclass(frozen=True)
class TenantStats:
    tenant: str
    depth: Depth
    windows: tuple[Window, ...]


@dataclass(frozen=True)
class GroupStats:
    group: str
    depth: Depth
    windows: tuple[Window, ...]
    tenants: tuple[TenantStats, ...]


@dataclass(frozen=True)
class WorkerFigures:
    """Worker slots by state; ``zombies``: entries whose heartbeat is late (given no work, the cleaner's);
    ``malformed``: roster entries set aside (:mod:`recruiter.admin.roster`), in no slot and no group."""

    idle: int = 0
    busy: int = 0
    stopping: int = 0
    zombies: int = 0
    malformed: int = 0


@dataclass(frozen=True)
class Stats:
    at: datetime
    groups: tuple[GroupStats, ...]
    workers: WorkerFigures
    workers_by_group: dict[str, WorkerFigures]
    leases: tuple[LeaseView, ...]
    paused: PausedNames
    # Flow control (recruiter.admin.limits): every limit with what it holds now.
    limits: tuple[LimitView, ...] = ()
    # The releases of the live worker slots and lease holders (recruiter.admin.releases).
    releases: ReleasesView = field(default_factory=lambda: ReleasesView({}, ()))
    # The stored limits that are malformed, one line each: the recruiter holds them (flow-control.md).
    malformed_limits: tuple[str, ...] = ()


@dataclass
class _Window:
    """One window's figures per (group, tenant), as they are summed."""

    archived: dict[Key, int] = field(default_factory=lambda: defaultdict(int))
    failed: dict[Key, int] = field(default_factory=lambda: defaultdict(int))
    waits: dict[Key, list[float]] = field(default_factory=lambda: defaultdict(list))
    runs: dict[Key, list[float]] = field(default_factory=lambda: defaultdict(list))
    sampled: bool = False


def stats(db: SyncDb, now: datetime, *, sample_limit: int = SAMPLE_LIMIT) -> Stats:
    """Every figure (see the module doc); about a dozen round trips, whatever the number of jobs."""
    c = SyncCollections.of(db)
    paused = paused_names(db)
    depth = _depth(c, now, paused)
    windows = _windows(c, now, sample_limit)
    keys = sorted(set(depth) | {k for w in windows for k in w.archived})
    roster = workers(db, now)
    held = tuple(leases(db, now))
    flow = listing(db, now)
    return Stats(at=now, groups=_groups(keys, depth, windows), workers=_worker_figures(roster),
                 workers_by_group=_workers_by_group(roster), leases=held, paused=paused,
                 limits=flow.limits, malformed_limits=flow.problems, releases=live_releases(roster, held))


@dataclass(frozen=True)
class Queue:
    """What the queue holds now, without the history: the depth per group (summed over its tenants) and the
    worker slots by state."""

    at: datetime
    depth: dict[str, Depth]
    workers: WorkerFigures
    # The workflows running, by name (admin.workflow_view.running_by_name): read for the metrics; None: not read.
    workflows: dict[str, int] | None = None


def queue(db: SyncDb, now: datetime) -> Queue:
    """The depth and the workers of :func:`stats`, without its history windows: a few round trips whatever
    the number of jobs (what the cluster gauges of ``--metrics-port`` serve, docs/operations/metrics.md)."""
    by_group: dict[str, Depth] = defaultdict(Depth)
    for (group, _), d in _depth(SyncCollections.of(db), now, paused_names(db)).items():
        by_group[group] = by_group[group] + d
    return Queue(at=now, depth=dict(sorted(by_group.items())), workers=_worker_figures(workers(db, now)))


def _key(doc: Document) -> Key:
    group, tenant = doc.get("group"), doc.get("tenant")
    return (group if isinstance(group, str) else "", tenant if isinstance(tenant, str) else "")


def _depth(c: SyncCollections, now: datetime, paused: PausedNames) -> dict[Key, Depth]:
    depth: dict[Key, Depth] = defaultdict(Depth)
    for due in (True, False):
        for row in waiting_depth(c.scheduled, now, due=due):
            key = _key(row["_id"])
            retrying = row["_id"].get("status") == "retrying"
            if due:
                oldest = row.get("oldest")
                age = max(0.0, (now - oldest).total_seconds()) if isinstance(oldest, datetime) else None
                held = key[0] in paused.groups or key[1] in paused.tenants
                add = Depth(ready=row["n"], paused=row["n"] if held else 0, oldest_ready_s=age)
            else:
                add = Depth(retrying=row["n"]) if retrying else Depth(delayed=row["n"])
            depth[key] = depth[key] + add
    locked = locked_jobs(c.scheduled)
    beats = heartbeats_by_worker(c.heartbeats) if locked else {}
    for job in locked:
        holder = job.get("locked_by")
        beat = beats.get(holder) if isinstance(holder, str) else None  # a malformed one may not be hashable
        running = beat is not None and running_in(beat, {**job, "locked": True})
        key = _key(job)
        depth[key] = depth[key] + (Depth(running=1) if running else Depth(assigned=1))
    return depth


def _windows(c: SyncCollections, now: datetime, sample_limit: int) -> list[_Window]:
    """The three windows, nested (1 min within 5 min within 1 h): each disjoint slice is read once."""
    bounds = [now - timedelta(seconds=s) for s in WINDOWS_S]
    slices: list[_Window] = []
    until = now + timedelta(milliseconds=1)  # archived_at is at most now (ms precision): [since, until)
    for since in bounds:
        part = _Window()
        for row in archived_counts(c.archived, since, until):
            key = _key(row["_id"])
            part.archived[key] += row["n"]
            if row["_id"].get("why") != "done":
                part.failed[key] += row["n"]
        sample = archived_times(c.archived, since, until, sample_limit)
        part.sampled = sum(part.archived.values()) > len(sample)
        for doc in sample:
            _add_times(part, doc)
        slices.append(part)
        until = since
    return [_merge(slices[: i + 1]) for i in range(len(slices))]


def _add_times(part: _Window, doc: Document) -> None:
    last = doc.get("last_execution")
    if not isinstance(last, dict):
        return
    due, started, ended = last.get("scheduled_at"), last.get("started_at"), last.get("ended_at")
    key = _key(doc)
    if isinstance(started, datetime) and isinstance(due, datetime):
        part.waits[key].append(max(0.0, (started - due).total_seconds()))
    if isinstance(started, datetime) and isinstance(ended, datetime):
        part.runs[key].append(max(0.0, (ended - started).total_seconds()))


def _merge(parts: Sequence[_Window]) -> _Window:
    out = _Window(sampled=any(p.sampled for p in parts))
    for p in parts:
        for target, source in ((out.archived, p.archived), (out.failed, p.failed)):
            for k, n in source.items():
                target[k] += n
        for lists, more in ((out.waits, p.waits), (out.runs, p.runs)):
            for k, values in more.items():
                lists[k].extend(values)
    return out


def percentile(values: Sequence[float], p: float) -> float | None:
    """The nearest-rank ``p``-th percentile (the smallest value with at least p% at or below it)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def _window(seconds: int, w: _Window, keys: Iterable[Key]) -> Window:
    ks = list(keys)
    waits = [v for k in ks for v in w.waits.get(k, [])]
    runs = [v for k in ks for v in w.runs.get(k, [])]
    return Window(seconds, archived=sum(w.archived.get(k, 0) for k in ks), failed=sum(w.failed.get(k, 0) for k in ks),
                  wait_p50_s=percentile(waits, 50), wait_p95_s=percentile(waits, 95),
                  run_p50_s=percentile(runs, 50), run_p95_s=percentile(runs, 95), sampled=w.sampled)


def _groups(keys: list[Key], depth: dict[Key, Depth], windows: list[_Window]) -> tuple[GroupStats, ...]:
    by_group: dict[str, list[Key]] = defaultdict(list)
    for k in keys:
        by_group[k[0]].append(k)
    groups = []
    for group, ks in sorted(by_group.items()):
        tenants = tuple(TenantStats(k[1], depth.get(k, Depth()),
                                    tuple(_window(s, w, [k]) for s, w in zip(WINDOWS_S, windows, strict=True)))
                        for k in ks)
        total = sum((t.depth for t in tenants), Depth())
        groups.append(GroupStats(group, total, tuple(_window(s, w, ks) for s, w in zip(WINDOWS_S, windows,
                                                                                          strict=True)), tenants))
    return tuple(groups)


def _slots(views: Iterable[WorkerView]) -> dict[str, list[WorkerView]]:
    """The well-formed roster entries by worker slot (a slot's look-ahead lanes are entries of their own)."""
    by: dict[str, list[WorkerView]] = defaultdict(list)
    for w in views:
        if w.state != MALFORMED:
            by[slot_of(w.id)].append(w)
    return by


def _figures(slots: Iterable[list[WorkerView]]) -> WorkerFigures:
    f = WorkerFigures()
    for lanes in slots:
        states = {w.state for w in lanes}
        if not all(w.live for w in lanes):
            f = replace(f, zombies=f.zombies + 1)
        elif "stopping" in states:
            f = replace(f, stopping=f.stopping + 1)
        elif states == {"idle"}:
            f = replace(f, idle=f.idle + 1)
        else:
            f = replace(f, busy=f.busy + 1)
    return f


def _worker_figures(views: list[WorkerView]) -> WorkerFigures:
    return replace(_figures(_slots(views).values()), malformed=sum(1 for w in views if w.state == MALFORMED))


def _workers_by_group(views: list[WorkerView]) -> dict[str, WorkerFigures]:
    by: dict[str, list[list[WorkerView]]] = defaultdict(list)
    for lanes in _slots(views).values():
        for g in lanes[0].groups:
            by[g].append(lanes)
    return {g: _figures(slots) for g, slots in sorted(by.items())}
