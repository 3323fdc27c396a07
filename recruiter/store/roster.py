"""The ``roster`` collection: one entry per worker slot, its assignment and its outcome.

Invariant: Every fenced roster filter (an entry matched by ``_id`` and ``session``, so a
write never lands on a newer registration of the same id) is written once, here.
"""

from __future__ import annotations

import re

from recruiter.domain.records import Query
from recruiter.store.layout import AsyncColl, Document, SyncColl

# -- the worker: its own entry, its job, its heartbeat (processes/worker) --------------


# -- the recruiter and the cleaner (processes/recruiter.py, processes/cleaner.py) ------


# -- liveness, quarantine and the fairness cursor (moved from domain/) -----------------


# -- the producer and the operator's commands (producer/, cli/) ------------------------


def _ids_filter(ids: list[str]) -> Query:
    """Entries named by ``ids``; ``W`` also names the slots ``W-0``, ``W-1``… of ``--concurrency``."""
    return {"_id": {"$in": [re.compile(rf"^{re.escape(i)}(-\d+)?$") for i in ids]}}


def request_stop(roster: SyncColl, ids: list[str] | None) -> list[str]:
    """Ask the named workers (all, when ``ids`` is None) to stop gracefully; returns the entries asked.

    The request is a flag in the roster entry (``stop_requested``); each worker
    reads its entry when it polls, stops taking work, finishes what it runs
    within its grace period and leaves.
    """
    filter_ = {} if ids is None else _ids_filter(ids)
    asked: list[str] = [d["_id"] for d in roster.find(filter_, {"_id": 1})]
    if asked:
        roster.update_many({"_id": {"$in": asked}}, {"$set": {"stop_requested": True}})
    return sorted(asked)


def entries_by_id(roster: SyncColl) -> list[Document]:
    """Every roster entry, by id, without its outcome and job (``recruiter workers list``)."""
    return list(roster.find({}, {"outcome": 0, "job": 0}).sort("_id", 1))


def entries_summary(roster: SyncColl) -> list[Document]:
    """Every roster entry without its assignment, outcome and job (``recruiter status``)."""
    return list(roster.find({}, {"assigned_to": 0, "outcome": 0, "job": 0}))


async def longest_heartbeat_interval(roster: AsyncColl, above_s: float) -> tuple[str, float] | None:
    """The registered worker with the longest heartbeat interval over ``above_s``, and that interval."""
    worker = await roster.find_one({"heartbeat_interval_s": {"$gt": above_s}},
                                   {"heartbeat_interval_s": 1}, sort=[("heartbeat_interval_s", -1)])
    interval_s = (worker or {}).get("heartbeat_interval_s")
    if worker is None or not isinstance(interval_s, (int, float)):
        return None
    return worker["_id"], float(interval_s)
