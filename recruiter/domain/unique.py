"""Unique jobs: one job per key, for as long as the key's scope says (pure part).

A job enqueued with ``.unique(key)`` (or whose class gives a key, see
:meth:`recruiter.Workable.unique_key`) carries ``unique: {key, scope[, until]}``.
The field stays with the job into ``archived``, so the history and ``recruiter
jobs show`` tell which key a job held. Scopes:

- ``unfinished`` (the default): no two jobs with one key wait or run at the
  same time. A partial unique index on ``scheduled`` (``unique.key``, for
  documents whose key is a string) enforces it: of two producers racing on a
  key, the server lets one insert and refuses the other (E11000), which is then
  told of the existing job. Archiving deletes the job from ``scheduled``, which
  frees the key. One write, as an enqueue without a key.
- a period (a ``timedelta``): as ``unfinished``, and also no second job while
  the period since the key's job was enqueued runs, even once that job has
  finished;
- ``forever``: as ``unfinished``, and never a second job with this key.

A period or ``forever`` must also see finished jobs, which live in another
collection; checking ``archived`` before the insert would race with a producer
doing the same. So these scopes reserve the key in ``unique_keys``, one
document per key, ``_id`` the key (unique by nature): ``{_id, job, until}``
(``until`` absent: forever). The reservation and the job are written in ONE
transaction: either both exist or neither does, so a reservation never names a
job that was never written, and two producers racing on a key conflict on the
reservation's ``_id`` (a duplicate key, or a write conflict that the driver
runs again and that then sees the reservation). An expired reservation is taken
over by an update conditional on ``until < now``, so the take-over races the
same way. The scheduled index is still there behind it: a job still unfinished
when its period is over keeps its key until it ends.

On a conflict the producer gets the existing job's handle (``handle.existed``
is true) and nothing is written; with ``on_conflict="resubmit"`` it asks for the
CouchDB/mscheduler semantics instead: a pending job is rescheduled to the new
job's time, a running one is resubmitted (:mod:`recruiter.domain.resubmit`) and
a finished one (period or forever scope) is enqueued again as a new job, which
takes over the reservation.

Invariant: pure; a key is refused (:class:`~recruiter.domain.job.JobRefused`)
unless it is a non-empty string of at most ``MAX_KEY_CHARS`` characters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from bson import ObjectId

from recruiter.domain.durations import MAX_DURATION
from recruiter.domain.records import Query, UniqueDoc


class UniqueRefused(ValueError):
    """A unique key or option that cannot be used; one line. (A :class:`JobRefused` at enqueue.)"""


MAX_KEY_CHARS = 512


class Scope(StrEnum):
    UNFINISHED = "unfinished"
    PERIOD = "period"
    FOREVER = "forever"


class OnConflict(StrEnum):
    EXISTING = "existing"  # return the existing job's handle, write nothing
    RESUBMIT = "resubmit"  # reschedule a pending job, resubmit a running one, enqueue a finished one again


@dataclass(frozen=True)
class Unique:
    """A job's unique key and what it covers."""

    key: str
    scope: Scope = Scope.UNFINISHED
    period_s: float | None = None  # scope PERIOD only
    on_conflict: OnConflict = OnConflict.EXISTING

    @property
    def reserves(self) -> bool:
        """Whether the key is also reserved in ``unique_keys`` (a period or forever)."""
        return self.scope is not Scope.UNFINISHED

    def field(self, enqueued_at: datetime) -> UniqueDoc:
        """The job's ``unique`` field."""
        doc: UniqueDoc = {"key": self.key, "scope": self.scope.value}
        if self.period_s is not None:
            doc["until"] = enqueued_at + timedelta(seconds=self.period_s)
        return doc

    def reservation(self, job_id: object, enqueued_at: datetime) -> Query:
        """The ``unique_keys`` document that holds the key for ``job_id``."""
        doc: Query = {"_id": self.key, "job": job_id, "created_at": enqueued_at}
        if self.period_s is not None:
            doc["until"] = enqueued_at + timedelta(seconds=self.period_s)
        return doc


def check_key(key: object) -> str:
    if not isinstance(key, str):
        raise UniqueRefused(f"a unique key must be a string, got {type(key).__name__} {key!r:.60}")
    if not key.strip():
        raise UniqueRefused("a unique key must be a non-empty string")
    if len(key) > MAX_KEY_CHARS:
        raise UniqueRefused(f"a unique key must be at most {MAX_KEY_CHARS} characters, got {len(key)}")
    return key


def unique(key: object, scope: object = "unfinished", on_conflict: object = "existing") -> Unique:
    """A checked :class:`Unique`: ``scope`` is ``"unfinished"``, ``"forever"`` or a positive ``timedelta``."""
    key = check_key(key)
    try:
        conflict = OnConflict(on_conflict if isinstance(on_conflict, str) else "")
    except ValueError:
        raise UniqueRefused(f"on_conflict must be 'existing' or 'resubmit', got {on_conflict!r:.60}") from None
    if isinstance(scope, timedelta):
        if scope <= timedelta():
            raise UniqueRefused(f"a unique period must be positive, got {scope}")
        if scope > MAX_DURATION:
            raise UniqueRefused(f"a unique period must be at most {MAX_DURATION.days}d (a century), got {scope.days}d")
        return Unique(key, Scope.PERIOD, scope.total_seconds(), conflict)
    if scope in (Scope.UNFINISHED.value, Scope.FOREVER.value):
        return Unique(key, Scope(str(scope)), None, conflict)
    raise UniqueRefused(f"unique scope must be 'unfinished', 'forever' or a timedelta, got {scope!r:.60}")


def key_of(doc: object) -> str | None:
    """The unique key a job document holds, if any (documents are untrusted: anything else is none)."""
    field = doc.get("unique") if isinstance(doc, dict) else None
    key = field.get("key") if isinstance(field, dict) else None
    return key if isinstance(key, str) else None


def reservation_problem(reservation: Mapping[str, object]) -> str | None:
    """Why a stored ``unique_keys`` document is not a reservation this code wrote (its ``job``
    an ObjectId, its ``until`` a date or absent), or None. Such a document cannot tell who
    holds the key, so a producer refuses the key rather than guess (it might run a job twice)."""
    job, until = reservation.get("job"), reservation.get("until")
    if not isinstance(job, ObjectId):
        return f"job: expected an ObjectId, got {type(job).__name__}"
    if until is not None and not isinstance(until, datetime):
        return f"until: expected a date or nothing, got {type(until).__name__}"
    return None


def reservation_free(now: datetime) -> Query:
    """The filter of a reservation that may be taken over: its period is over."""
    return {"until": {"$lt": now}}
