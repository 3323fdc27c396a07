"""Enqueueing unique jobs: a write the key may refuse, and what a refusal returns.

See :mod:`recruiter.domain.unique`. On a conflict, ``on_conflict="existing"``
returns the handle of the job that holds the key, with ``existed`` set;
``"resubmit"`` first resubmits that job to the new job's time
(:mod:`recruiter.domain.resubmit`): a waiting job is rescheduled, a running one
runs once more after its attempt; one that has finished (archived, the key kept
by a period or forever) is enqueued again: the new job takes over the key's
reservation, on the condition that it still names the finished job.

Invariant: a conflict writes nothing but the resubmit asked for; a key whose
holder ends between the refusal and the read is tried again, a bounded number
of times.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from bson import ObjectId

from recruiter.domain.following import JobView
from recruiter.domain.job import JobRefused
from recruiter.domain.resubmit import ResubmitRefused
from recruiter.domain.unique import OnConflict, Unique
from recruiter.producer.handles import AsyncJobHandle, JobHandle, JobNotFound
from recruiter.store.layout import Document
from recruiter.store.unique import Held, insert_unique, insert_unique_async

if TYPE_CHECKING:
    from recruiter.producer.client import AsyncRecruiter, Recruiter

ATTEMPTS = 10


def _gone(job_id: ObjectId) -> JobView:
    """The view of a key's job that no collection holds any more (archived, then deleted by retention)."""
    return JobView(job_id, "archived", why="unknown", reason="the job holding this unique key was deleted")


def _take_over(spec: Unique, job_id: ObjectId) -> dict[str, object] | None:
    """The reservation's take-over condition once its job has finished (None: the key is free)."""
    return {"job": job_id} if spec.reserves else None


def _malformed(spec: Unique, problem: str) -> JobRefused:
    return JobRefused(f"unique key {spec.key!r}: its reservation in unique_keys is malformed ({problem}), so "
                      "who holds the key is unknown; nothing was written (if no job holds it, remove the "
                      f"reservation: db.unique_keys.deleteOne({{_id: {spec.key!r}}}))")


def _exhausted(spec: Unique) -> RuntimeError:
    return RuntimeError(f"unique key {spec.key!r} kept changing hands while enqueueing; try again")


def existing(rec: Recruiter, job_id: ObjectId) -> JobHandle:
    try:
        handle = rec.job(job_id)
    except JobNotFound:
        handle = JobHandle(job_id, _gone(job_id), rec)
    handle.existed = True
    return handle


def enqueue_unique(rec: Recruiter, doc: Document, spec: Unique, fresh: Callable[[Document], JobHandle]) -> JobHandle:
    """Write the unique job ``doc`` (sync); see the module doc."""
    take_over = None
    for _ in range(ATTEMPTS):
        held: Held | None = insert_unique(rec.db, doc, spec, rec.clock.now(), take_over)
        if held is None:
            return fresh(doc)
        take_over = None
        if held.problem is not None:
            raise _malformed(spec, held.problem)
        if held.job is None:
            continue
        if spec.on_conflict is OnConflict.EXISTING:
            return existing(rec, held.job)
        try:
            rec.resubmit(held.job, at=doc["scheduled_at"])
        except (ResubmitRefused, JobNotFound):
            take_over = _take_over(spec, held.job)
            continue
        return existing(rec, held.job)
    raise _exhausted(spec)


async def existing_async(rec: AsyncRecruiter, job_id: ObjectId) -> AsyncJobHandle:
    try:
        handle = await rec.job(job_id)
    except JobNotFound:
        handle = AsyncJobHandle(job_id, _gone(job_id), rec)
    handle.existed = True
    return handle


async def enqueue_unique_async(rec: AsyncRecruiter, doc: Document, spec: Unique,
                               fresh: Callable[[Document], AsyncJobHandle]) -> AsyncJobHandle:
    """:func:`enqueue_unique` for the asyncio client."""
    take_over = None
    for _ in range(ATTEMPTS):
        held = await insert_unique_async(rec.db, doc, spec, rec.clock.now(), take_over)
        if held is None:
            return fresh(doc)
        take_over = None
        if held.problem is not None:
            raise _malformed(spec, held.problem)
        if held.job is None:
            continue
        if spec.on_conflict is OnConflict.EXISTING:
            return await existing_async(rec, held.job)
        try:
            await rec.resubmit(held.job, at=doc["scheduled_at"])
        except (ResubmitRefused, JobNotFound):
            take_over = _take_over(spec, held.job)
            continue
        return await existing_async(rec, held.job)
    raise _exhausted(spec)

