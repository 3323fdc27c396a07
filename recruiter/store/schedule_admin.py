"""The operator's reads and writes of ``schedules`` (``recruiter schedules ...``).

Reads: every schedule, sorted by name (``_id``: schedules are few, and stale
ones are judged against the newest ``declared_at`` of all of them), and the last
fired jobs of a page in one ``find`` by ``_id`` on each of ``archived`` and
``scheduled`` (plus one on ``heartbeats`` when some are locked, to tell running
from assigned).

Invariant: every write names one schedule by ``_id`` and is conditional on the
state it changes from, so a command repeated, or racing the recruiter, changes
nothing twice; each returns what it did (:class:`Change`) for the one line the
command prints. Only :func:`remove_schedule` deletes a schedule.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import Enum

from recruiter.domain.following import JobView, view_of
from recruiter.store.heartbeats import beats_of
from recruiter.store.layout import SCHEDULES, Document, SyncDb


class Change(Enum):
    DONE = "done"
    ALREADY = "already"  # the schedule was already in the state asked for
    UNKNOWN = "unknown"  # no schedule has that name


def read_schedules(db: SyncDb) -> list[Document]:
    """Every schedule document, by name."""
    return list(db[SCHEDULES].find({}).sort("_id", 1))


def read_schedule(db: SyncDb, name: str) -> Document | None:
    return db[SCHEDULES].find_one({"_id": {"$eq": name}})


def read_last_jobs(db: SyncDb, job_ids: Sequence[object], now: datetime) -> dict[object, JobView]:
    """The views of the jobs ``job_ids`` that still exist (archived, or waiting), by id."""
    if not job_ids:
        return {}
    ids = list(job_ids)
    archived = {d["_id"]: d for d in db.archived.find({"_id": {"$in": ids}})}
    missing = [i for i in ids if i not in archived]
    waiting = {d["_id"]: d for d in db.scheduled.find({"_id": {"$in": missing}})} if missing else {}
    holders = [d["locked_by"] for d in waiting.values() if d.get("locked") is True and isinstance(
        d.get("locked_by"), str)]
    beats = beats_of(db.heartbeats, holders)
    views: dict[object, JobView] = {}
    for job_id in ids:
        doc = waiting.get(job_id)
        holder = doc.get("locked_by") if doc is not None else None
        view = view_of(job_id, doc, archived.get(job_id), beats.get(holder) if isinstance(holder, str) else None,
                       now)
        if view is not None:
            views[job_id] = view
    return views


def _change(db: SyncDb, name: str, matched: int) -> Change:
    if matched:
        return Change.DONE
    return Change.ALREADY if read_schedule(db, name) is not None else Change.UNKNOWN


def pause_schedule(db: SyncDb, name: str) -> Change:
    """``paused: true`` and no next fire: the recruiter fires nothing of it (but a ``run_now``)."""
    r = db[SCHEDULES].update_one({"_id": {"$eq": name}, "paused": {"$ne": True}},
                                 {"$set": {"paused": True, "next_fire_at": None}})
    return _change(db, name, r.matched_count)


def resume_schedule(db: SyncDb, name: str) -> Change:
    """``paused: false``, ``next_fire_at`` still null: the recruiter reads a schedule not paused
    without a next fire time as one to compute, and computes its next slot from now (the slots
    that passed while it was paused are not caught up)."""
    r = db[SCHEDULES].update_one({"_id": {"$eq": name}, "paused": True},
                                 {"$set": {"paused": False, "next_fire_at": None}})
    return _change(db, name, r.matched_count)


def request_run_now(db: SyncDb, name: str, now: datetime) -> Change:
    """``run_now: now``, unless a run-now is already pending (a date there): the recruiter fires
    one extra occurrence at its next round and clears it."""
    r = db[SCHEDULES].update_one({"_id": {"$eq": name}, "run_now": {"$not": {"$type": "date"}}},
                                 {"$set": {"run_now": now}})
    return _change(db, name, r.matched_count)


def remove_schedule(db: SyncDb, name: str) -> Change:
    """Delete the schedule (its occurrences already enqueued stay, and run)."""
    r = db[SCHEDULES].delete_one({"_id": {"$eq": name}})
    return Change.DONE if r.deleted_count else Change.UNKNOWN
