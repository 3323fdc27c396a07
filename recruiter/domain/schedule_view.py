"""A schedule as ``recruiter schedules list|show`` present it, read from its stored document.

The ``schedules`` document (one per schedule, ``_id`` = its name) is written by
``rec.schedule`` and by the recruiter's firing, and edited by the CLI; mongosh or
an older version may have written anything. :func:`read_schedule` checks it
field by field: a document that does not follow the shape is a
:class:`StoredSchedule` with ``problem`` set (one line: the first field that is
wrong, and how), and whatever could be read still shown.

Stale: a schedule whose ``declared_at`` is older than the newest ``declared_at``
of all schedules by more than a margin (:func:`stale_names`): the code that
declares the others at its start no longer declares it. It is listed, never
deleted (only ``recruiter schedules remove`` deletes).

Invariant: pure and total: no document makes anything here raise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from bson import ObjectId

from recruiter.domain import checks
from recruiter.domain.documents import check_job
from recruiter.domain.durations import format_duration
from recruiter.domain.following import JobView
from recruiter.domain.records import Raw
from recruiter.domain.schedules import EPOCH, definition_of, occurrence

_LAST_FIRE = checks.fields({"slot": (True, checks.date), "job": (True, checks.job_id), "at": (True, checks.date)})
_LAST_SKIP = checks.fields({"slot": (True, checks.date), "reason": (True, checks.text),
                            "at": (False, checks.optional(checks.date))})
_CATCH_UP = checks.fields({"mode": (True, checks.one_of("none", "all", "within")),
                           "limit": (False, checks.optional(checks.count)),
                           "within_s": (False, checks.optional(checks.positive_seconds))})


def _non_negative(value: object) -> checks.Problem:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0 or value == float("inf"):
        return checks.expected("a number of seconds from 0", value)
    return None


# The fields and their checks (required, check); cron and every_s are checked together after.
SPEC: checks.Spec = {
    "_id": (True, checks.name),
    "cron": (False, checks.optional(checks.text)),
    "every_s": (False, checks.optional(checks.positive_seconds)),
    "tz": (True, checks.name),
    "job": (True, checks.document),
    "overlap": (False, checks.one_of("skip", "allow")),
    "catch_up": (False, _CATCH_UP),
    "jitter_s": (False, _non_negative),
    "paused": (False, checks.boolean),
    "version": (False, checks.optional(checks.text)),
    "created_at": (False, checks.optional(checks.date)),
    "updated_at": (False, checks.optional(checks.date)),
    "declared_at": (True, checks.date),
    "next_fire_at": (False, checks.optional(checks.date)),
    "next_slot": (False, checks.optional(checks.date)),
    "last_fire": (False, checks.optional(_LAST_FIRE)),
    "skipped": (False, checks.count),
    "last_skip": (False, checks.optional(_LAST_SKIP)),
    "run_now": (False, checks.optional(checks.date)),
}


def schedule_problem(doc: Raw) -> checks.Problem:
    """What is wrong with a ``schedules`` document, in one line; None if the leader can fire it.

    Every field's type and range (:data:`SPEC`), then the definition as the leader reads it
    (:func:`recruiter.domain.schedules.definition_of`: a valid cron and time zone, intervals,
    jitter and catch-up within their bounds). The leader fires only documents this passes,
    and ``schedules list`` shows this same reason for the others.
    """
    problem = checks.fields_problem(doc, SPEC)
    if problem:
        return problem
    if (doc.get("cron") is None) == (doc.get("every_s") is None):
        return "cron, every_s: expected exactly one of them"
    defn = definition_of(doc)
    if isinstance(defn, str):
        return defn
    # The job each occurrence would be: checked as the reader checks a job in ``scheduled``.
    bad = check_job(occurrence(defn.job, defn.name, EPOCH, "check", ObjectId(), EPOCH))
    return f"job: {bad.reason}" if bad is not None else None


@dataclass(frozen=True)
class LastFire:
    slot: datetime
    job: object
    at: datetime


@dataclass(frozen=True)
class LastSkip:
    slot: datetime
    reason: str
    at: datetime | None


@dataclass(frozen=True)
class StoredSchedule:
    """One schedule; when ``problem`` is set the document is malformed and only ``name`` is sure."""

    name: str
    problem: str | None = None
    cron: str | None = None
    every_s: float | None = None
    tz: str | None = None
    paused: bool = False
    overlap: str = "skip"
    catch_up: Raw = field(default_factory=lambda: {"mode": "none"})
    jitter_s: float = 0.0
    version: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    declared_at: datetime | None = None
    next_fire_at: datetime | None = None
    next_slot: datetime | None = None
    last_fire: LastFire | None = None
    skipped: int = 0
    last_skip: LastSkip | None = None
    run_now: datetime | None = None
    job: Raw = field(default_factory=dict)
    document: Raw = field(default_factory=dict, repr=False)

    @property
    def malformed(self) -> bool:
        return self.problem is not None

    def rule(self) -> str:
        """``cron 0 3 * * * Europe/Rome`` or ``every 15m UTC``."""
        if self.cron is not None:
            return f"cron {self.cron} {self.tz}"
        if self.every_s is None:
            return "-"
        try:
            every = format_duration(timedelta(seconds=self.every_s))
        except OverflowError:  # checked positive and finite, but beyond what a timedelta holds
            every = f"{self.every_s:g}s"
        return f"every {every} {self.tz}"


def name_of(doc: Raw) -> str:
    """The schedule's name as text, whatever its ``_id`` holds."""
    value = doc.get("_id")
    return value if isinstance(value, str) else repr(value)


