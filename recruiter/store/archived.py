"""The ``archived`` collection: the history of every finished job.

Invariant: A job is archived by an idempotent upsert keyed by ``_id`` in the same
transaction that deletes it from ``scheduled``; nothing else writes here.
"""

from __future__ import annotations

from recruiter.store.layout import AsyncColl, Document

# -- the worker: its own entry, its job, its heartbeat (processes/worker) --------------

async def read_last_execution(archived: AsyncColl, job_id: object) -> Document | None:
    """The archived job's lock token (none) and last execution."""
    return await archived.find_one({"_id": job_id}, {"lock_token": 1, "last_execution": 1})



# -- the recruiter and the cleaner (processes/recruiter.py, processes/cleaner.py) ------


# -- liveness, quarantine and the fairness cursor (moved from domain/) -----------------


# -- the producer and the operator's commands (producer/, cli/) ------------------------
