"""The store: the only code that calls PyMongo.

One module per collection (``scheduled``, ``archived``, ``roster``, ``heartbeats``,
``metadata``) plus leases, indexes, transactions, the server clock, change streams
and command monitoring. Each fenced filter and each update document is written
once, here; the processes call these functions with values from the domain.
"""

from __future__ import annotations

# What the CLI may use (its layering contract forbids the modules themselves).
from recruiter.store.metadata import read_paused, switch_paused, unused_names

__all__ = ["read_paused", "switch_paused", "unused_names"]
