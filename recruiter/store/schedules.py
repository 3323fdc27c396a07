"""The ``schedules`` collection: upserts from the producer, and the leader's firing writes.

Invariant: a definition is written only conditionally on the version read
(two producers declaring at once: one wins, the other reads again); a firing
writes the schedule only conditionally on the ``next_slot`` and ``version`` it
read, in the same fenced transaction as its occurrences and their
``unique_keys`` reservations, so a slot's occurrence exists exactly when the
schedule has moved past it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pymongo import ASCENDING
from pymongo.errors import DuplicateKeyError

from recruiter.domain.records import Query
from recruiter.domain.schedules import slot_keys_range
from recruiter.store.layout import ROSTER, SCHEDULED, SCHEDULES, UNIQUE_KEYS, AsyncColl, AsyncDb, Document, SyncColl

# -- the producer's upsert (sync and asyncio) ------------------------------------------------


def new_document(name: str, fields: dict[str, Any], now: datetime, next_slot: datetime | None,
                 next_fire_at: datetime | None) -> Document:
    return {"_id": name, **fields, "paused": False, "created_at": now, "updated_at": now, "declared_at": now,
            "next_fire_at": next_fire_at, "next_slot": next_slot, "last_fire": None, "skipped": 0,
            "last_skip": None, "run_now": None}


def redefinition(fields: dict[str, Any], now: datetime, next_slot: datetime | None,
                 next_fire_at: datetime | None, paused: bool) -> Query:
    """A changed definition: its fields, and its next slot from now (none while paused)."""
    return {"$set": {**fields, "updated_at": now, "declared_at": now, "next_slot": next_slot,
                     "next_fire_at": None if paused else next_fire_at}}


def read_schedule(coll: SyncColl, name: str) -> Document | None:
    return coll.find_one({"_id": name})


def insert_schedule(coll: SyncColl, doc: Document) -> bool:
    """Insert a new schedule; False if one with its name was inserted meanwhile."""
    try:
        coll.insert_one(doc)
    except DuplicateKeyError:
        return False
    return True


# ``version`` for an update that applies whatever version is stored (the last declaration wins).
ANY_VERSION = object()


def _as_read(name: str, version: object) -> Query:
    return {"_id": name} if version is ANY_VERSION else {"_id": name, "version": {"$eq": version}}


def update_schedule(coll: SyncColl, name: str, version: object, update: Query) -> bool:
    """Apply ``update`` if the schedule still has ``version`` (any: :data:`ANY_VERSION`); whether it did."""
    return coll.update_one(_as_read(name, version), update).matched_count == 1


async def read_schedule_async(coll: AsyncColl, name: str) -> Document | None:
    return await coll.find_one({"_id": name})


async def insert_schedule_async(coll: AsyncColl, doc: Document) -> bool:
    try:
        await coll.insert_one(doc)
    except DuplicateKeyError:
        return False
    return True


async def update_schedule_async(coll: AsyncColl, name: str, version: object, update: Query) -> bool:
    return (await coll.update_one(_as_read(name, version), update)).matched_count == 1


# -- the leader's reads (outside its transaction) -----------------------------------------


def _not_paused_without_time() -> Query:
    # Declared, not paused, but with no next fire time: a resume (or a mongosh edit) asks the
    # recruiter to compute it.
    return {"next_fire_at": None, "paused": {"$ne": True}}


async def read_due(db: AsyncDb, now: datetime, limit: int, exclude: list[object] | None = None) -> list[Document]:
    """Schedules due at ``now`` (index ``next_fire``), those asked to run now (``run_now``), and
    those that need a next fire time; not those of ``exclude`` (set aside by the leader)."""
    coll = db[SCHEDULES]
    query: Query = {"$or": [{"next_fire_at": {"$lte": now}}, {"run_now": {"$type": "date"}},
                            _not_paused_without_time()]}
    if exclude:
        query["_id"] = {"$nin": exclude}
    return [d async for d in coll.find(query).limit(limit)]


async def earliest_fire_at(db: AsyncDb, after: datetime) -> datetime | None:
    """The earliest ``next_fire_at`` after ``after`` (index ``next_fire``)."""
    doc = await db[SCHEDULES].find_one({"next_fire_at": {"$gt": after, "$type": "date"}}, {"next_fire_at": 1},
                                       sort=[("next_fire_at", ASCENDING)])
    value = doc.get("next_fire_at") if doc else None
    return value if isinstance(value, datetime) else None


# -- the leader's writes (inside its fenced transaction: ``db`` is the transaction's) -------


async def is_unfinished(db: AsyncDb, job_id: object) -> bool:
    """Whether the job has not ended: it is still in ``scheduled`` (waiting, running or
    retrying) and no roster entry holds an outcome that archives it. An outcome a worker
    recorded is applied (archived, deleted from ``scheduled``) by a later round, and firing
    runs before the round, so a run that ended is never taken for one still going. An
    outcome that retries the job leaves it unfinished, as it is once applied."""
    if await db[SCHEDULED].find_one({"_id": job_id}, {"_id": 1}) is None:
        return False
    ended = {"outcome.job": job_id, "outcome.decision.archive": {"$exists": True}}
    return await db[ROSTER].find_one(ended, {"_id": 1}) is None


async def is_reserved(db: AsyncDb, key: str) -> bool:
    """Whether a slot's key is reserved (it fired already): read first, as a duplicate key
    inside a transaction aborts the whole transaction."""
    return await db[UNIQUE_KEYS].find_one({"_id": key}, {"_id": 1}) is not None


async def insert_occurrence(db: AsyncDb, doc: Document, reservation: Document) -> None:
    """An occurrence and its key's reservation (``unique_keys``, kept until its ``until``)."""
    await db[UNIQUE_KEYS].insert_one(reservation)
    await db[SCHEDULED].insert_one(doc)


async def prune_reservations(db: AsyncDb, name: str, now: datetime, limit: int) -> int:
    """Delete up to ``limit`` of schedule ``name``'s slot reservations that expired (or that an
    older version kept for ever, with no ``until``, once older than a day); how many.

    Served by the ``_id`` index: slot keys are ``name@<ISO 8601 slot>``, so a schedule's
    lie in one ``_id`` range (run-now keys, ``name@run-now:…``, sort after it)."""
    low, high = slot_keys_range(name)
    old: Query = {"$or": [{"until": {"$lt": now}},
                          {"until": {"$exists": False}, "created_at": {"$lt": now - timedelta(days=1)}}]}
    ids = [d["_id"] async for d in db[UNIQUE_KEYS].find({"_id": {"$gt": low, "$lt": high}, **old},
                                                         {"_id": 1}).limit(limit)]
    if not ids:
        return 0
    return (await db[UNIQUE_KEYS].delete_many({"_id": {"$in": ids}, **old})).deleted_count


async def record_firing(db: AsyncDb, name: str, read: Query, update: Query) -> bool:
    """Move the schedule past what was fired, if it is still as read; whether it was."""
    return (await db[SCHEDULES].update_one({"_id": name, **read}, update)).matched_count == 1
