"""How ``recruiter status`` prints the read model's snapshot (:mod:`recruiter.admin.status`).

Invariant: rendering reads nothing.
"""

from __future__ import annotations

import json
from typing import TypedDict

from recruiter.admin import status as admin_status


class WorkerCounts(TypedDict):
    total: int
    available: int
    missed_heartbeats: int
    by_group: dict[str, int]
    malformed: int


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


def figures_of(status: admin_status.Status) -> Status:
    """The read model's snapshot (:func:`recruiter.admin.status.status`) as ``status --json`` prints it."""
    w = status.workers
    return {
        "scheduled": dict(status.scheduled),
        "archived": dict(status.archived),
        "workers": {"total": w.total, "available": w.available, "missed_heartbeats": w.missed_heartbeats,
                    "by_group": dict(w.by_group), "malformed": w.malformed},
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


def _malformed(n: int) -> str:
    return f"; {n} malformed roster entr{'y' if n == 1 else 'ies'}, given no work (see workers list)" if n else ""
