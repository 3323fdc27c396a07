"""A snapshot of a recruiter database for the ``recruiter status`` command.

Invariant: the snapshot is read through :mod:`recruiter.store` and judged on the
server's clock (a worker counts as live by its own heartbeat, a lease as held
until it expires); rendering it reads nothing more.
"""

from __future__ import annotations

import json
from typing import TypedDict

from recruiter.domain.lanes import lane_of, runner_of
from recruiter.domain.liveness import is_fresh
from recruiter.store import (
    Document,
    ServerClock,
    SyncCollections,
    Target,
    count_by_status,
    count_by_why,
    entries_summary,
    heartbeats_by_worker,
    read_leases,
    read_paused,
    sync_client,
)


class WorkerCounts(TypedDict):
    total: int
    available: int
    missed_heartbeats: int
    by_group: dict[str, int]


class LeaseFigures(TypedDict):
    owner: object
    epoch: object
    held: bool
    expires_at: str | None


class PausedNames(TypedDict):
    groups: list[str]
    tenants: list[str]


class Status(TypedDict):
    """What ``recruiter status`` shows (and prints with ``--json``)."""

    scheduled: dict[object, int]
    archived: dict[object, int]
    workers: WorkerCounts
    leases: dict[object, LeaseFigures]
    paused: PausedNames


def collect_status(target: Target) -> Status:
    client = sync_client(target, app_name="recruiter-status", server_selection_timeout_s=5.0)
    try:
        c = SyncCollections.of(client[target.database])
        scheduled = count_by_status(c.scheduled)
        archived = count_by_why(c.archived)
        entries = entries_summary(c.roster)
        # A worker slot is counted once, whatever its look-ahead lanes (recruiter.domain.lanes).
        workers = [e for e in entries if lane_of(e) == 0]
        taking = {runner_of(e) for e in entries if e.get("available")}
        beats = heartbeats_by_worker(c.heartbeats, {"session": 1, "fresh_until": 1})
        clock = ServerClock()
        clock.calibrate_sync(client)
        live = sum(1 for w in workers if is_fresh(beats.get(w["_id"]), w, clock.now()))
        leases = {d["_id"]: LeaseFigures(owner=d.get("owner"), epoch=d.get("epoch"),
                                         held=bool(d.get("expires_at") and d["expires_at"] > clock.now()),
                                         expires_at=d["expires_at"].isoformat() if d.get("expires_at") else None)
                  for d in read_leases(c.metadata)}
        paused = read_paused(c.metadata)
    finally:
        client.close()
    return {
        "scheduled": dict(sorted(scheduled.items(), key=lambda kv: str(kv[0]))),
        "archived": dict(sorted(archived.items(), key=lambda kv: str(kv[0]))),
        "workers": {
            "total": len(workers),
            "available": sum(1 for w in workers if runner_of(w) in taking),
            "missed_heartbeats": len(workers) - live,
            "by_group": _by_group(workers),
        },
        "leases": leases,
        "paused": {"groups": sorted(paused.groups), "tenants": sorted(paused.tenants)},
    }


def _by_group(workers: list[Document]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for w in workers:
        for g in w.get("work_on") or []:
            counts[g] = counts.get(g, 0) + 1
    return dict(sorted(counts.items()))


def render_status(figures: Status, as_json: bool) -> str:
    if as_json:
        return json.dumps(figures, indent=2, default=str)
    lines = ["scheduled: " + (", ".join(f"{k}={v}" for k, v in figures["scheduled"].items()) or "none"),
             "archived:  " + (", ".join(f"{k}={v}" for k, v in figures["archived"].items()) or "none"),
             f"workers:   {figures['workers']['total']} ({figures['workers']['available']} available, "
             f"{figures['workers']['missed_heartbeats']} missed heartbeats)"
             + "".join(f", {g}={n}" for g, n in figures["workers"]["by_group"].items())]
    for name, lease in figures["leases"].items():
        if lease["held"]:
            lines.append(f"{name} lease: epoch {lease['epoch']} held by {lease['owner']} until {lease['expires_at']}")
        else:
            lines.append(f"{name} lease: free (epoch {lease['epoch']}, last held by {lease['owner']})")
    paused = figures["paused"]
    lines.append("paused:    " + (", ".join([*(f"group {g}" for g in paused["groups"]),
                                              *(f"tenant {t}" for t in paused["tenants"])]) or "none"))
    return "\n".join(lines)
