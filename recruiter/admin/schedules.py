"""Periodic schedules for operators: list, show, pause, resume, run now, remove.

Invariant: a malformed schedule document is a value with its reason
(:mod:`recruiter.domain.schedule_view`), never an error; every write names one
schedule and is conditional on the state it changes from
(:mod:`recruiter.store.schedule_admin`), and says what it did as a :class:`Change`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from recruiter.domain.following import JobView
from recruiter.domain.schedule_view import StoredSchedule, last_jobs, read_schedule, stale_names
from recruiter.store import (
    Change,
    SyncDb,
    read_last_jobs,
    read_schedules,
    request_run_now,
)
from recruiter.store import pause_schedule as _pause
from recruiter.store import read_schedule as read_schedule_document
from recruiter.store import remove_schedule as _remove
from recruiter.store import resume_schedule as _resume


@dataclass(frozen=True)
class ScheduleListing:
    """Schedules, the jobs their last fires enqueued (by id), and the names no longer declared (stale)."""

    schedules: tuple[StoredSchedule, ...]
    jobs: Mapping[object, JobView]
    stale: frozenset[str]


@dataclass(frozen=True)
class ScheduleDetail:
    schedule: StoredSchedule
    jobs: Mapping[object, JobView]
    stale: bool


def schedules(db: SyncDb, now: datetime, stale_after: timedelta, *, only_stale: bool = False) -> ScheduleListing:
    """Every schedule (``only_stale``: those declared longer than ``stale_after`` before the newest declaration)."""
    views = [read_schedule(d) for d in read_schedules(db)]
    old = stale_names(views, stale_after)
    if only_stale:
        views = [v for v in views if v.name in old]
    return ScheduleListing(tuple(views), read_last_jobs(db, last_jobs(views), now), frozenset(old))


def schedule(db: SyncDb, name: str, now: datetime, stale_after: timedelta) -> ScheduleDetail | None:
    """One schedule whole (None: no schedule of that name)."""
    doc = read_schedule_document(db, name)
    if doc is None:
        return None
    view = read_schedule(doc)
    stale = name in stale_names([read_schedule(d) for d in read_schedules(db)], stale_after)
    return ScheduleDetail(view, read_last_jobs(db, last_jobs([view]), now), stale)


def pause_schedule(db: SyncDb, name: str) -> Change:
    """No slot of it fires until it is resumed (ALREADY: it was paused; UNKNOWN: no such schedule)."""
    return _pause(db, name)


def resume_schedule(db: SyncDb, name: str) -> Change:
    """The recruiter computes its next fire from now (the slots passed while paused are not caught up)."""
    return _resume(db, name)


def run_now(db: SyncDb, name: str, now: datetime) -> Change:
    """One extra occurrence at the recruiter's next round, even of a paused schedule; a pending one is not doubled."""
    return request_run_now(db, name, now)


def remove_schedule(db: SyncDb, name: str) -> Change:
    """Delete the schedule (its jobs already enqueued stay; the code declaring it would declare it again)."""
    return _remove(db, name)
