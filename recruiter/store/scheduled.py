"""The ``scheduled`` collection: jobs waiting, locked and assigned.

Invariant: Every lock-token filter (a write that must find the job still held by the same
assignment) is written once, here.
"""

from __future__ import annotations

from recruiter.store.layout import AsyncColl, Document, SyncColl

# -- the worker: its own entry, its job, its heartbeat (processes/worker) --------------


# -- the recruiter and the cleaner (processes/recruiter.py, processes/cleaner.py) ------


# -- liveness, quarantine and the fairness cursor (moved from domain/) -----------------


# -- the producer and the operator's commands (producer/, cli/) ------------------------


def insert_job(scheduled: SyncColl, doc: Document) -> None:
    """Store one job document built by the producer."""
    scheduled.insert_one(doc)


def insert_jobs(scheduled: SyncColl, docs: list[Document]) -> None:
    """Store many job documents in one round trip, in order (the producer's batch)."""
    scheduled.insert_many(docs, ordered=True)


async def insert_job_async(scheduled: AsyncColl, doc: Document) -> None:
    """Store one job document built by the producer (asyncio client)."""
    await scheduled.insert_one(doc)


async def insert_jobs_async(scheduled: AsyncColl, docs: list[Document]) -> None:
    """Store many job documents in one round trip, in order (asyncio client)."""
    await scheduled.insert_many(docs, ordered=True)


def count_by_status(scheduled: SyncColl) -> dict[object, int]:
    """How many jobs are in each ``status`` (``recruiter status``)."""
    return {d["_id"]: d["n"] for d in scheduled.aggregate([{"$group": {"_id": "$status", "n": {"$sum": 1}}}])}
