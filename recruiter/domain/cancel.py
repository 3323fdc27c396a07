"""Cancelling a job: archived with ``why: "cancelled"``, never run (again).

A cancel is one transaction that reads the job and, if it is locked, its
worker's roster entry, then writes everything at once:

- a job waiting in the queue (``queued`` or ``retrying``) is archived and
  deleted from ``scheduled``; the delete is conditional on it still being
  unlocked with the attempts read, so it cannot race the recruiter's lock (one
  of the two transactions meets a write conflict and is run again);
- a job assigned to a worker is archived with a ``cancelled`` execution and
  deleted, and the worker's assignment (``assigned_to.<id>``, ``job``) is
  removed. That is the fence of :mod:`recruiter.processes.worker.heartbeat`: the worker learns
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
function over the documents read; :func:`recruiter.store.cancel.cancel_job` and
``cancel_job_async`` read them and write the plan in one transaction (the
synchronous and the asyncio client).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bson import ObjectId

from recruiter.domain.outcome import Execution, archived_document
from recruiter.domain.records import Query, Raw

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
    """The writes of one cancel (pure result of :func:`plan_cancel`), as plain documents.

    :func:`recruiter.store.cancel_job` sends them in one transaction: ``delete``
    removes the job from ``scheduled`` only if it is still as read, ``archived`` is
    inserted unless the job is already archived, and ``fence`` (a filter and an
    update of the worker's roster entry) takes the assignment away.
    """

    state: str
    worker: str | None = None
    delete: Query | None = None
    archived: Query | None = None
    fence: tuple[Query, Query] | None = None


def parse_job_id(text: str) -> ObjectId:
    """A job id as printed by enqueue and stored as ``_id``; ValueError in one line otherwise."""
    if not ObjectId.is_valid(text):
        raise ValueError(f"{text!r} is not a job id (24 hexadecimal digits)")
    return ObjectId(text)


def plan_cancel(job: dict[str, Any], entry: dict[str, Any] | None, now: datetime,
                reason: str | None) -> CancelPlan:
    """What cancelling ``job`` writes, given its worker's roster ``entry`` if it is locked."""
    job_id = job["_id"]
    outcome: dict[str, object] = {"decision": {"archive": CANCELLED}, "executed": True}
    if not job.get("locked"):
        plan = CancelPlan(WAS_WAITING, delete={"_id": job_id, "locked": False, "attempts": job.get("attempts", 0)})
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
        plan = CancelPlan(WAS_ASSIGNED, worker=worker, delete={"_id": job_id, "lock_token": job.get("lock_token")})
        if (entry.get("assigned_to") or {}).get(worker) == job_id:
            # ``job: null`` (rather than removed) is what wakes an idle worker's change
            # stream (recruiter.store.wakeup), should it not have started the job yet.
            plan.fence = ({"_id": worker, f"assigned_to.{worker}": job_id},
                          {"$unset": {"assigned_to": ""}, "$set": {"job": None}})
    archived = archived_document(job, outcome, now)
    if reason:
        archived["cancel_reason"] = reason
    plan.archived = archived
    return plan


def with_heartbeat(entry: Raw | None, beat: Raw | None) -> dict[str, Any] | None:
    """The roster ``entry`` with what its own heartbeat says it runs (``working_on``, ``working_since``)."""
    if entry is None:
        return None
    if beat is None or beat.get("session") != entry.get("session"):
        return dict(entry)
    return {**entry, "working_on": beat.get("working_on"), "working_since": beat.get("working_since")}


def not_scheduled(job_id: ObjectId, archived: Raw | None) -> CancelResult:
    """The result for a job no longer in ``scheduled``: archived (and why), or never there."""
    if archived is not None:
        why = archived.get("why")
        return CancelResult(job_id, ALREADY_ARCHIVED, why=why if isinstance(why, str) else str(why))
    return CancelResult(job_id, NOT_FOUND)


__all__ = ["CANCELLED", "CancelPlan", "CancelResult", "not_scheduled", "parse_job_id", "plan_cancel", "with_heartbeat"]
