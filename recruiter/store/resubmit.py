"""Resubmitting a job: the reads and the one conditional write of :mod:`recruiter.domain.resubmit`.

Invariant: the write is conditional on the job being as read (unlocked, or
under the lock token read); when it does not match, the job is read again, so
a resubmit never races the recruiter's lock or the application of an outcome.
An archived job is never written.
"""

from __future__ import annotations

from datetime import datetime

from bson import ObjectId

from recruiter.domain.resubmit import Resubmitted, plan_resubmit, refusal
from recruiter.store.layout import Collections, SyncCollections

ATTEMPTS = 10


class NoSuchJob(LookupError):
    """Neither collection holds the job."""


def resubmit_job(c: SyncCollections, job_id: ObjectId, at: datetime | None, now: datetime) -> Resubmitted:
    """Resubmit one job (sync client); :class:`~recruiter.domain.resubmit.ResubmitRefused` for an
    archived one, :class:`NoSuchJob` for an unknown one."""
    for _ in range(ATTEMPTS):
        job = c.scheduled.find_one({"_id": job_id}, {"locked": 1, "lock_token": 1, "after.held": 1})
        if job is None:
            archived = c.archived.find_one({"_id": job_id}, {"why": 1})
            if archived is None:
                raise NoSuchJob(job_id)
            raise refusal(job_id, archived)
        write = plan_resubmit(job, at, now)
        if c.scheduled.update_one(write.filter, write.update).matched_count:
            return write.result
    raise RuntimeError(f"job {job_id} kept changing while being resubmitted; try again")


async def resubmit_job_async(c: Collections, job_id: ObjectId, at: datetime | None, now: datetime) -> Resubmitted:
    """:func:`resubmit_job` with the asyncio client."""
    for _ in range(ATTEMPTS):
        job = await c.scheduled.find_one({"_id": job_id}, {"locked": 1, "lock_token": 1, "after.held": 1})
        if job is None:
            archived = await c.archived.find_one({"_id": job_id}, {"why": 1})
            if archived is None:
                raise NoSuchJob(job_id)
            raise refusal(job_id, archived)
        write = plan_resubmit(job, at, now)
        if (await c.scheduled.update_one(write.filter, write.update)).matched_count:
            return write.result
    raise RuntimeError(f"job {job_id} kept changing while being resubmitted; try again")
