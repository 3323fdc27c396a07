"""Cancelling a job: archived with ``why: "cancelled"``, never run (again).

A cancel is one transaction that reads the job and, if it is locked, its
worker's roster entry, then writes everything at once:

- a job waiting in the queue (``queued`` or ``retrying``) is archived and
  deleted from ``scheduled``; the delete is conditional on it still being
  unlocked with the attempts read, so it cannot race the recruiter's lock (one
  of the two transactions meets a write conflict and is run again);
- a job assigned to a worker is archived with a ``cancelled`` execution and
  deleted, and the worker's assignment (``assigned_to.<id>``, ``job``) is
  removed. That is the fence of :mod:`recruiter.heartbeat`: the worker learns
  it on its next write (a heartbeat at the latest), halts the job (an async job
  is cancelled, a job in a child process killed; a thread runs to its end) and
  discards its outcome, then makes itself available again (so does a worker
  that had not started the job yet, when it next reads its entry; one that
  received the job just before the cancel may start it and halts it at its
  next heartbeat, as a running one);
- a job whose worker has already written its outcome is finishing: nothing is
  changed and the recruiter applies the outcome (which may be a retry: cancel
  it again once it is back in the queue).

Nothing here touches a job a worker could still record, except through that
fence, so a cancelled job is archived exactly once and its outcome, if the
worker gets one, is refused. :func:`plan_cancel` holds the decision as a pure
function; :func:`cancel_job` and :func:`cancel_job_async` only run it in a
transaction (the synchronous and the asyncio client).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bson import ObjectId
from pymongo import DeleteOne, UpdateOne, WriteConcern

from recruiter.domain.outcome import Execution, archived_document

CANCELLED = "cancelled"

# What happened, as cancel_job reports it.
WAS_WAITING = "cancelled"  # it was in the queue: archived, it never runs again
WAS_ASSIGNED = "halted"  # a worker had it: archived, the worker halts it
FINISHING = "finishing"  # its worker already recorded an outcome: left alone
ALREADY_ARCHIVED = "already-archived"
NOT_FOUND = "not-found"


@dataclass(frozen=True)
class CancelResult:
    job_id: ObjectId
    state: str  # one of the constants above
    why: str | None = None  # for already-archived: why it was archived
    worker: str | None = None  # for halted and finishing: the worker that has it

    def describe(self) -> str:
        return {
            WAS_WAITING: f"{self.job_id}: cancelled (it was waiting in the queue)",
            WAS_ASSIGNED: f"{self.job_id}: cancelled; worker {self.worker} halts it at its next heartbeat",
            FINISHING: f"{self.job_id}: not cancelled, worker {self.worker} has already recorded its outcome",
            ALREADY_ARCHIVED: f"{self.job_id}: not cancelled, already archived ({self.why})",
            NOT_FOUND: f"{self.job_id}: no such job",
        }[self.state]


@dataclass
class CancelPlan:
    """The writes of one cancel (pure result of :func:`plan_cancel`)."""

    state: str
    worker: str | None = None
    scheduled: list[Any] = field(default_factory=list)
    archived: list[Any] = field(default_factory=list)
    roster: list[Any] = field(default_factory=list)


def parse_job_id(text: str) -> ObjectId:
    """A job id as printed by enqueue and stored as ``_id``; ValueError in one line otherwise."""
    if not ObjectId.is_valid(text):
        raise ValueError(f"{text!r} is not a job id (24 hexadecimal digits)")
    return ObjectId(text)


def plan_cancel(job: dict[str, Any], entry: dict[str, Any] | None, now: datetime,
                reason: str | None) -> CancelPlan:
    """What cancelling ``job`` writes, given its worker's roster ``entry`` if it is locked."""
    job_id = job["_id"]
    outcome: dict[str, Any] = {"decision": {"archive": CANCELLED}, "executed": True}
    if not job.get("locked"):
        plan = CancelPlan(WAS_WAITING, scheduled=[
            DeleteOne({"_id": job_id, "locked": False, "attempts": job.get("attempts", 0)})])
    else:
        worker = str(job.get("locked_by"))
        entry = entry or {}
        if (entry.get("outcome") or {}).get("job") == job_id:
            return CancelPlan(FINISHING, worker=worker)
        running = entry.get("working_on") == job_id
        outcome["execution"] = Execution.of(
            job, "cancelled", pid=entry.get("pid"), hostname=entry.get("hostname"),
            started_at=entry.get("working_since") if running else None, ended_at=now,
            message=reason or "cancelled",
        ).to_document()
        plan = CancelPlan(WAS_ASSIGNED, worker=worker, scheduled=[
            DeleteOne({"_id": job_id, "lock_token": job.get("lock_token")})])
        if (entry.get("assigned_to") or {}).get(worker) == job_id:
            # ``job: null`` (rather than removed) is what wakes an idle worker's change
            # stream (recruiter.wakeup), should it not have started the job yet.
            plan.roster.append(UpdateOne({"_id": worker, f"assigned_to.{worker}": job_id},
                                         {"$unset": {"assigned_to": ""}, "$set": {"job": None}}))
    archived = archived_document(job, outcome, now)
    if reason:
        archived["cancel_reason"] = reason
    plan.archived.append(UpdateOne({"_id": job_id}, {"$setOnInsert": archived}, upsert=True))
    return plan


