"""The ``archived`` collection: the history of every finished job.

Invariant: A job is archived once, by ``_id`` (a copy already there is left as it is), in the
same transaction that deletes it from ``scheduled``; nothing else writes here, except
that transaction taking back a copy it has just written when the job turns out
to be resubmitted (:func:`take_back`), and retention.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from bson.min_key import MinKey
from pymongo import UpdateOne
from pymongo.errors import BulkWriteError

from recruiter.store.layout import AsyncColl, Document, SyncColl
from recruiter.store.stats import count_by
from recruiter.store.unique import duplicates

# -- the worker: its own entry, its job, its heartbeat (processes/worker) --------------

async def read_last_execution(archived: AsyncColl, job_id: object) -> Document | None:
    """The archived job's lock token (none) and last execution."""
    return await archived.find_one({"_id": job_id}, {"lock_token": 1, "last_execution": 1})



# -- the recruiter and the cleaner (processes/recruiter.py, processes/cleaner.py) ------


async def archive(archived: AsyncColl, docs: Sequence[Mapping[str, object]]) -> set[object]:
    """Write the archived copies ``docs`` that are not there yet; a copy archived by an earlier,
    half-done apply is left as it is. Two commands whatever the number of copies: which ids are
    there (by ``_id``), then one ``insert_many`` of the others (a bulk of upserts costs a statement
    per copy). Inside a transaction a copy inserted meanwhile by another writer conflicts with the
    insert and the transaction is run again; outside one, it is counted as there. Returns the ids
    of the copies written now."""
    if not docs:
        return set()
    there = await read_ids(archived, [d["_id"] for d in docs])
    new = [dict(d) for d in docs if d["_id"] not in there]
    if not new:
        return set()
    try:
        await archived.insert_many(new, ordered=False)
    except BulkWriteError as exc:
        return {d["_id"] for d in new} - {new[i]["_id"] for i in duplicates(exc)}
    return {d["_id"] for d in new}


async def take_back(archived: AsyncColl, ids: Sequence[object]) -> None:
    """Delete copies this round's transaction has just written, of jobs found resubmitted
    (recruiter.domain.resubmit) before their delete from ``scheduled``: in the round's
    transaction, so no reader ever sees them."""
    if ids:
        await archived.delete_many({"_id": {"$in": list(ids)}})


async def read_ids(archived: AsyncColl, ids: Sequence[object]) -> set[object]:
    """Which of ``ids`` have an archived copy."""
    return {d["_id"] for d in await archived.find({"_id": {"$in": list(ids)}}, {"_id": 1}).to_list()}


async def read_expired(archived: AsyncColl, cutoff: datetime, limit: int) -> list[object]:
    """The ids of up to ``limit`` copies archived before ``cutoff``."""
    return [d["_id"] for d in await archived.find({"archived_at": {"$lt": cutoff}}, {"_id": 1}).limit(limit).to_list()]


async def delete_expired(archived: AsyncColl, ids: Sequence[object], cutoff: datetime) -> int:
    result = await archived.delete_many({"_id": {"$in": list(ids)}, "archived_at": {"$lt": cutoff}})
    return int(result.deleted_count)



# -- liveness, quarantine and the fairness cursor (moved from domain/) -----------------


async def archive_copies(archived: AsyncColl, copies: Sequence[tuple[object, Mapping[str, object]]]) -> list[int]:
    """Write quarantined copies (``(_id, copy)``, upserts that only set fields on insert);
    returns the positions of those written now (not by an earlier pass)."""
    result = await archived.bulk_write(
        # $eq: an _id that is itself a document is not read as operators.
        [UpdateOne({"_id": {"$eq": job_id}}, {"$setOnInsert": copy}, upsert=True) for job_id, copy in copies],
        ordered=False,
    )
    return sorted(result.upserted_ids or {})


# -- recruiter.testing: what a drain ran ------------------------------------------------


async def read_ran(archived: AsyncColl, ids: Sequence[object], worker_ids: Sequence[str]) -> list[Document]:
    """The archived jobs among ``ids``, and those whose last attempt ran on one of ``worker_ids``."""
    return await archived.find({"$or": [{"_id": {"$in": list(ids)}},
                                        {"last_execution.worker": {"$in": list(worker_ids)}}]}).to_list()


def carries_name(archived: SyncColl, kind: str, name: str) -> bool:
    """Whether an archived job carries group or tenant ``name``: one ``find_one`` on ``by_group``."""
    where: dict[str, object] = {"group": name} if kind == "group" else {"group": {"$gte": MinKey()}, "tenant": name}
    return archived.find_one(where, {"_id": 1}, hint="by_group") is not None



# -- the producer and the operator's commands (producer/, cli/) ------------------------


def count_by_why(archived: SyncColl) -> dict[object, int]:
    """How many archived jobs there are for each ``why`` (``recruiter status``)."""
    return count_by(archived, "why")
