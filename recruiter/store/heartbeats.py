"""The ``heartbeats`` collection: when each worker slot was last seen, and what it runs.

Invariant: A slot writes only its own heartbeat, fenced by its ``session``; the recruiter
and the cleaner only read heartbeats and delete those of entries they removed.
"""

from __future__ import annotations

from recruiter.domain.records import Query
from recruiter.store.layout import Document, SyncColl

# -- the worker: its own entry, its job, its heartbeat (processes/worker) --------------


# -- the recruiter and the cleaner (processes/recruiter.py, processes/cleaner.py) ------


# -- liveness, quarantine and the fairness cursor (moved from domain/) -----------------


# -- the producer and the operator's commands (producer/, cli/) ------------------------


def heartbeats_by_worker(heartbeats: SyncColl, fields: Query | None = None) -> dict[object, Document]:
    """Every heartbeat by its worker id, with ``fields`` only if given (the operator's reads)."""
    return {b["_id"]: b for b in heartbeats.find({}, fields)}
