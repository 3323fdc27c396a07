"""The ``archived`` collection: the history of every finished job.

Invariant: A job is archived by an idempotent upsert keyed by ``_id`` in the same
transaction that deletes it from ``scheduled``; nothing else writes here.
"""

from __future__ import annotations


# -- the worker: its own entry, its job, its heartbeat (processes/worker) --------------


# -- the recruiter and the cleaner (processes/recruiter.py, processes/cleaner.py) ------


# -- liveness, quarantine and the fairness cursor (moved from domain/) -----------------


# -- the producer and the operator's commands (producer/, cli/) ------------------------
