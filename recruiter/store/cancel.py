"""Cancelling a job: the reads and writes of :mod:`recruiter.domain.cancel`, in one transaction.

Invariant: a cancel reads the job (and, if it is locked, its worker's roster entry
and heartbeat) and writes the pure :class:`~recruiter.domain.cancel.CancelPlan`
made from them in the same transaction; the job is deleted from ``scheduled`` only
if it is still as read (else the transaction is aborted and run again), so a
cancel never races the recruiter's lock or a worker's outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from bson import ObjectId
from pymongo import DeleteOne, UpdateOne, WriteConcern
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.synchronous.client_session import ClientSession

from recruiter.domain.cancel import (
    RUNS_ON,
    WAS_ASSIGNED,
    WAS_WAITING,
    CancelPlan,
    CancelResult,
    not_scheduled,
    plan_cancel,
    with_heartbeat,
)
from recruiter.domain.records import Raw
from recruiter.store.dependencies import archived_whys, archived_whys_async, release_dependents
from recruiter.store.dependents_sync import release_dependents_sync
from recruiter.store.edges import drop_edges, drop_edges_sync
from recruiter.store.heartbeats import beats_of, beats_of_async
from recruiter.store.layout import AsyncDb, Collections, Document, SyncCollections, SyncDb

ATTEMPTS = 5
ARCHIVED_NOW = (WAS_WAITING, WAS_ASSIGNED, RUNS_ON)  # the states of a cancel that archived the job
ENTRY_FIELDS = {"assigned_to": 1, "outcome.job": 1, "session": 1, "pid": 1, "hostname": 1}


class _Moved(Exception):
    """The job changed between the transaction's read and its write."""


@dataclass
class CancelWrites:
    """A plan's writes as driver operations, per collection (in the order they are sent)."""

    scheduled: list[DeleteOne] = field(default_factory=list)
    archived: list[UpdateOne] = field(default_factory=list)
    roster: list[UpdateOne] = field(default_factory=list)


def _holder(job: Document) -> str | None:
    """The worker a locked ``job`` names (untrusted): only a string is a roster entry's id. Any
    other value is looked up nowhere: a document shaped like an operator (``{"$ne": null}``) put
    in the entry's filter is read as one, and would fence another worker's entry, or fail the
    cancel ("unknown operator") at every attempt. The job is cancelled as one no worker holds."""
    holder = job.get("locked_by")
    return holder if job.get("locked") and isinstance(holder, str) else None


def _by_id(entry: Document | None) -> dict[object, Raw] | None:
    return {entry["_id"]: entry} if entry is not None else None


def _beat_of(entry: Document | None, beats: dict[object, Document]) -> Document | None:
    """The heartbeat of ``entry`` (its slot in its process's document), if any."""
    return beats.get(entry["_id"]) if entry is not None else None


def cancel_writes(plan: CancelPlan) -> CancelWrites:
    """The operations that carry out ``plan``: the conditional delete, the archive upsert, the fence."""
    writes = CancelWrites()
    if plan.delete is not None:
        writes.scheduled.append(DeleteOne(plan.delete))
    if plan.fence is not None:
        writes.roster.append(UpdateOne(*plan.fence))
    if plan.archived is not None:
        writes.archived.append(UpdateOne({"_id": plan.archived["_id"]}, {"$setOnInsert": plan.archived}, upsert=True))
    return writes


def cancel_job(db: SyncDb, job_id: ObjectId, now: datetime, reason: str | None = None) -> CancelResult:
    """Cancel one job with a synchronous ``Database``; see :mod:`recruiter.domain.cancel`."""
    # A transaction's writes carry no write concern of their own.
    inside = SyncCollections.of(db.with_options(write_concern=WriteConcern()))

    def attempt(session: ClientSession) -> CancelResult:
        job = inside.scheduled.find_one({"_id": job_id}, session=session)
        if job is None:
            return not_scheduled(job_id, inside.archived.find_one({"_id": job_id}, {"why": 1}, session=session))
        entry: Document | None = None
        holder = _holder(job)
        if holder is not None:
            entry = inside.roster.find_one({"_id": holder}, ENTRY_FIELDS, session=session)
            entry = with_heartbeat(entry, _beat_of(entry, beats_of(inside.heartbeats, [holder], _by_id(entry),
                                                                   session=session)))
        plan = plan_cancel(job, entry, now, reason)
        writes = cancel_writes(plan)
        if writes.scheduled and inside.scheduled.bulk_write(writes.scheduled, session=session).deleted_count != 1:
            raise _Moved()  # changed since read: abort, read again
        for coll, ops in ((inside.archived, writes.archived), (inside.roster, writes.roster)):
            if ops:
                coll.bulk_write(ops, ordered=True, session=session)
        return CancelResult(job_id, plan.state, worker=plan.worker)

    for _ in range(ATTEMPTS):
        try:
            with db.client.start_session() as session:
                result = session.with_transaction(attempt, write_concern=WriteConcern("majority"))
        except _Moved:
            continue
        if result.state in ARCHIVED_NOW:  # its dependents, at once (else the leader's sweep)
            c = SyncCollections.of(db)
            drop_edges_sync(c, job_id)  # a wide fan-in's dependent: its edges (recruiter.domain.edges)
            release_dependents_sync(c, archived_whys(c, [job_id]), now)
        return result
    raise RuntimeError(f"job {job_id} kept changing while being cancelled; try again")


async def cancel_job_async(db: AsyncDb, job_id: ObjectId, now: datetime, reason: str | None = None) -> CancelResult:
    """Cancel one job with an asyncio ``AsyncDatabase``; see :mod:`recruiter.domain.cancel`."""
    inside = Collections.of(db.with_options(write_concern=WriteConcern()))

    async def attempt(session: AsyncClientSession) -> CancelResult:
        job = await inside.scheduled.find_one({"_id": job_id}, session=session)
        if job is None:
            return not_scheduled(job_id, await inside.archived.find_one({"_id": job_id}, {"why": 1}, session=session))
        entry: Document | None = None
        holder = _holder(job)
        if holder is not None:
            entry = await inside.roster.find_one({"_id": holder}, ENTRY_FIELDS, session=session)
            entry = with_heartbeat(entry, _beat_of(entry, await beats_of_async(
                inside.heartbeats, [holder], _by_id(entry), session=session)))
        plan = plan_cancel(job, entry, now, reason)
        writes = cancel_writes(plan)
        if writes.scheduled and (
                await inside.scheduled.bulk_write(writes.scheduled, session=session)).deleted_count != 1:
            raise _Moved()  # changed since read: abort, read again
        for coll, ops in ((inside.archived, writes.archived), (inside.roster, writes.roster)):
            if ops:
                await coll.bulk_write(ops, ordered=True, session=session)
        return CancelResult(job_id, plan.state, worker=plan.worker)

    for _ in range(ATTEMPTS):
        try:
            async with db.client.start_session() as session:
                result = await session.with_transaction(attempt, write_concern=WriteConcern("majority"))
        except _Moved:
            continue
        if result.state in ARCHIVED_NOW:  # its dependents, at once (else the leader's sweep)
            c = Collections.of(db)
            await drop_edges(c, job_id)  # a wide fan-in's dependent: its edges (recruiter.domain.edges)
            await release_dependents(c, await archived_whys_async(c, [job_id]), now)
        return result
    raise RuntimeError(f"job {job_id} kept changing while being cancelled; try again")
