"""The ``roster`` collection: one entry per worker slot, its assignment and its outcome.

Invariant: Every fenced roster filter (an entry matched by ``_id`` and ``session``, so a
write never lands on a newer registration of the same id) is written once, here.
"""

from __future__ import annotations

from datetime import datetime

import pymongo
from bson import ObjectId
from pymongo.errors import DuplicateKeyError

from recruiter.domain.records import Query
from recruiter.store.layout import AsyncColl, Document, SyncColl

# -- the worker: its own entry, its job, its heartbeat (processes/worker) --------------

# A registration's ``session``: every write of the slot is fenced by it.
Session = ObjectId


def new_session() -> Session:
    """A fresh ``session`` for a registration."""
    return ObjectId()


def new_worker_id() -> str:
    """An id for a worker started without ``--id``: unique, and ordered by start time."""
    return str(ObjectId())


def _mine(slot_id: str, session: ObjectId) -> Query:
    """The fenced filter of a slot's own entry: its id and the session of its registration."""
    return {"_id": slot_id, "session": session}


async def insert_entry(roster: AsyncColl, entry: Query) -> bool:
    """Enter the roster; False when an entry with that id is there already."""
    try:
        await roster.insert_one(entry)
    except DuplicateKeyError:
        return False
    return True


async def read_entry(roster: AsyncColl, slot_id: str) -> Document | None:
    """The whole entry of ``slot_id``, whoever registered it."""
    return await roster.find_one({"_id": slot_id})


async def take_over_entry(roster: AsyncColl, slot_id: str, old_session: object, entry: Query) -> bool:
    """Replace the entry a previous registration left, unless it changed since it was read."""
    result = await roster.replace_one({"_id": slot_id, "session": old_session}, entry)
    return result.matched_count > 0


async def read_assignment(roster: AsyncColl, slot_id: str) -> Document | None:
    """What a slot reads to learn of its work: availability, assignment, job copy, session, stop."""
    return await roster.find_one(
        {"_id": slot_id},
        {"available": 1, f"assigned_to.{slot_id}": 1, "job": 1, "session": 1, "stop_requested": 1})


async def record_outcome(roster: AsyncColl, slot_id: str, session: ObjectId, job_id: object,
                         outcome: Query, *, stopping: bool, now: datetime) -> bool:
    """Write ``outcome`` and make the entry available (unless stopping), in one write.

    Fenced by the session and by the assignment still naming ``job_id``; False if that matched nothing.
    """
    result = await roster.update_one(
        {**_mine(slot_id, session), f"assigned_to.{slot_id}": job_id},
        {"$set": {"outcome": outcome, "available": not stopping, "stopping": stopping, "available_since": now},
         "$unset": {"assigned_to": "", "job": ""}},
    )
    return result.matched_count > 0


async def read_recorded_token(roster: AsyncColl, slot_id: str) -> Document | None:
    """The entry's session and the lock token of the outcome it holds, if any."""
    return await roster.find_one({"_id": slot_id}, {"session": 1, "outcome.token": 1})


async def release_entry(roster: AsyncColl, slot_id: str, session: ObjectId, now: datetime, *,
                        stopping: bool, assignment: object = None, recovered: bool = False) -> bool:
    """Make a slot's own entry available again (unless stopping), with no job: the one
    "available again" write. False if the fence matched nothing.

    - ``assignment``: the assignment is dropped, fenced by it still naming that job (a stale one);
    - ``recovered``: the entry this registration took over is done releasing the old jobs;
    - neither: the assignment is gone already (the job was taken away), and the entry is not
      being recovered.
    """
    fence = _mine(slot_id, session)
    unset = {"job": ""}
    if assignment is not None:
        fence[f"assigned_to.{slot_id}"] = assignment
        unset["assigned_to"] = ""
    elif recovered:
        unset["recovering"] = ""
    else:
        fence.update({"assigned_to": {"$exists": False}, "recovering": {"$exists": False}})
    result = await roster.update_one(
        fence, {"$set": {"available": not stopping, "stopping": stopping, "available_since": now}, "$unset": unset})
    return result.matched_count > 0


async def step_down(roster: AsyncColl, slot_id: str, session: ObjectId, timeout_s: float) -> object:
    """Stop an available entry from being given work; if it is not available, the job
    assigned to it meanwhile (or None). Bounded by ``timeout_s``."""
    with pymongo.timeout(timeout_s):
        result = await roster.update_one({**_mine(slot_id, session), "available": True},
                                         {"$set": {"stopping": True, "available": False}})
        if result.matched_count:
            return None
        doc = await roster.find_one(_mine(slot_id, session), {f"assigned_to.{slot_id}": 1})
    assigned = (doc or {}).get("assigned_to")
    return assigned.get(slot_id) if isinstance(assigned, dict) else None


async def delete_own_entry(roster: AsyncColl, slot_id: str, session: ObjectId, timeout_s: float) -> bool:
    """Delete the slot's own entry unless it holds an outcome; True once it is gone."""
    with pymongo.timeout(timeout_s):
        deleted = await roster.delete_one({**_mine(slot_id, session), "outcome": {"$exists": False}})
        return bool(deleted.deleted_count) or await roster.find_one(_mine(slot_id, session), {"_id": 1}) is None


def read_fences(roster: SyncColl, slot_ids: list[str]) -> dict[str, Document]:
    """The session and assignment of each entry, by id (from the heartbeat thread)."""
    return {d["_id"]: d for d in roster.find({"_id": {"$in": slot_ids}}, {"session": 1, "assigned_to": 1})}



# -- the recruiter and the cleaner (processes/recruiter.py, processes/cleaner.py) ------


# -- liveness, quarantine and the fairness cursor (moved from domain/) -----------------


# -- the producer and the operator's commands (producer/, cli/) ------------------------
