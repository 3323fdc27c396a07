"""The roster, one value per worker slot (``recruiter workers list``), and asking workers to stop.

Invariant: a worker's state and liveness are judged from its own heartbeat (its slot in
its process's heartbeat document, same session), as the recruiter judges them; an entry without one shows its own
``last_seen_at`` (an older version's entry). A working slot shows the progress its
job last reported (carried by the same heartbeat). A malformed entry (:mod:`recruiter.admin.roster`)
is one value too, in state ``malformed`` with its reason, after the others: it is in the roster,
but the recruiter gives it no work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from recruiter.admin.roster import MalformedEntry, checked_entries
from recruiter.domain import versions
from recruiter.domain.following import progress_of
from recruiter.domain.lanes import slot_of
from recruiter.domain.liveness import is_fresh
from recruiter.domain.versions import Release
from recruiter.store import Document, SyncCollections, SyncDb, entries_by_id, heartbeats_by_worker, request_stop

MALFORMED = "malformed"  # the state of a roster entry set aside (recruiter.admin.roster)


@dataclass(frozen=True)
class ProgressView:
    """What the running job last said of its progress (``ctx.progress``)."""

    value: float | None
    message: str | None
    at: datetime | None
    text: str


@dataclass(frozen=True)
class WorkerView:
    """One roster entry: ``state`` is idle, assigned, held (a job handed out ahead), working, stopping, or
    malformed (``problem`` says why; its ``id`` is its ``_id`` as text, which may not be a string)."""

    id: str
    groups: tuple[str, ...]
    state: str
    job: str
    pid: object
    hostname: object
    last_seen_s: float | None
    live: bool
    progress: ProgressView | None
    problem: str | None = None
    release: Release = versions.UNKNOWN  # as its entry records it (recruiter.domain.versions)


def workers(db: SyncDb, now: datetime) -> list[WorkerView]:
    """One value per roster entry, by id, with its heartbeat (``heartbeats``, see :mod:`recruiter.domain.liveness`)."""
    c = SyncCollections.of(db)
    views = []
    entries, malformed = checked_entries(entries_by_id(c.roster))
    # One beat per entry, from its process's heartbeat document (the one naming its session).
    beats = heartbeats_by_worker(c.heartbeats, entries={w["_id"]: w for w in entries})
    for w in entries:
        beat = beats.get(w["_id"])
        if beat is None or beat.get("session") != w.get("session"):
            beat = {"last_seen_at": w.get("last_seen_at")}  # none of its own (an older version's entry)
        seen = beat.get("last_seen_at")
        views.append(WorkerView(
            id=w["_id"], groups=tuple(w.get("work_on") or ()), state=_state(w, beat),
            job=str(beat.get("working_on") or (w.get("assigned_to") or {}).get(w["_id"]) or ""),
            pid=w.get("pid"), hostname=w.get("hostname"),
            last_seen_s=round((now - seen).total_seconds(), 1) if isinstance(seen, datetime) else None,
            live=is_fresh(beat, w, now), progress=_progress(beat), release=versions.recorded(w),
        ))
    return views + [_malformed(m) for m in malformed]


def stop_workers(db: SyncDb, ids: Sequence[str] | None) -> list[str]:
    """Ask workers (``None``: all) to stop gracefully; returns the slots asked, each named once, sorted.

    An id also names its ``--concurrency`` slots (``ID-0``, ``ID-1``...).
    """
    asked = request_stop(SyncCollections.of(db).roster, None if ids is None else list(ids))
    # Each roster entry is asked; a slot's look-ahead lanes are named once, as the slot.
    return sorted({slot_of(i) for i in asked})


def _malformed(entry: MalformedEntry) -> WorkerView:
    return WorkerView(id=entry.id, groups=(), state=MALFORMED, job="", pid=None, hostname=None, last_seen_s=None,
                      live=False, progress=None, problem=entry.problem)


def _progress(beat: Document) -> ProgressView | None:
    """The progress of the job the heartbeat says it runs (its own ``working_on`` and token)."""
    if not beat.get("working"):
        return None
    running = {"_id": beat.get("working_on"), "locked": True, "lock_token": beat.get("working_token")}
    p = progress_of(beat, running)
    if p is None:
        return None
    return ProgressView(value=p.value, message=p.message, at=p.at, text=p.describe())


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
