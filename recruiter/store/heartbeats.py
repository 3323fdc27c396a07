"""The ``heartbeats`` collection: when each worker slot was last seen, and what it runs.

Invariant: A slot writes only its own heartbeat, fenced by its ``session``; the recruiter
and the cleaner only read heartbeats and delete those of entries they removed.
"""

from __future__ import annotations


# -- the worker: its own entry, its job, its heartbeat (processes/worker) --------------


# -- the recruiter and the cleaner (processes/recruiter.py, processes/cleaner.py) ------


# -- liveness, quarantine and the fairness cursor (moved from domain/) -----------------


# -- the producer and the operator's commands (producer/, cli/) ------------------------
