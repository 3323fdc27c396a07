"""The cluster at a glance (``recruiter status``): jobs by state and by why, the roster, the leases, the pause
switches, and the releases live (:mod:`recruiter.admin.releases`).

Invariant: read through :mod:`recruiter.store`'s counting functions (one aggregation
per collection, served by indexes) and judged on the server's clock ``now`` (a worker
counts as live by its own heartbeat, a lease as held until it expires); the values
returned are frozen and hold no driver object. A malformed roster entry is counted as
such and in no other figure (:mod:`recruiter.admin.roster`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from recruiter.admin.releases import ReleasesView, releases_of
from recruiter.admin.roster import checked_entries
from recruiter.domain import versions
from recruiter.domain.control import Paused
from recruiter.domain.lanes import lane_of, runner_of
from recruiter.domain.liveness import is_fresh
from recruiter.domain.versions import Release
from recruiter.store import (
    Document,
    SyncCollections,
    SyncDb,
    count_by_status,
    count_by_why,
    entries_by_id,
    heartbeats_by_worker,
    read_leases,
    read_paused,
)


@dataclass(frozen=True)
class WorkerCounts:
    """Worker slots in the roster (a slot's look-ahead lanes count once); ``malformed``: roster entries
    set aside, counted in no other figure (the recruiter gives them no work)."""

    total: int
    available: int
    missed_heartbeats: int
    by_group: Mapping[str, int]
    malformed: int = 0


@dataclass(frozen=True)
class LeaseView:
    """A lease (``recruiter``, ``cleaner``): its last holder, its epoch (fencing token), until when it is held."""

    name: object
    owner: object
    epoch: object
    held: bool
    expires_at: datetime | None
    release: Release = versions.UNKNOWN  # the holder's, as the lease records it (recruiter.domain.versions)


@dataclass(frozen=True)
class PausedNames:
    groups: tuple[str, ...]
    tenants: tuple[str, ...]


@dataclass(frozen=True)
class Status:
    """Jobs waiting by status, archived by why, the roster, the leases by name, the paused names."""

    scheduled: Mapping[object, int]
    archived: Mapping[object, int]
    workers: WorkerCounts
    leases: Mapping[object, LeaseView]
    paused: PausedNames
    releases: ReleasesView


def leases(db: SyncDb, now: datetime) -> list[LeaseView]:
    """The recruiter's and the cleaner's leases, as read at ``now`` (server time)."""
    views = []
    for d in read_leases(SyncCollections.of(db).metadata):
        expires = d.get("expires_at")
        expires = expires if isinstance(expires, datetime) else None
        views.append(LeaseView(name=d["_id"], owner=d.get("owner"), epoch=d.get("epoch"),
                               held=bool(expires and expires > now), expires_at=expires,
                               release=versions.recorded(d, owner=d.get("owner"))))
    return views


def paused_names(db: SyncDb) -> PausedNames:
    return names_of(read_paused(SyncCollections.of(db).metadata))


def names_of(paused: Paused) -> PausedNames:
    return PausedNames(groups=tuple(sorted(paused.groups)), tenants=tuple(sorted(paused.tenants)))


def worker_counts(db: SyncDb, now: datetime) -> WorkerCounts:
    return _roster(db, now)[0]


def _roster(db: SyncDb, now: datetime) -> tuple[WorkerCounts, list[tuple[str, Release]]]:
    """The worker counts, and the release of each live worker slot (one read of the roster and the beats)."""
    c = SyncCollections.of(db)
    # Read with their assignment, so an entry is judged malformed here as in ``workers list``.
    entries, malformed = checked_entries(entries_by_id(c.roster))
    # A worker slot is counted once, whatever its look-ahead lanes (recruiter.domain.lanes).
    workers = [e for e in entries if lane_of(e) == 0]
    taking = {runner_of(e) for e in entries if e.get("available")}
    beats = heartbeats_by_worker(c.heartbeats, {"session": 1, "fresh_until": 1}, {w["_id"]: w for w in workers})
    live = [w for w in workers if is_fresh(beats.get(w["_id"]), w, now)]
    counts = WorkerCounts(total=len(workers), available=sum(1 for w in workers if runner_of(w) in taking),
                          missed_heartbeats=len(workers) - len(live), by_group=_by_group(workers),
                          malformed=len(malformed))
    return counts, [(str(w["_id"]), versions.recorded(w)) for w in live]


def status(db: SyncDb, now: datetime) -> Status:
    """The whole snapshot: a handful of reads, whatever the number of jobs."""
    c = SyncCollections.of(db)
    scheduled = count_by_status(c.scheduled)
    archived = count_by_why(c.archived)
    workers, live = _roster(db, now)
    held = [lease for lease in leases(db, now) if lease.held]
    return Status(
        scheduled=dict(sorted(scheduled.items(), key=lambda kv: str(kv[0]))),
        archived=dict(sorted(archived.items(), key=lambda kv: str(kv[0]))),
        workers=workers,
        leases={lease.name: lease for lease in leases(db, now)},
        paused=paused_names(db),
        releases=releases_of(live, [(str(lease.name), lease.release) for lease in held]),
    )


def _by_group(workers: list[Document]) -> dict[str, int]:
    """Slots by the group names they take (checked entries: each ``work_on`` a list of names)."""
    counts: dict[str, int] = {}
    for w in workers:
        for g in w.get("work_on") or []:
            counts[g] = counts.get(g, 0) + 1
    return dict(sorted(counts.items()))
