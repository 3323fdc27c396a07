"""The reads and conditional writes of :mod:`recruiter.domain.waiting_actions`: retry now, delete.

Invariant: each write is conditional on the job as read; a write that matches nothing
(a round locked the job, an outcome was applied, another operator acted) reads the job
again, so neither races a round. A delete removes the job from ``scheduled`` and
archives it in one transaction (an ``$setOnInsert`` upsert, as a cancel): it is
archived exactly once.
"""

from __future__ import annotations

from datetime import datetime

from bson import ObjectId
from pymongo import WriteConcern
from pymongo.synchronous.client_session import ClientSession

from recruiter.domain.waiting_actions import (
    DELETED,
    DUE_NOW,
    WAS_DELETED,
    ActionResult,
    Write,
    not_waiting,
    plan_delete,
    plan_retry_now,
)
from recruiter.store.dependents_sync import release_dependents_sync
from recruiter.store.edges import drop_edges_sync
from recruiter.store.layout import SyncCollections, SyncDb

ATTEMPTS = 10
READ = {"locked": 1, "locked_by": 1, "status": 1, "scheduled_at": 1}


class _Moved(Exception):
    """The job changed between the transaction's read and its write."""


def retry_now(db: SyncDb, job_id: ObjectId, now: datetime) -> ActionResult:
    """Make a job waiting on its backoff due ``now``; see :mod:`recruiter.domain.waiting_actions`."""
    c = SyncCollections.of(db)
    for _ in range(ATTEMPTS):
        job = c.scheduled.find_one({"_id": job_id}, READ)
        if job is None:
            return not_waiting(job_id, c.archived.find_one({"_id": job_id}, {"why": 1}))
        plan = plan_retry_now(job, now)
        if isinstance(plan, ActionResult):
            return plan
        assert plan.update is not None
        if c.scheduled.update_one(plan.filter, plan.update).matched_count:
            return ActionResult(job_id, DUE_NOW)
    raise RuntimeError(f"job {job_id} kept changing while being made due; try again")


def delete_waiting(db: SyncDb, job_id: ObjectId, now: datetime, reason: str | None = None) -> ActionResult:
    """Archive a waiting job as ``deleted`` and remove it from the queue, or refuse one a worker holds."""
    inside = SyncCollections.of(db.with_options(write_concern=WriteConcern()))

    def attempt(session: ClientSession) -> ActionResult:
        job = inside.scheduled.find_one({"_id": job_id}, session=session)
        if job is None:
            return not_waiting(job_id, inside.archived.find_one({"_id": job_id}, {"why": 1}, session=session))
        plan = plan_delete(job, now, reason)
        if isinstance(plan, ActionResult):
            return plan
        _write(inside, plan, session)
        return ActionResult(job_id, WAS_DELETED)

    for _ in range(ATTEMPTS):
        try:
            with db.client.start_session() as session:
                result = session.with_transaction(attempt, write_concern=WriteConcern("majority"))
        except _Moved:
            continue
        if result.state == WAS_DELETED:  # its dependents, at once (else the leader's sweep)
            drop_edges_sync(SyncCollections.of(db), job_id)  # a wide fan-in's dependent: its edges
            release_dependents_sync(SyncCollections.of(db), {job_id: DELETED}, now)
        return result
    raise RuntimeError(f"job {job_id} kept changing while being deleted; try again")


def _write(inside: SyncCollections, plan: Write, session: ClientSession) -> None:
    if inside.scheduled.delete_one(plan.filter, session=session).deleted_count != 1:
        raise _Moved()  # changed since read: abort, read again
    assert plan.archived is not None
    inside.archived.update_one({"_id": plan.archived["_id"]}, {"$setOnInsert": plan.archived}, upsert=True,
                               session=session)
