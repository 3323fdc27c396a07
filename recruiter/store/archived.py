"""The ``archived`` collection: the history of every finished job.

Invariant: A job is archived by an idempotent upsert keyed by ``_id`` in the same
transaction that deletes it from ``scheduled``; nothing else writes here.
"""

from __future__ import annotations

from recruiter.store.layout import SyncColl

# -- the worker: its own entry, its job, its heartbeat (processes/worker) --------------


# -- the recruiter and the cleaner (processes/recruiter.py, processes/cleaner.py) ------


# -- liveness, quarantine and the fairness cursor (moved from domain/) -----------------


# -- the producer and the operator's commands (producer/, cli/) ------------------------


def count_by_why(archived: SyncColl) -> dict[object, int]:
    """How many archived jobs there are for each ``why`` (``recruiter status``)."""
    return {d["_id"]: d["n"] for d in archived.aggregate([{"$group": {"_id": "$why", "n": {"$sum": 1}}}])}
