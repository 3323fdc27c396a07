"""Reading the roster for the command line: ``recruiter workers list``.

Invariant: a worker's state and liveness are judged from its own heartbeat (same
session), as the recruiter judges them; an entry without one shows its own
``last_seen_at`` (an older version's entry). A working slot shows the progress its
job last reported (carried by the same heartbeat). ``workers stop`` writes through
:func:`recruiter.store.request_stop`.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict

from recruiter.domain.following import progress_of
from recruiter.domain.liveness import is_fresh
from recruiter.store import Document, SyncCollections, SyncDb, entries_by_id, heartbeats_by_worker


class WorkerRow(TypedDict):
    """One line of ``recruiter workers list`` (and one object of its ``--json``)."""

    id: str
    groups: list[str]
    state: str
    job: str
    pid: object
    hostname: object
    last_seen_s: float | None
    live: bool
    progress: ProgressRow | None


class ProgressRow(TypedDict):
    """What the running job last said of its progress (``ctx.progress``)."""

    value: float | None
    message: str | None
    at: str | None
    text: str


def describe_workers(db: SyncDb, now: datetime) -> list[WorkerRow]:
    """One row per roster entry, with its heartbeat (``heartbeats``, see :mod:`recruiter.domain.liveness`)."""
    c = SyncCollections.of(db)
    rows = []
    beats = heartbeats_by_worker(c.heartbeats)
    for w in entries_by_id(c.roster):
        beat = beats.get(w["_id"])
        if beat is None or beat.get("session") != w.get("session"):
            beat = {"last_seen_at": w.get("last_seen_at")}  # none of its own (an older version's entry)
        seen = beat.get("last_seen_at")
        rows.append(WorkerRow(
            id=w["_id"], groups=list(w.get("work_on") or []), state=_state(w, beat),
            job=str(beat.get("working_on") or (w.get("assigned_to") or {}).get(w["_id"]) or ""),
            pid=w.get("pid"), hostname=w.get("hostname"),
            last_seen_s=round((now - seen).total_seconds(), 1) if isinstance(seen, datetime) else None,
            live=is_fresh(beat, w, now), progress=_progress(beat),
        ))
    return rows


def _progress(beat: Document) -> ProgressRow | None:
    """The progress of the job the heartbeat says it runs (its own ``working_on`` and token)."""
    if not beat.get("working"):
        return None
    running = {"_id": beat.get("working_on"), "locked": True, "lock_token": beat.get("working_token")}
    p = progress_of(beat, running)
    if p is None:
        return None
    return ProgressRow(value=p.value, message=p.message, at=p.at.isoformat() if p.at else None, text=p.describe())


def _state(entry: Document, beat: Document) -> str:
    if entry.get("stop_requested") or entry.get("stopping"):
        return "stopping"
    if beat.get("working"):
        return "working"
    if not entry.get("available"):
        ahead = entry.get("ahead")
        # A job handed out ahead that its slot has not started yet (recruiter.domain.lanes).
        return "held" if ahead and entry.get("started") != ahead else "assigned"
    return "idle"


def render_workers(rows: list[WorkerRow]) -> str:
    if not rows:
        return "no workers in the roster"
    header = ("id", "groups", "state", "job", "progress", "pid", "host", "last seen")
    table = [header] + [
        (r["id"], ",".join(r["groups"]), r["state"], r["job"], r["progress"]["text"] if r["progress"] else "",
         str(r["pid"]), str(r["hostname"]),
         (f"{r['last_seen_s']}s ago" if r["last_seen_s"] is not None else "never")
         + ("" if r["live"] else " (missed heartbeats: given no work)"))
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table)
