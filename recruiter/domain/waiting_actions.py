"""An operator's actions on a waiting job: "retry now" (end its backoff) and delete it.

- **retry now**: a job ``retrying`` (an attempt failed, its next one due later) is made due
  now: ``scheduled_at`` set to now by an update conditional on the job as read
  (unlocked, still ``retrying``, the same ``scheduled_at``). A round that locks the job
  first, or any other change, makes the update match nothing and the job is read again,
  so it never races a round. A job already due changes nothing (:data:`ALREADY_DUE`);
  any other state is refused with what it is.
- **delete**: a job waiting in the queue (``queued``, ``delayed``, ``retrying``) is archived
  with ``why: "deleted"`` (and ``delete_reason``) and removed from ``scheduled``, in one
  transaction whose delete is conditional on the job being unlocked with the attempts
  read (as a cancel's). It does not vanish: every enqueued job reaches ``archived`` exactly
  once, and the record says an operator deleted it. A job a worker holds (``assigned``,
  ``running``) is refused: ``cancel`` halts it. A job already archived changes nothing.

Invariant: pure; the writes planned are conditional on the state read, and a second
action on the same job writes nothing and says why (:data:`ALREADY_DUE`, :data:`ALREADY_ARCHIVED`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bson import ObjectId

from recruiter.domain.outcome import archived_document
from recruiter.domain.records import Query, Raw

DELETED = "deleted"  # the why of a job deleted by an operator

# What happened, as the store reports it.
DUE_NOW = "due-now"  # retry now: it was waiting on its backoff, it is due now
ALREADY_DUE = "already-due"  # retry now: it was due already (a second retry now): nothing written
WAS_DELETED = "deleted"  # delete: archived as deleted
ALREADY_ARCHIVED = "already-archived"
REFUSED = "refused"  # not in a state the action takes: ``detail`` says which
NOT_FOUND = "not-found"


@dataclass(frozen=True)
class ActionResult:
    """What one action did to one job (``state``: one of the constants above)."""

    job_id: ObjectId
    state: str
    detail: str = ""  # refused: why; already-archived: its why; already-due: since when

    @property
    def changed(self) -> bool:
        return self.state in (DUE_NOW, WAS_DELETED)

    def describe(self) -> str:
        return f"{self.job_id}: " + {
            DUE_NOW: "retrying now (its backoff ended)",
            ALREADY_DUE: f"already due{self.detail}: nothing changed",
            WAS_DELETED: "deleted (archived as deleted, it never runs)",
            ALREADY_ARCHIVED: f"already archived ({self.detail}): nothing changed",
            REFUSED: f"refused: {self.detail}",
            NOT_FOUND: "no such job",
        }[self.state]


@dataclass(frozen=True)
class Write:
    """A conditional update (retry now) or a conditional delete plus the archived document (delete)."""

    filter: Query
    update: Query | None = None
    archived: Query | None = None


def holder(job: Raw) -> str:
    return f"worker {job.get('locked_by')} holds it (assigned or running)"


def plan_retry_now(job: Raw, now: datetime) -> Write | ActionResult:
    """The conditional update that makes a ``retrying`` job (a ``scheduled`` document as read) due now,
    or the result when there is nothing to write."""
    job_id = job["_id"]
    assert isinstance(job_id, ObjectId)
    if job.get("locked") is True:
        return ActionResult(job_id, REFUSED, f"{holder(job)}; retry now takes a job waiting on its backoff")
    due = job.get("scheduled_at")
    if job.get("status") != "retrying":
        state = "delayed" if isinstance(due, datetime) and due > now else "queued"
        return ActionResult(job_id, REFUSED, f"it is {state}, not waiting on a backoff after a failed attempt")
    if not isinstance(due, datetime) or due <= now:
        since = f" (since {due.isoformat().replace('+00:00', 'Z')})" if isinstance(due, datetime) else ""
        return ActionResult(job_id, ALREADY_DUE, since)
    return Write({"_id": job_id, "locked": False, "status": "retrying", "scheduled_at": due},
                 {"$set": {"scheduled_at": now}})


def plan_delete(job: Raw, now: datetime, reason: str | None) -> Write | ActionResult:
    """The conditional delete and the archived document that delete a waiting job as read,
    or the refusal of a job a worker holds."""
    job_id = job["_id"]
    assert isinstance(job_id, ObjectId)
    if job.get("locked") is True:
        return ActionResult(job_id, REFUSED, f"{holder(job)}; delete takes only a waiting job "
                                             "(queued, delayed, retrying): `cancel` halts a running one")
    archived = archived_document(job, {"decision": {"archive": DELETED}, "executed": True}, now)
    archived["delete_reason"] = reason or "deleted by an operator"
    return Write({"_id": job_id, "locked": False, "attempts": job.get("attempts", 0)}, archived=archived)


def not_waiting(job_id: ObjectId, archived: Raw | None) -> ActionResult:
    """The result for a job no longer in ``scheduled``: archived (and why), or never there."""
    if archived is None:
        return ActionResult(job_id, NOT_FOUND)
    why = archived.get("why")
    return ActionResult(job_id, ALREADY_ARCHIVED, why if isinstance(why, str) else "?")