def read_schedule(doc: Raw) -> StoredSchedule:
    """The view of a stored ``schedules`` document (malformed: ``problem`` says why)."""
    try:
        problem = schedule_problem(doc)
    except Exception as exc:  # noqa: BLE001 - a document must never make the listing raise
        problem = f"cannot be checked ({type(exc).__name__})"
    if problem is not None:
        return StoredSchedule(name=name_of(doc), problem=problem, document=doc)
    return _checked_view(cast(Mapping[str, Any], doc))


def _checked_view(doc: Mapping[str, Any]) -> StoredSchedule:
    """The view of a document :func:`schedule_problem` found well-formed."""
    last_fire, last_skip = doc.get("last_fire"), doc.get("last_skip")
    every = doc.get("every_s")
    return StoredSchedule(
        name=doc["_id"], cron=doc.get("cron"), every_s=float(every) if every is not None else None, tz=doc["tz"],
        paused=doc.get("paused", False), overlap=doc.get("overlap", "skip"),
        catch_up=doc.get("catch_up") or {"mode": "none"}, jitter_s=float(doc.get("jitter_s", 0.0)),
        version=doc.get("version"), created_at=doc.get("created_at"), updated_at=doc.get("updated_at"),
        declared_at=doc["declared_at"], next_fire_at=doc.get("next_fire_at"), next_slot=doc.get("next_slot"),
        last_fire=LastFire(last_fire["slot"], last_fire["job"], last_fire["at"]) if last_fire else None,
        skipped=int(doc.get("skipped", 0)),
        last_skip=LastSkip(last_skip["slot"], last_skip["reason"], last_skip.get("at")) if last_skip else None,
        run_now=doc.get("run_now"), job=doc["job"], document=doc,
    )


def stale_names(views: Iterable[StoredSchedule], after: timedelta) -> set[str]:
    """The schedules declared more than ``after`` before the newest declaration of any of them.

    A malformed document has no ``declared_at`` that can be trusted: it is never stale
    (it is listed as malformed instead), and it does not move the newest declaration.
    """
    declared = {v.name: v.declared_at for v in views if v.declared_at is not None}
    if not declared:
        return set()
    newest = max(declared.values())
    return {name for name, at in declared.items() if newest - at > after}


def outcome_of(view: StoredSchedule, jobs: Mapping[object, JobView]) -> str:
    """The last fire's outcome: the archived ``why``, or the state of a job still waiting or running."""
    if view.last_fire is None:
        return "-"
    job = jobs.get(view.last_fire.job)
    if job is None:
        return "gone"  # neither waiting nor archived: the cleaner's retention removed it
    return job.why or "?" if job.state == "archived" else job.state


def last_jobs(views: Iterable[StoredSchedule]) -> list[object]:
    """The ids of the last fired job of each schedule (for one batched read)."""
    return list(dict.fromkeys(v.last_fire.job for v in views if v.last_fire is not None))
