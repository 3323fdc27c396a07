"""The ``roster`` collection: one entry per worker slot, its assignment and its outcome.

Invariant: Every fenced roster filter (an entry matched by ``_id`` and ``session``, so a
write never lands on a newer registration of the same id) is written once, here.
"""

from __future__ import annotations


# -- the worker: its own entry, its job, its heartbeat (processes/worker) --------------


# -- the recruiter and the cleaner (processes/recruiter.py, processes/cleaner.py) ------


# -- liveness, quarantine and the fairness cursor (moved from domain/) -----------------


# -- the producer and the operator's commands (producer/, cli/) ------------------------
