"""How ``recruiter status`` prints the read model's snapshot (:mod:`recruiter.admin.status`).

Invariant: rendering reads nothing.
"""

from __future__ import annotations

import json
from typing import TypedDict

from recruiter.admin import status as admin_status
from recruiter.domain.placement import is_worker_group


class WorkerCounts(TypedDict):
    total: int
    available: int
    missed_heartbeats: int
    by_group: dict[str, int]
    malformed: int
    worker_groups: int  # @worker:ID groups taken (one per worker process), left out of by_group unless asked


class LeaseFigures(TypedDict):
    owner: object
    epoch: object
    held: bool
    expires_at: str | None


class Releases(TypedDict):
    live: dict[str, list[str]]
    warnings: list[str]


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
    releases: Releases


def figures_of(status: admin_status.Status, worker_groups: bool = False) -> Status:
    """The read model's snapshot (:func:`recruiter.admin.status.status`) as ``status --json`` prints it; the
    ``@worker:ID`` groups in ``by_group`` only if ``worker_groups`` (else counted in ``worker_groups``)."""
    w = status.workers
    aimed = [g for g in w.by_group if is_worker_group(g)]
    return {
        "scheduled": dict(status.scheduled),
        "archived": dict(status.archived),
        "workers": {"total": w.total, "available": w.available, "missed_heartbeats": w.missed_heartbeats,
                    "by_group": {g: n for g, n in w.by_group.items() if worker_groups or not is_worker_group(g)},
                    "malformed": w.malformed, "worker_groups": len(aimed)},
        "leases": {name: LeaseFigures(owner=lease.owner, epoch=lease.epoch, held=lease.held,
                                      expires_at=lease.expires_at.isoformat() if lease.expires_at else None)
                   for name, lease in status.leases.items()},
        "paused": {"groups": list(status.paused.groups), "tenants": list(status.paused.tenants)},
        "releases": {"live": {r: list(who) for r, who in status.releases.live.items()},
                     "warnings": list(status.releases.warnings)},
    }


def render_status(figures: Status, as_json: bool) -> str:
    if as_json:
        return json.dumps(figures, indent=2, default=str)
    lines = ["scheduled: " + (", ".join(f"{k}={v}" for k, v in figures["scheduled"].items()) or "none"),
             "archived:  " + (", ".join(f"{k}={v}" for k, v in figures["archived"].items()) or "none"),
             f"workers:   {figures['workers']['total']} ({figures['workers']['available']} available, "
             f"{figures['workers']['missed_heartbeats']} missed heartbeats)"
             + "".join(f", {g}={n}" for g, n in figures["workers"]["by_group"].items())
             + _aimed(figures["workers"])
             + _malformed(figures["workers"]["malformed"])]
    for name, lease in figures["leases"].items():
        if lease["held"]:
            lines.append(f"{name} lease: epoch {lease['epoch']} held by {lease['owner']} until {lease['expires_at']}")
        else:
            lines.append(f"{name} lease: free (epoch {lease['epoch']}, last held by {lease['owner']})")
    paused = figures["paused"]
    lines.append("paused:    " + (", ".join([*(f"group {g}" for g in paused["groups"]),
                                              *(f"tenant {t}" for t in paused["tenants"])]) or "none"))
    releases = figures["releases"]
    lines.append("releases:  " + ("; ".join(f"{r} ({', '.join(who)})" for r, who in releases["live"].items())
                                  or "no live process"))
    lines += [f"warning:   {w}" for w in releases["warnings"]]
    return "\n".join(lines)


def _aimed(w: WorkerCounts) -> str:
    """The @worker: groups, counted when they are not listed (``--include-worker-groups``)."""
    listed = sum(1 for g in w["by_group"] if is_worker_group(g))
    n = w["worker_groups"]
    return f", {n} @worker: group{'' if n == 1 else 's'}" if n and not listed else ""


def _malformed(n: int) -> str:
    return f"; {n} malformed roster entr{'y' if n == 1 else 'ies'}, given no work (see workers list)" if n else ""
