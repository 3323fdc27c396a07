"""The start gates' one write: a start token, taken against a group's gate document (``start_gates``).

What the gate guarantees, and why the server's clock, is in :mod:`recruiter.domain.start_gate`.
This module holds the write: one ``findAndModify`` with an update pipeline, upserting
``{_id: "gate:<group>"}``, that in one atomic step reads the server's time (``$$NOW``, taken
once; or the latest time already in a log, if later: a write whose ``$$NOW`` was read before
another's may be applied after it, and a log that went back in time could lose, to the other's
trim, a start its check had to count), checks every log the job counts against, and either
grants (appends that time to each log,
dropping the times older than its window), refuses (changes no log), or repairs a malformed log
(every log of the job full as of now; a ``tenants`` that is not a document is replaced whole). It
records what it decided in ``last`` (the time, the caller's nonce, granted or not, the problem
found), and the caller reads its answer there, in the document it returns.

The server's time is read as ``{$toDate: {$toLong: "$$NOW"}}``: a plain date, which the embedded
server (SecantusDB 0.7) compares correctly with stored dates, where it does not ``$$NOW`` itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from pymongo import ReturnDocument

from recruiter.domain.records import Query
from recruiter.domain.start_gate import Gate, gate_id
from recruiter.store.layout import START_GATES, AsyncColl, Collections, Document

_NOW = {"$toDate": {"$toLong": "$$NOW"}}


def _shifted(now: object, ms: int) -> Query:
    return {"$toDate": {"$add": [{"$toLong": now}, ms]}}


def _problem(gate: Gate, now: object) -> Query:
    """Why the gate's log is malformed as of ``now`` (an expression), or null."""
    log = f"${gate.path}"
    branches: list[Query] = []
    if gate.tenant is not None:
        branches.append({"case": {"$not": [{"$in": [{"$type": "$tenants"}, ["missing", "object"]]}]},
                         "then": "tenants: expected an embedded document"})
    branches += [
        {"case": {"$eq": [{"$type": log}, "missing"]}, "then": None},
        {"case": {"$not": [{"$isArray": log}]}, "then": f"{gate.path}: expected an array of start times"},
        {"case": {"$anyElementTrue": [{"$map": {"input": log, "in": {"$ne": [{"$type": "$$this"}, "date"]}}}]},
         "then": f"{gate.path}: an entry is not a date"},
        {"case": {"$anyElementTrue": [{"$map": {"input": log,
                                                "in": {"$gt": ["$$this", _shifted(now, gate.window_ms)]}}}]},
         "then": f"{gate.path}: a start is dated ahead of the server's clock by more than the window"},
    ]
    return {"$switch": {"branches": branches, "default": None}}


def _within(gate: Gate, now: object) -> Query:
    """The log's times within the half-open window ending at ``now``."""
    log = f"${gate.path}"
    return {"$filter": {"input": {"$cond": [{"$isArray": log}, log, []]},
                        "cond": {"$gt": ["$$this", _shifted(now, -gate.window_ms)]}}}


def take_pipeline(gates: Sequence[Gate], nonce: str) -> list[Query]:
    """The update pipeline of one token request (see the module doc)."""
    problems: object = None
    for g in reversed(gates):
        problems = {"$ifNull": [_problem(g, "$$now"), problems]}
    # The grant's time: the server's, or the latest time in a log if that is later (a write whose
    # $$NOW was read before another's but applied after it). Each log then only grows in time, and
    # a grant's check covers every earlier start of its window: none was dropped yet.
    at = {"$cond": [{"$eq": ["$$problem", None]},
                    {"$max": ["$$now", *({"$max": f"${g.path}"} for g in gates)]}, "$$now"]}
    room = [{"$lt": [{"$size": _within(g, "$$at")}, g.entries]} for g in gates]
    last = {"$let": {"vars": {"now": _NOW}, "in": {"$let": {"vars": {"problem": problems}, "in": {
        "$let": {"vars": {"at": at}, "in": {
            "at": "$$at", "by": nonce, "problem": "$$problem",
            "granted": {"$and": [{"$eq": ["$$problem", None]}, *room]}}}}}}}}
    # A problem in any log fills every log of the job full (fail closed, on every key it counts against).
    logs = {g.path: {"$switch": {"branches": [
        {"case": {"$ne": ["$last.problem", None]},
         "then": {"$map": {"input": {"$range": [0, g.entries]}, "in": "$last.at"}}},
        {"case": {"$eq": ["$last.granted", True]},
         "then": {"$concatArrays": [_within(g, "$last.at"), ["$last.at"]]}}],
        "default": f"${g.path}"}} for g in gates}
    stages: list[Query] = [{"$set": {"last": last}}]
    if any(g.tenant is not None for g in gates):  # a ``tenants`` that is not a document is set aside whole
        stages.append({"$set": {"tenants": {"$cond": [
            {"$in": [{"$type": "$tenants"}, ["missing", "object"]]}, "$tenants", {"$literal": {}}]}}})
    return [*stages, {"$set": logs}]


def gates_of(c: Collections) -> AsyncColl:
    """The ``start_gates`` collection of ``c``'s database (its own collection, so that a worker's role
    writes there and not in ``metadata``, where the leases are)."""
    return c.metadata.database[START_GATES]


async def take(collection: AsyncColl, gates: Sequence[Gate], nonce: str) -> Document | None:
    """Ask for a start token of ``gates`` (all of one group); the gate document as the write left it
    (:func:`recruiter.domain.start_gate.reply_of` reads the answer)."""
    return await collection.find_one_and_update({"_id": gate_id(gates[0].group)}, take_pipeline(gates, nonce),
                                              upsert=True, return_document=ReturnDocument.AFTER)
