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
- until then the job still holds its slot: the same write puts ``halting``
  (the job's ``_id``, ``group``, ``tenant``) in the worker's entry, and flow
  control counts it as running (``max_running``,
  :func:`recruiter.store.halting.read_halting_in`) until the worker's "available
  again" write removes it, which it makes only once the job has stopped (a
  thread returned, a task cancelled, a child killed), or the cleaner removes
  the entry of a dead worker. That write also records in the archived job when
  the job really ended (``halt.ended_at``, :func:`recruiter.store.halting.halt_ended`);
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

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bson import ObjectId

from recruiter.domain.outcome import Execution, archived_document
from recruiter.domain.records import Query, Raw

CANCELLED = "cancelled"
# In the roster entry of the worker that had a cancelled job: that job, counted as running by flow
# control until the worker's "available again" write removes it (recruiter.store.roster.release_entry).
HALTING = "halting"
# In the archived copy of a job cancelled while assigned: the worker, whether it ran the job in a
# thread, when the cancel asked for the halt, and when the worker reported the job stopped.
HALT = "halt"

# What happened, as cancel_job reports it.
WAS_WAITING = "cancelled"  # it was in the queue: archived, it never runs again
WAS_ASSIGNED = "halted"  # a worker had it (not shown running in a thread): archived, the worker halts it
RUNS_ON = "running-on"  # its worker runs it in a thread, which cannot be stopped: archived, it runs to its end
FINISHING = "finishing"  # its worker already recorded an outcome: left alone
ALREADY_ARCHIVED = "already-archived"
NOT_FOUND = "not-found"


@dataclass(frozen=True)
class CancelResult:
    job_id: ObjectId
    state: str  # one of the constants above
    why: str | None = None  # for already-archived: why it was archived
    worker: str | None = None  # for halted, running-on and finishing: the worker that has it

    def describe(self) -> str:
        return {
            WAS_WAITING: f"{self.job_id}: cancelled (it was waiting in the queue)",
            WAS_ASSIGNED: f"{self.job_id}: cancelled; worker {self.worker} halts it at its next heartbeat "
                          "(its slot is held until it has stopped)",
            RUNS_ON: f"{self.job_id}: cancelled, still running in a thread on worker {self.worker} until it "
                     "returns (a thread cannot be stopped); its slot is held until then, and its outcome "
                     "is discarded",
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
    halt: Query | None = None
    if not job.get("locked"):
        plan = CancelPlan(WAS_WAITING, delete={"_id": job_id, "locked": False, "attempts": job.get("attempts", 0)})
    else:
        entry = entry or {}
        if (entry.get("outcome") or {}).get("job") == job_id:
            return CancelPlan(FINISHING, worker=str(job.get("locked_by")))
        plan, halt = _plan_assigned(job, entry, now, reason, outcome)
    archived = archived_document(job, outcome, now)
    if reason:
        archived["cancel_reason"] = reason
    if halt is not None:
        archived[HALT] = halt
    plan.archived = archived
    return plan


def _plan_assigned(job: dict[str, Any], entry: dict[str, Any], now: datetime, reason: str | None,
                   outcome: dict[str, object]) -> tuple[CancelPlan, Query | None]:
    """The plan for a job its worker has not finished (``outcome`` gets its ``cancelled``
    execution), and the ``HALT`` record of the archived copy when the worker's entry still holds it."""
    job_id, worker = job["_id"], str(job.get("locked_by"))
    running = entry.get("working_on") == job_id
    in_thread = running and entry.get("working_in_thread") is True
    outcome["execution"] = Execution.of(
        job, "cancelled", pid=entry.get("pid"), hostname=entry.get("hostname"),
        started_at=entry.get("working_since") if running else None, ended_at=now,
        message=reason or "cancelled",
    ).to_document()
    plan = CancelPlan(RUNS_ON if in_thread else WAS_ASSIGNED, worker=worker,
                      # $eq: the token read (untrusted) compared as a value, never read as operators.
                      delete={"_id": job_id, "lock_token": {"$eq": job.get("lock_token")}})
    if (entry.get("assigned_to") or {}).get(worker) != job_id:
        return plan, None
    # ``job: null`` (rather than removed) is what wakes an idle worker's change stream
    # (recruiter.store.wakeup), should it not have started the job yet; ``halting`` keeps
    # the job counted by flow control until the worker has stopped it.
    plan.fence = ({"_id": worker, f"assigned_to.{worker}": job_id},
                  {"$unset": {"assigned_to": ""}, "$set": {"job": None, HALTING: halting(job, now)}})
    return plan, {"worker": worker, "session": entry.get("session"), "in_thread": in_thread,
                  "requested_at": now, "ended_at": None}


def halting(job: dict[str, Any], now: datetime) -> Query:
    """What a cancel leaves in the entry of the worker that has the job (``HALTING``): the job
    and the names flow control counts it under, until the worker reports it stopped."""
    return {"job": job["_id"], "group": job.get("group"), "tenant": job.get("tenant"), "since": now}


def halt_line(doc: Raw, when: Callable[[datetime], str] = datetime.isoformat) -> str | None:
    """What the archived job ``doc`` says of the end of a cancelled job its worker was running
    (``HALT``), in one line; None when it has no such record (pure, ``doc`` untrusted)."""
    halt = doc.get(HALT)
    if not isinstance(halt, dict):
        return None
    worker, ended = str(halt.get("worker"))[:200], halt.get("ended_at")
    how = "in its thread" if halt.get("in_thread") is True else "halted"
    if isinstance(ended, datetime) and halt.get("worker_gone") is True:
        return f"ended with its worker {worker}, removed as dead at {when(ended)}; its slot was held until then"
    if isinstance(ended, datetime):
        return f"stopped at {when(ended)} on worker {worker} ({how}); its slot was held until then"
    if halt.get("in_thread") is True:
        return f"still running in a thread on worker {worker} until it returns (its slot is held until then)"
    return f"being halted on worker {worker} (its slot is held until it has stopped)"


def with_heartbeat(entry: Raw | None, beat: Raw | None) -> dict[str, Any] | None:
    """The roster ``entry`` with what its own heartbeat says it runs (``working_on``, ``working_since``,
    ``working_in_thread``)."""
    if entry is None:
        return None
    if beat is None or beat.get("session") != entry.get("session"):
        return dict(entry)
    return {**entry, "working_on": beat.get("working_on"), "working_since": beat.get("working_since"),
            "working_in_thread": beat.get("working_in_thread")}


def not_scheduled(job_id: ObjectId, archived: Raw | None) -> CancelResult:
    """The result for a job no longer in ``scheduled``: archived (and why), or never there."""
    if archived is not None:
        why = archived.get("why")
        return CancelResult(job_id, ALREADY_ARCHIVED, why=why if isinstance(why, str) else str(why))
    return CancelResult(job_id, NOT_FOUND)


__all__ = ["CANCELLED", "HALT", "HALTING", "RUNS_ON", "CancelPlan", "CancelResult", "halt_line", "halting",
           "not_scheduled", "parse_job_id", "plan_cancel", "with_heartbeat"]
