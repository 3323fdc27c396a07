"""The ``scheduled`` collection: jobs waiting, locked and assigned.

Invariant: Every lock-token filter (a write that must find the job still held by the same
assignment) is written once, here.
"""

from __future__ import annotations


# -- the worker: its own entry, its job, its heartbeat (processes/worker) --------------


# -- the recruiter and the cleaner (processes/recruiter.py, processes/cleaner.py) ------


# -- liveness, quarantine and the fairness cursor (moved from domain/) -----------------


# -- the producer and the operator's commands (producer/, cli/) ------------------------
