"""A worker's writes of its job's outcome, and of the ``started`` mark, to its own roster entry.

Invariant: each write is fenced by the slot's session and by its assignment still naming the
job (:func:`recruiter.store.roster_fences.entry_as_read`), and says whether it matched; an
outcome that cannot be written as it is raises :class:`OutcomeRefused` with nothing written,
never a connection error, so the caller does not write it again as it is. Writes that may not
be known to have landed are idempotent (:mod:`recruiter.store.unrecorded`).
"""

from __future__ import annotations

from datetime import datetime

from bson import ObjectId
from bson.errors import InvalidDocument
from pymongo.errors import BulkWriteError, DocumentTooLarge, WriteError

from recruiter.domain.records import Query
from recruiter.store import unrecorded
from recruiter.store.layout import AsyncColl, Document
from recruiter.store.roster_fences import entry_as_read


class OutcomeRefused(Exception):
    """The outcome cannot be written as it is: the driver cannot encode it, or the server refused
    the document. Not a connection problem: writing it again would fail the same way."""


# What encoding an outcome may raise (a value the checks missed), and the server's refusals of it.
_REFUSALS = (InvalidDocument, DocumentTooLarge, UnicodeEncodeError, RecursionError, OverflowError,
             WriteError, BulkWriteError)


def _outcome_write(slot_id: str, session: ObjectId, job_id: object, outcome: Query, *, stopping: bool,
                   now: datetime) -> tuple[Query, Query]:
    """The filter and update of an outcome (:func:`record_outcome`): fenced by the session and the
    assignment still naming ``job_id``; the entry becomes available (unless stopping)."""
    return ({**entry_as_read(slot_id, session), f"assigned_to.{slot_id}": job_id},
            {"$set": {"outcome": outcome, "available": not stopping, "stopping": stopping, "available_since": now},
             "$unset": {"assigned_to": "", "job": ""}})


def _mark_write(slot_id: str, session: ObjectId, job_id: object, token: object) -> tuple[Query, Query]:
    """The filter and update of a ``started`` mark (:func:`mark_started`), fenced like an outcome."""
    return {**entry_as_read(slot_id, session), f"assigned_to.{slot_id}": job_id}, {"$set": {"started": token}}


async def record_outcome(roster: AsyncColl, slot_id: str, session: ObjectId, job_id: object,
                         outcome: Query, *, stopping: bool, now: datetime) -> bool:
    """Write ``outcome`` and make the entry available (unless stopping), in one write.

    Fenced by the session and by the assignment still naming ``job_id``; False if that matched
    nothing; :class:`OutcomeRefused` if it cannot be written as it is.
    """
    try:
        result = await unrecorded.update(
            roster, *_outcome_write(slot_id, session, job_id, outcome, stopping=stopping, now=now))
    except _REFUSALS as exc:
        raise OutcomeRefused(_refusal(exc)) from None
    return result.matched_count > 0


def _refusal(exc: BaseException) -> str:
    try:
        text = str(exc).encode("utf-8", "backslashreplace").decode("utf-8")
    except Exception:  # noqa: BLE001 - a message that cannot be rendered
        text = ""
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:300]


async def record_outcome_and_mark(roster: AsyncColl, slot_id: str, session: ObjectId, job_id: object,
                                  outcome: Query, *, stopping: bool, now: datetime,
                                  mark: tuple[str, ObjectId, object, object]) -> tuple[bool, bool]:
    """:func:`record_outcome`, and in the same command the ``started`` mark of the next job
    (``mark``: its lane, that lane's session, the job id, its lock token; see
    :func:`mark_started`): one round trip. Whether each is known to have landed: when only one
    of the two matched, neither is (the caller finds out, or writes again: both are idempotent)."""
    lane, lane_session, next_id, token = mark
    try:
        result = await roster.bulk_write([
            unrecorded.update_model(*_outcome_write(slot_id, session, job_id, outcome, stopping=stopping, now=now)),
            unrecorded.update_model(*_mark_write(lane, lane_session, next_id, token)),
        ], ordered=True)
    except _REFUSALS as exc:
        raise OutcomeRefused(_refusal(exc)) from None
    both = result.matched_count == 2
    return both, both


async def mark_started(roster: AsyncColl, slot_id: str, session: ObjectId, job_id: object, token: object) -> bool:
    """Record in the slot's entry that it starts the job it was handed ahead (``started``: its
    lock token), fenced by the session and the assignment; False if that matched nothing (the
    job was taken away, or the worker declared dead or replaced)."""
    result = await unrecorded.update(roster, *_mark_write(slot_id, session, job_id, token))
    return result.matched_count > 0


async def read_recorded_token(roster: AsyncColl, slot_id: str) -> Document | None:
    """The entry's session and the lock token of the outcome it holds, if any."""
    return await roster.find_one({"_id": slot_id}, {"session": 1, "outcome.token": 1})
