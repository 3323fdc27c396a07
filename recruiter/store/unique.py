"""Writing unique jobs (see :mod:`recruiter.domain.unique` for the design).

Invariant: a unique job is written by ONE insert that the partial unique index
on ``scheduled`` may refuse (scope ``unfinished``), or together with its key's
reservation in ``unique_keys`` in ONE transaction (a period, ``forever``); a
refused write leaves nothing behind and names the job holding the key
(:class:`Held`), read after the refusal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from bson import ObjectId
from pymongo import WriteConcern
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import BulkWriteError, OperationFailure
from pymongo.synchronous.client_session import ClientSession

from recruiter.domain.records import Query, Raw
from recruiter.domain.unique import Unique, reservation_free, reservation_problem
from recruiter.store.layout import SCHEDULED, UNIQUE_KEYS, AsyncColl, AsyncDb, Document, SyncColl, SyncDb

DUPLICATE_KEY = 11000


@dataclass(frozen=True)
class Held:
    """The key is held: by ``job`` (None: by a job that ended since; try again), or by a
    reservation that is malformed (``problem``: which field, in one line)."""

    job: ObjectId | None
    problem: str | None = None


def _duplicate(exc: OperationFailure) -> bool:
    return exc.code == DUPLICATE_KEY


def _holder(reservation: Raw | None, unfinished: Raw | None, now: datetime) -> Held:
    """Who holds a key: a live reservation's job, else the unfinished job with the key."""
    if reservation is not None:
        problem = reservation_problem(reservation)
        if problem is not None:
            return Held(None, problem)
        until, job = reservation.get("until"), reservation.get("job")
        live = not isinstance(until, datetime) or until >= now
        if live and isinstance(job, ObjectId):
            return Held(job)
    job_id = unfinished.get("_id") if unfinished is not None else None
    return Held(job_id if isinstance(job_id, ObjectId) else None)


def _reservation_filter(spec: Unique, now: datetime, take_over: Query | None) -> Query:
    return {"_id": spec.key, **(take_over if take_over is not None else reservation_free(now))}


def _without_id(doc: Query) -> Query:
    return {k: v for k, v in doc.items() if k != "_id"}


def duplicates(exc: BulkWriteError) -> list[int]:
    """The positions an unordered insert refused as duplicate keys; re-raises any other error."""
    errors = exc.details.get("writeErrors") or []
    if any(e.get("code") != DUPLICATE_KEY for e in errors) or exc.details.get("writeConcernErrors"):
        raise exc
    return sorted(int(e["index"]) for e in errors)


# -- synchronous (Recruiter) -------------------------------------------------------------


def holder(db: SyncDb, spec: Unique, now: datetime) -> Held:
    """Who holds ``spec``'s key: its reservation (if the scope reserves), else its unfinished job."""
    reservation = db[UNIQUE_KEYS].find_one({"_id": spec.key}) if spec.reserves else None
    return _holder(reservation, db[SCHEDULED].find_one({"unique.key": spec.key}, {"_id": 1}), now)


def insert_unique(db: SyncDb, doc: Document, spec: Unique, now: datetime,
                  take_over: Query | None = None) -> Held | None:
    """Write the unique job ``doc``; None once written, else who holds its key.

    ``take_over`` (a period or forever) is the condition on which the key's
    reservation may be replaced: by default, that its period is over."""
    try:
        if not spec.reserves:
            db[SCHEDULED].insert_one(doc)
            return None
        reservation = spec.reservation(doc["_id"], now)
        inside = db.with_options(write_concern=WriteConcern())

        def write(session: ClientSession) -> None:
            inside[UNIQUE_KEYS].replace_one(_reservation_filter(spec, now, take_over), _without_id(reservation),
                                            upsert=True, session=session)
            inside[SCHEDULED].insert_one(doc, session=session)

        with db.client.start_session() as session:
            session.with_transaction(write, write_concern=WriteConcern("majority"))
        return None
    except OperationFailure as exc:
        if not _duplicate(exc):
            raise
    return holder(db, spec, now)


def insert_unordered(scheduled: SyncColl, docs: Sequence[Document]) -> list[int]:
    """Insert ``docs`` in one round trip, each on its own; the positions refused as duplicate keys."""
    try:
        scheduled.insert_many(list(docs), ordered=False)
    except BulkWriteError as exc:
        return duplicates(exc)
    return []


# -- asyncio (AsyncRecruiter) ------------------------------------------------------------


async def holder_async(db: AsyncDb, spec: Unique, now: datetime) -> Held:
    reservation = await db[UNIQUE_KEYS].find_one({"_id": spec.key}) if spec.reserves else None
    return _holder(reservation, await db[SCHEDULED].find_one({"unique.key": spec.key}, {"_id": 1}), now)


async def insert_unique_async(db: AsyncDb, doc: Document, spec: Unique, now: datetime,
                              take_over: Query | None = None) -> Held | None:
    """:func:`insert_unique` with the asyncio client."""
    try:
        if not spec.reserves:
            await db[SCHEDULED].insert_one(doc)
            return None
        reservation = spec.reservation(doc["_id"], now)
        inside = db.with_options(write_concern=WriteConcern())

        async def write(session: AsyncClientSession) -> None:
            await inside[UNIQUE_KEYS].replace_one(_reservation_filter(spec, now, take_over),
                                                  _without_id(reservation), upsert=True, session=session)
            await inside[SCHEDULED].insert_one(doc, session=session)

        async with db.client.start_session() as session:
            await session.with_transaction(write, write_concern=WriteConcern("majority"))
        return None
    except OperationFailure as exc:
        if not _duplicate(exc):
            raise
    return await holder_async(db, spec, now)


async def insert_unordered_async(scheduled: AsyncColl, docs: Sequence[Document]) -> list[int]:
    """:func:`insert_unordered` with the asyncio client."""
    try:
        await scheduled.insert_many(list(docs), ordered=False)
    except BulkWriteError as exc:
        return duplicates(exc)
    return []
