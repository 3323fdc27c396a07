"""Declaring periodic jobs from code: ``rec.schedule(name, cron=... | every=..., job=...)``.

An upsert by name (:mod:`recruiter.domain.schedules`): a new schedule is
inserted with its first slot after now; a changed definition (another
``version``) replaces the stored one and its next slot is computed again from
now, keeping ``last_fire``, ``skipped`` and ``paused``; an unchanged one only
has its ``declared_at`` refreshed (schedules no longer declared show as stale).

Invariant: everything is checked before the first write (the definition, and the
job built by the same builder as ``enqueue``): a bad one raises
:class:`~recruiter.domain.schedules.ScheduleRefused` with one line and nothing
is stored. Writes are conditional on the version read, so two producers
declaring at once both end with the same stored definition (the last one's).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from recruiter.domain.builder import JobBuilder, as_builder
from recruiter.domain.job import JobRefused
from recruiter.domain.schedules import Definition, ScheduleRefused, define, fire_at, job_template, next_slot
from recruiter.domain.workable import Workable
from recruiter.store.layout import SCHEDULES, Document
from recruiter.store.schedules import (
    ANY_VERSION,
    insert_schedule,
    insert_schedule_async,
    new_document,
    read_schedule,
    read_schedule_async,
    redefinition,
    update_schedule,
    update_schedule_async,
)

if TYPE_CHECKING:
    from recruiter.producer.client import AsyncRecruiter, Recruiter

ATTEMPTS = 5


@dataclass(frozen=True)
class ScheduleView:
    """What ``rec.schedule`` did: ``created``, ``updated`` or ``unchanged``, and the stored timing."""

    name: str
    change: str
    version: str
    next_fire_at: datetime | None
    paused: bool


@dataclass(frozen=True)
class Options:
    cron: str | None
    every: timedelta | str | float | None
    tz: str
    overlap: str
    catch_up: str | timedelta
    jitter: timedelta | str | float | None


def _definition(name: str, job: JobBuilder[Any] | Workable, rec: Recruiter | AsyncRecruiter, o: Options,
                max_bytes: int) -> Definition:
    try:
        built = as_builder(job, rec).build(rec.clock.now(), max_bytes)
    except JobRefused as exc:
        raise ScheduleRefused(f"schedule {name!r:.60}: {exc}; nothing was stored") from None
    try:
        return define(name, cron=o.cron, every=o.every, tz=o.tz, job=job_template(built), overlap=o.overlap,
                      catch_up=o.catch_up, jitter=o.jitter)
    except ScheduleRefused as exc:
        raise ScheduleRefused(f"schedule {name!r:.60}: {exc}; nothing was stored") from None


def _decide(defn: Definition, stored: Document | None, now: datetime) -> tuple[str, Any]:
    """What to write: ``("insert", doc)``, ``("update", update)`` or ``("touch", update)``."""
    fields = defn.fields()
    slot = next_slot(defn, now)
    if stored is None:
        return "insert", new_document(defn.name, fields, now, slot, fire_at(defn, slot))
    if stored.get("version") == fields["version"]:
        return "touch", {"$set": {"declared_at": now}}
    return "update", redefinition(fields, now, slot, fire_at(defn, slot), stored.get("paused") is True)


def _view(defn: Definition, change: str, stored: Document | None, written: Any) -> ScheduleView:
    doc = written if change == "created" else {**(stored or {}), **written.get("$set", {})}
    at = doc.get("next_fire_at")
    return ScheduleView(defn.name, change, defn.fields()["version"], at if isinstance(at, datetime) else None,
                        doc.get("paused") is True)


_CHANGE = {"insert": "created", "update": "updated", "touch": "unchanged"}


def schedule(rec: Recruiter, name: str, job: JobBuilder[Any] | Workable, o: Options) -> ScheduleView:
    defn = _definition(name, job, rec, o, rec.max_document_bytes())
    coll = rec.db[SCHEDULES]
    for attempt in range(ATTEMPTS + 2):
        stored = read_schedule(coll, defn.name)
        kind, write = _decide(defn, stored, rec.clock.now())
        # Declared at the same moment by another producer: read it again. The last attempt
        # writes whatever it read (the last declaration wins), so concurrent ones converge.
        version = _condition(stored, attempt)
        if kind == "insert":
            if not insert_schedule(coll, write):
                continue
        elif not update_schedule(coll, defn.name, version, write):
            continue
        return _view(defn, _CHANGE[kind], stored, write)
    raise RuntimeError(f"schedule {name!r:.60} was removed and declared again while declared; try again")


def _condition(stored: Document | None, attempt: int) -> object:
    """The ``version`` an update is conditional on: the one read, or none on the last attempt."""
    if attempt >= ATTEMPTS:
        return ANY_VERSION
    return stored.get("version") if stored else None


async def schedule_async(rec: AsyncRecruiter, name: str, job: JobBuilder[Any] | Workable, o: Options) -> ScheduleView:
    defn = _definition(name, job, rec, o, await rec.max_document_bytes())
    coll = rec.db[SCHEDULES]
    for attempt in range(ATTEMPTS + 2):
        stored = await read_schedule_async(coll, defn.name)
        kind, write = _decide(defn, stored, rec.clock.now())
        if kind == "insert":
            if not await insert_schedule_async(coll, write):
                continue
        elif not await update_schedule_async(coll, defn.name, _condition(stored, attempt), write):
            continue
        return _view(defn, _CHANGE[kind], stored, write)
    raise RuntimeError(f"schedule {name!r:.60} was removed and declared again while declared; try again")
