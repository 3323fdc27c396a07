"""The reads of ``recruiter stats`` (:mod:`recruiter.admin.stats`): depth by group and tenant, the
recent history, each one aggregation or read served by an index (``candidates`` for ``scheduled``:
``locked`` then the fields grouped and ``scheduled_at``; ``retention`` for ``archived``: the
``archived_at`` range). They name no hint: the planner has one index to pick for each, and on
the embedded server a hint turned the ``archived_at`` range into a scan of the whole index
(0.7 s instead of 0.01 s for the last minute of 30 000 archived jobs).

Invariant: the cost is bounded by what is returned, not by the backlog's documents:
the depth aggregations group the keys of the ``candidates`` index (their fields are
all in it, so the server reads keys, not documents) and return one row per group,
tenant, status and due-ness; the locked jobs are at most one per worker lane; the
history is read over a time range of ``retention`` (``archived_at``), counted exactly
by one aggregation per window and sampled up to ``limit`` documents for the
percentiles. Date comparisons are ``$match`` ranges only (never ``$expr``): right on
MongoDB and on the embedded server alike.
"""

from __future__ import annotations

from datetime import datetime

from recruiter.domain.records import Query
from recruiter.store.layout import Document, SyncColl

DEPTH_KEY = {"group": "$group", "tenant": "$tenant", "status": "$status"}


def count_by(coll: SyncColl, field: str) -> dict[object, int]:
    """How many documents of ``coll`` hold each value of ``field`` (``recruiter status``). The values are
    untrusted: one that is not hashable (a document, an array) is counted under its ``repr``."""
    counts: dict[object, int] = {}
    for row in coll.aggregate([{"$group": {"_id": f"${field}", "n": {"$sum": 1}}}]):
        value = row["_id"]
        key = value if value is None or isinstance(value, str | int | float) else repr(value)
        counts[key] = counts.get(key, 0) + int(row["n"])
    return counts


def waiting_depth(scheduled: SyncColl, now: datetime, *, due: bool) -> list[Document]:
    """Unlocked jobs due at ``now`` (``due``) or later, by group, tenant and status:
    ``{_id: {group, tenant, status}, n, oldest}`` (``oldest``: the earliest ``scheduled_at``)."""
    when: Query = {"$lte": now} if due else {"$gt": now}
    return list(scheduled.aggregate([
        {"$match": {"locked": False, "scheduled_at": when}},
        {"$group": {"_id": DEPTH_KEY, "n": {"$sum": 1}, "oldest": {"$min": "$scheduled_at"}}},
    ]))


def locked_jobs(scheduled: SyncColl) -> list[Document]:
    """The jobs locked for a worker (assigned or running: at most one per worker lane), their
    group, tenant and lock token only."""
    return list(scheduled.find({"locked": True}, {"group": 1, "tenant": 1, "lock_token": 1, "locked_by": 1}))


def archived_counts(archived: SyncColl, since: datetime, until: datetime) -> list[Document]:
    """The jobs archived in ``[since, until)`` by group, tenant and why: ``{_id: {group, tenant, why}, n}``."""
    return list(archived.aggregate([
        {"$match": {"archived_at": {"$gte": since, "$lt": until}}},
        {"$group": {"_id": {"group": "$group", "tenant": "$tenant", "why": "$why"}, "n": {"$sum": 1}}},
    ]))


def archived_times(archived: SyncColl, since: datetime, until: datetime, limit: int) -> list[Document]:
    """The newest ``limit`` jobs archived in ``[since, until)``: group, tenant and the last attempt's
    due, start and end times (for wait and run time percentiles)."""
    cursor = archived.find(
        {"archived_at": {"$gte": since, "$lt": until}},
        {"_id": 0, "group": 1, "tenant": 1, "last_execution.scheduled_at": 1, "last_execution.started_at": 1,
         "last_execution.ended_at": 1},
    ).sort("archived_at", -1).limit(limit)
    return list(cursor)
