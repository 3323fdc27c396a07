"""The ``scheduled`` collection: jobs waiting, locked and assigned.

Invariant: Every lock-token filter (a write that must find the job still held by the same
assignment) is written once, here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pymongo import UpdateOne

from recruiter.domain.records import Query
from recruiter.store.layout import AsyncColl, Document

# -- the worker: its own entry, its job, its heartbeat (processes/worker) --------------

async def read_job(scheduled: AsyncColl, job_id: object) -> Document | None:
    return await scheduled.find_one({"_id": job_id})


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


APPLIED_FIELDS = {"lock_token": 1, "last_execution": 1}


async def read_lock_and_last_execution(scheduled: AsyncColl, job_id: object) -> Document | None:
    """The job's lock token and last execution: what tells whether an outcome was applied."""
    return await scheduled.find_one({"_id": job_id}, APPLIED_FIELDS)



# -- the recruiter and the cleaner (processes/recruiter.py, processes/cleaner.py) ------


# -- liveness, quarantine and the fairness cursor (moved from domain/) -----------------


# -- the producer and the operator's commands (producer/, cli/) ------------------------