ATTEMPTS = 5


class _Moved(Exception):
    """The job changed between the transaction's read and its write."""


ENTRY_FIELDS = {"assigned_to": 1, "outcome.job": 1, "session": 1, "pid": 1, "hostname": 1}
BEAT_FIELDS = {"session": 1, "working_on": 1, "working_since": 1}


def with_heartbeat(entry: dict[str, Any] | None, beat: dict[str, Any] | None) -> dict[str, Any] | None:
    """The roster ``entry`` with what its own heartbeat says it runs (``working_on``, ``working_since``)."""
    if entry is None or beat is None or beat.get("session") != entry.get("session"):
        return entry
    return {**entry, "working_on": beat.get("working_on"), "working_since": beat.get("working_since")}


def _result(job_id: ObjectId, archived: dict[str, Any] | None) -> CancelResult:
    if archived is not None:
        return CancelResult(job_id, ALREADY_ARCHIVED, why=archived.get("why"))
    return CancelResult(job_id, NOT_FOUND)


def cancel_job(db: Any, job_id: ObjectId, now: datetime, reason: str | None = None) -> CancelResult:
    """Cancel one job with a synchronous ``Database``; see the module doc."""
    inside = db.with_options(write_concern=WriteConcern())  # a transaction's writes carry none of their own

    def attempt(session: Any) -> CancelResult:
        job = inside.scheduled.find_one({"_id": job_id}, session=session)
        if job is None:
            return _result(job_id, inside.archived.find_one({"_id": job_id}, {"why": 1}, session=session))
        entry = None
        if job.get("locked"):
            entry = with_heartbeat(
                inside.roster.find_one({"_id": job.get("locked_by")}, ENTRY_FIELDS, session=session),
                inside.heartbeats.find_one({"_id": job.get("locked_by")}, BEAT_FIELDS, session=session))
        plan = plan_cancel(job, entry, now, reason)
        if plan.scheduled and (inside.scheduled.bulk_write(plan.scheduled, session=session)).deleted_count != 1:
            raise _Moved()  # changed since read: abort, read again
        for coll, ops in ((inside.archived, plan.archived), (inside.roster, plan.roster)):
            if ops:
                coll.bulk_write(ops, ordered=True, session=session)
        return CancelResult(job_id, plan.state, worker=plan.worker)

    for _ in range(ATTEMPTS):
        try:
            with db.client.start_session() as session:
                result: CancelResult = session.with_transaction(attempt, write_concern=WriteConcern("majority"))
            return result
        except _Moved:
            continue
    raise RuntimeError(f"job {job_id} kept changing while being cancelled; try again")


async def cancel_job_async(db: Any, job_id: ObjectId, now: datetime, reason: str | None = None) -> CancelResult:
    """Cancel one job with an asyncio ``AsyncDatabase``; see the module doc."""
    inside = db.with_options(write_concern=WriteConcern())

    async def attempt(session: Any) -> CancelResult:
        job = await inside.scheduled.find_one({"_id": job_id}, session=session)
        if job is None:
            return _result(job_id, await inside.archived.find_one({"_id": job_id}, {"why": 1}, session=session))
        entry = None
        if job.get("locked"):
            entry = with_heartbeat(
                await inside.roster.find_one({"_id": job.get("locked_by")}, ENTRY_FIELDS, session=session),
                await inside.heartbeats.find_one({"_id": job.get("locked_by")}, BEAT_FIELDS, session=session))
        plan = plan_cancel(job, entry, now, reason)
        if plan.scheduled and (await inside.scheduled.bulk_write(plan.scheduled, session=session)).deleted_count != 1:
            raise _Moved()  # changed since read: abort, read again
        for coll, ops in ((inside.archived, plan.archived), (inside.roster, plan.roster)):
            if ops:
                await coll.bulk_write(ops, ordered=True, session=session)
        return CancelResult(job_id, plan.state, worker=plan.worker)

    for _ in range(ATTEMPTS):
        try:
            async with db.client.start_session() as session:
                result: CancelResult = await session.with_transaction(attempt, write_concern=WriteConcern("majority"))
            return result
        except _Moved:
            continue
    raise RuntimeError(f"job {job_id} kept changing while being cancelled; try again")


__all__ = ["CANCELLED", "CancelResult", "cancel_job", "cancel_job_async", "parse_job_id", "plan_cancel"]
