"""The ``scheduled`` collection: jobs waiting, locked and assigned.

Invariant: Every lock-token filter (a write that must find the job still held by the same
assignment) is written once, here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from bson.min_key import MinKey
from pymongo import DeleteOne, UpdateOne

from recruiter.domain.documents import PRIORITIES, UNLOCKED_STATUSES
from recruiter.domain.outcome import ROLLBACK_PIPELINE
from recruiter.domain.records import Query
from recruiter.domain.resubmit import late_flag_filter
from recruiter.store.layout import AsyncClientSession, AsyncColl, ClientSession, Document, SyncColl
from recruiter.store.stats import count_by

# -- the worker: its own entry, its job, its heartbeat (processes/worker) --------------

async def read_job(scheduled: AsyncColl, job_id: object) -> Document | None:
    """A job to run (a worker, for a job too big to copy): without its history, which carries
    earlier attempts' traces and logs and which a worker never reads. ``job_id`` is read from the
    worker's entry (untrusted): compared as a value (``$eq``), one shaped like an operator is not
    read as one (it failed the worker's every poll: "unknown operator")."""
    return await scheduled.find_one({"_id": {"$eq": job_id}}, {"executions": 0, "last_execution": 0})


async def read_held_jobs(scheduled: AsyncColl, job_ids: Iterable[object], holder: str) -> list[Document]:
    """The jobs among ``job_ids`` still locked by ``holder``."""
    ids = list(job_ids)
    if not ids:
        return []
    return await scheduled.find({"_id": {"$in": ids}, "locked": True, "locked_by": holder}).to_list()


async def rescue_jobs(scheduled: AsyncColl, writes: Sequence[tuple[Query, Query]]) -> None:
    """Apply each ``(filter, update)`` of :func:`recruiter.domain.liveness.rescue_update`."""
    if writes:
        await scheduled.bulk_write([UpdateOne(f, u) for f, u in writes], ordered=False)


async def work_left_for(scheduled: AsyncColl, groups: Sequence[str] | None, worker_ids: Sequence[str],
                        now: datetime, paused_groups: Iterable[str] = (), paused_tenants: Iterable[str] = ()) -> bool:
    """Whether a ``worker start --burst`` still has work: a job locked by one of ``worker_ids``,
    or an unlocked job of ``groups`` (None: any group) due by ``now`` that no pause holds back.
    Two reads of one document at most (``limit 1``); jobs due later are not looked at.

    The unlocked jobs are read first: a round that locks one for these workers between the two
    reads leaves it locked by them for the second. Read the other way round, that job was in
    neither read, and the worker stopped with it assigned. The other way across (an outcome put
    back between the reads) takes a job run and its outcome applied, and a running job keeps
    the caller from asking (``worker.busy()``)."""
    due: Query = {"locked": False, "scheduled_at": {"$lte": now}}
    if groups is not None:
        due["group"] = {"$in": [g for g in groups if g not in set(paused_groups)]}
    elif paused_groups:
        due["group"] = {"$nin": list(paused_groups)}
    if paused_tenants:
        due["tenant"] = {"$nin": list(paused_tenants)}
    if await scheduled.find_one(due, {"_id": 1}) is not None:
        return True
    return await scheduled.find_one({"locked": True, "locked_by": {"$in": list(worker_ids)}}, {"_id": 1}) is not None


APPLIED_FIELDS = {"lock_token": 1, "last_execution": 1}


async def read_lock_and_last_execution(scheduled: AsyncColl, job_id: object) -> Document | None:
    """The job's lock token and last execution: what tells whether an outcome was applied."""
    return await scheduled.find_one({"_id": job_id}, APPLIED_FIELDS)



# -- the recruiter and the cleaner (processes/recruiter.py, processes/cleaner.py) ------


def held(job_id: object, token: object) -> Query:
    """The lock-token filter: the job, still locked by the assignment of ``token``."""
    return {"_id": job_id, "lock_token": token}


# (filter, update) pairs the domain computes (recruiter.domain.outcome, recruiter.domain.liveness).
Change = tuple[Query, Query]


async def read_jobs(scheduled: AsyncColl, ids: Sequence[object]) -> list[Document]:
    """The jobs of ``ids`` that are still in ``scheduled``, whole."""
    return await scheduled.find({"_id": {"$in": list(ids)}}).to_list()


async def read_unlocked_jobs(scheduled: AsyncColl, ids: Sequence[object]) -> list[Document]:
    return await scheduled.find({"_id": {"$in": list(ids)}, "locked": False}).to_list()


async def read_ids(scheduled: AsyncColl, ids: Sequence[object]) -> set[object]:
    """Which of ``ids`` are still in ``scheduled``."""
    return {d["_id"] for d in await scheduled.find({"_id": {"$in": list(ids)}}, {"_id": 1}).to_list()}


async def find_candidates(scheduled: AsyncColl, filter_: Query, projection: Query | None,
                          limit: int) -> list[Document]:
    """One read of the read-ahead (recruiter.store.readahead): with a limit, the first ``limit``
    by (scheduled_at, _id)."""
    cursor = scheduled.find(filter_, projection)
    if limit:
        cursor = cursor.sort([("scheduled_at", 1), ("_id", 1)]).limit(limit)
    return await cursor.to_list()


async def delete_archived(scheduled: AsyncColl, locks: Iterable[tuple[object, object]]) -> int:
    """Delete jobs whose archived copy was just written, each only while its lock token is the
    one given: ONE ``delete_many`` (``_id`` in the ids, ``lock_token`` in the tokens; a token is
    minted for one lock of one job, so the pair matches exactly as a filter per job would, and the
    ids make it point lookups on any server). A job resubmitted meanwhile is left
    (recruiter.domain.resubmit); returns how many were deleted."""
    ids, tokens = _pairs(locks)
    if not ids:
        return 0
    result = await scheduled.delete_many({"_id": {"$in": ids}, "lock_token": {"$in": tokens}, **late_flag_filter()})
    return int(result.deleted_count)


def _pairs(locks: Iterable[tuple[object, object]]) -> tuple[list[object], list[object]]:
    pairs = list(locks)
    return [i for i, _ in pairs], [t for _, t in pairs]


async def read_resubmitted(scheduled: AsyncColl, locks: Sequence[tuple[object, object]]) -> list[Document]:
    """The jobs among ``locks`` still held by their token and carrying a resubmit, whole."""
    if not locks:
        return []
    tokens = dict(locks)
    docs = await scheduled.find({"_id": {"$in": list(tokens)}, "resubmit": {"$exists": True}}).to_list()
    return [d for d in docs if d.get("lock_token") == tokens.get(d["_id"])]


async def apply_changes(scheduled: AsyncColl, changes: Sequence[Change]) -> int:
    """Apply conditional (filter, update) pairs in one bulk write; how many changed a job."""
    result = await scheduled.bulk_write([UpdateOne(f, u) for f, u in changes], ordered=False)
    return int(result.modified_count)


def unlocked_as_read(job_id: object, attempts: int | None) -> Query:
    """A lock's filter: the job still free, with the attempt count the round read (if it read it)."""
    filter_: Query = {"_id": job_id, "locked": False}
    if attempts is not None:
        filter_["attempts"] = attempts
    return filter_


@dataclass(frozen=True)
class Lock:
    """One job a round locks: the attempt count it read (None: not read), its worker, its token."""

    job_id: object
    attempts: int | None
    worker_id: str
    token: object


def _for_each(ids: list[object], values: list[object]) -> Query:
    """An update pipeline expression: the value of ``values`` at the position of the document's
    ``_id`` in ``ids`` (each document its own value, in one statement)."""
    return {"$arrayElemAt": [{"$literal": values}, {"$indexOfArray": [{"$literal": ids}, "$_id"]}]}


async def lock_jobs(scheduled: AsyncColl, locks: Sequence[Lock], fields: Mapping[str, object]) -> int:
    """Lock each job of ``locks`` for its worker, only if still free with the attempt count read
    (:func:`unlocked_as_read`): sets ``fields``, its ``locked_by`` and ``lock_token``, and counts the
    attempt. ONE ``update_many`` per attempt count read (a round's jobs mostly share one), whose
    pipeline gives each job its own worker and token, where a bulk of updates costs a statement
    per job. Returns how many jobs it locked."""
    changed = 0
    for filter_, pipeline in lock_statements(locks, fields):
        changed += int((await scheduled.update_many(filter_, pipeline)).modified_count)
    return changed


def lock_statements(locks: Sequence[Lock], fields: Mapping[str, object]) -> list[tuple[Query, list[Query]]]:
    """The ``update_many`` statements of :func:`lock_jobs`, as (filter, pipeline)."""
    by_attempts: dict[int | None, list[Lock]] = {}
    for lk in locks:
        by_attempts.setdefault(lk.attempts, []).append(lk)
    statements: list[tuple[Query, list[Query]]] = []
    for attempts, group in by_attempts.items():
        ids = [lk.job_id for lk in group]
        filter_: Query = {"_id": {"$in": ids}, "locked": False}
        if attempts is not None:
            filter_["attempts"] = attempts
        statements.append((filter_, [{"$set": {
            **{k: {"$literal": v} for k, v in fields.items()},
            "locked_by": _for_each(ids, [lk.worker_id for lk in group]),
            "lock_token": _for_each(ids, [lk.token for lk in group]),
            "attempts": {"$add": [{"$ifNull": ["$attempts", 0]}, 1]},
        }}]))
    return statements


async def read_locked_in(scheduled: AsyncColl, groups: Sequence[str]) -> list[Document]:
    """The group and tenant of every locked (assigned or running) job of ``groups``: flow control
    counts them (served by the ``candidates`` index: ``locked``, then ``group``)."""
    return await scheduled.find({"locked": True, "group": {"$in": list(groups)}},
                                {"_id": 0, "group": 1, "tenant": 1}).to_list()


def read_locked_in_sync(scheduled: SyncColl, groups: Sequence[str]) -> list[Document]:
    """:func:`read_locked_in`, for the operator's commands."""
    return list(scheduled.find({"locked": True, "group": {"$in": list(groups)}}, {"_id": 0, "group": 1, "tenant": 1}))


async def read_locks(scheduled: AsyncColl) -> list[Document]:
    """Every locked job: its ``locked_by`` and ``lock_token`` only."""
    return await scheduled.find({"locked": True}, {"locked_by": 1, "lock_token": 1}).to_list()


async def roll_back(scheduled: AsyncColl, locks: Iterable[tuple[object, object]]) -> int:
    """Release locks that never reached a worker (each by its token); how many were released."""
    result = await scheduled.bulk_write([UpdateOne(held(job_id, token), ROLLBACK_PIPELINE)
                                         for job_id, token in locks], ordered=False)
    return int(result.modified_count)


async def read_held_by(scheduled: AsyncColl, ids: Sequence[object], worker_id: object) -> list[Document]:
    """The jobs of ``ids`` still locked by ``worker_id``."""
    return await scheduled.find({"_id": {"$in": list(ids)}, "locked": True, "locked_by": worker_id}).to_list()


async def read_locked_before(scheduled: AsyncColl, cutoff: datetime) -> list[Document]:
    return await scheduled.find({"locked": True, "locked_at": {"$lt": cutoff}}).to_list()


async def read_rescued(scheduled: AsyncColl, ids: Sequence[object], now: datetime, reason: str) -> set[object]:
    """Which of ``ids`` a rescue written at ``now`` for ``reason`` returned or unlocked."""
    return {d["_id"] for d in await scheduled.find(
        {"_id": {"$in": list(ids)}, "$or": [
            {"crash_pending": True, "last_execution.ended_at": now, "last_execution.message": reason},
            {"last_return.returned_at": now, "last_return.reason": reason}]}, {"_id": 1}).to_list()}


async def delete_finished(scheduled: AsyncColl, locks: Sequence[tuple[object, object]]) -> int:
    """Delete jobs found archived while still in ``scheduled`` (each by its token)."""
    result = await scheduled.delete_many({"$or": [held(job_id, token) for job_id, token in locks]})
    return int(result.deleted_count)



# -- liveness, quarantine and the fairness cursor (moved from domain/) -----------------


async def read_locked(scheduled: AsyncColl, ids: Sequence[object]) -> list[Document]:
    return await scheduled.find({"_id": {"$in": list(ids)}, "locked": True}).to_list()


async def apply_change(scheduled: AsyncColl, change: Change) -> bool:
    """Apply one conditional (filter, update); whether it changed the job."""
    return bool((await scheduled.update_one(*change)).modified_count)


# A NUL cannot be in a name (names become field names); written as a regex escape,
# since MongoDB refuses a pattern that holds one.
_NO_NUL = {"$not": {"$regex": "\\x00"}}
# What every job a candidate read (or the cleaner) can meet looks like, as a filter.
_REACHABLE: Query = {
    "$and": [
        {"$or": [
            {"locked": False, "status": {"$in": list(UNLOCKED_STATUSES)}},
            {"locked": True, "status": "assigned", "locked_by": {"$type": "string"},
             "lock_token": {"$type": "objectId"}, "locked_at": {"$type": "date"}},
        ]},
        {"$or": [{"tenant": None}, {"tenant": {"$type": "string", "$ne": "", **_NO_NUL}}]},
        # A query on a field matches an array by its elements: the tests above would pass one.
        {"$nor": [{f: {"$type": "array"}} for f in ("locked", "status", "group", "tenant", "priority",
                                                     "scheduled_at", "locked_by", "lock_token", "locked_at")]},
    ],
    "scheduled_at": {"$type": "date", "$lte": datetime(9999, 12, 31, tzinfo=UTC)},
    "group": {"$type": "string", "$nin": ["", "*"], **_NO_NUL},
    "priority": {"$in": list(PRIORITIES)},
}
# A job no candidate read can meet: it would sit in ``scheduled`` forever. One predicate,
# evaluated once per document (a long $or of type tests costs a scan per branch on some servers).
UNREACHABLE: Query = {"$nor": [_REACHABLE]}


async def read_unreachable(scheduled: AsyncColl, limit: int) -> list[Document]:
    """Up to ``limit`` jobs no candidate read can meet (recruiter.processes.upkeep.sweep)."""
    return [doc async for doc in scheduled.find(UNREACHABLE).limit(limit)]


async def delete_by_ids(scheduled: AsyncColl, ids: Sequence[object]) -> None:
    """Delete jobs by ``_id`` (``$eq``: an ``_id`` that is itself a document is not read as operators)."""
    await scheduled.bulk_write([DeleteOne({"_id": {"$eq": i}}) for i in ids], ordered=False)


def carries_name(scheduled: SyncColl, kind: str, name: str) -> bool:
    """Whether a job, queued or locked, carries group or tenant ``name`` (``kind``: group | tenant):
    one ``find_one`` served by the ``candidates`` index (the group bound lets it serve a tenant alone)."""
    where: Query = ({"locked": {"$in": [False, True]}, "group": name} if kind == "group" else
                    {"locked": {"$in": [False, True]}, "group": {"$gte": MinKey()}, "tenant": name})
    return scheduled.find_one(where, {"_id": 1}, hint="candidates") is not None


async def read_waiting_in_group(scheduled: AsyncColl, group: str, limit: int) -> list[Document]:
    """Up to ``limit`` unlocked jobs of ``group`` (a worker's reserved group: served by ``candidates``)."""
    return [d async for d in scheduled.find({"locked": False, "group": group}).limit(limit)]


async def read_past_worker_deadline(scheduled: AsyncColl, now: datetime, limit: int) -> list[Document]:
    """Up to ``limit`` unlocked jobs aimed at a worker whose deadline has passed (index ``worker_deadline``)."""
    return [d async for d in scheduled.find({"on_worker.deadline": {"$lte": now}, "locked": False}).limit(limit)]


async def delete_unlocked_as_read(scheduled: AsyncColl, job: Mapping[str, object]) -> bool:
    """Delete ``job`` if it is still unlocked with the attempt count read (so not taken meanwhile)."""
    attempts = job.get("attempts")
    found = unlocked_as_read({"$eq": job.get("_id")}, None)
    if isinstance(attempts, int | float):
        found["attempts"] = attempts
    return bool((await scheduled.delete_one(found)).deleted_count)


# -- the producer and the operator's commands (producer/, cli/) ------------------------


def insert_job(scheduled: SyncColl, doc: Document, session: ClientSession | None = None) -> None:
    """Store one job document built by the producer (in ``session``'s transaction, if given)."""
    scheduled.insert_one(doc, session=session)


def insert_jobs(scheduled: SyncColl, docs: list[Document], session: ClientSession | None = None) -> None:
    """Store many job documents in one round trip, in order (the producer's batch)."""
    scheduled.insert_many(docs, ordered=True, session=session)


async def insert_job_async(scheduled: AsyncColl, doc: Document, session: AsyncClientSession | None = None) -> None:
    """Store one job document built by the producer (asyncio client)."""
    await scheduled.insert_one(doc, session=session)


async def insert_jobs_async(scheduled: AsyncColl, docs: list[Document],
                            session: AsyncClientSession | None = None) -> None:
    """Store many job documents in one round trip, in order (asyncio client)."""
    await scheduled.insert_many(docs, ordered=True, session=session)


def count_by_status(scheduled: SyncColl) -> dict[object, int]:
    """How many jobs are in each ``status`` (``recruiter status``)."""
    return count_by(scheduled, "status")
