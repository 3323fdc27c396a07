"""The ``metadata`` collection: the fairness cursor and the pause switches.

Invariant: The leases live here too (:mod:`recruiter.store.leases`).
"""

from __future__ import annotations

from recruiter.store.layout import Document, SyncColl

# -- the worker: its own entry, its job, its heartbeat (processes/worker) --------------


# -- the recruiter and the cleaner (processes/recruiter.py, processes/cleaner.py) ------


# -- liveness, quarantine and the fairness cursor (moved from domain/) -----------------


# -- the producer and the operator's commands (producer/, cli/) ------------------------


def read_leases(metadata: SyncColl) -> list[Document]:
    """The recruiter's and the cleaner's lease documents (``recruiter status``)."""
    return list(metadata.find({"_id": {"$in": ["recruiter", "cleaner"]}}))
