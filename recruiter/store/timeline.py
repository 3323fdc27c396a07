"""The ``timeline`` collection: the history over time, one document per (resolution, bucket, group, leader epoch).

Written only by the leading recruiter, once a minute, as one bulk upsert inside a transaction
fenced by its lease (:mod:`recruiter.processes.timeline`); read by the read model
(:mod:`recruiter.admin.timeline`). The documents, their ids and why a flush cannot count twice:
:mod:`recruiter.domain.timeline`. A TTL index on ``expires_at`` removes a minute bucket a day
after it ends and an hour bucket 30 days after (where the server runs TTL monitors; the reads
bound their range anyway).

Invariant: each write sets (``$set``) a bucket's totals, never adds to them, so repeating it
changes nothing.
"""

from __future__ import annotations

from datetime import datetime

from pymongo import UpdateOne

from recruiter.store.layout import TIMELINE, AsyncColl, Collections, Document, SyncDb

BY_TIME_INDEX = "by_time"


def timeline_of(c: Collections) -> AsyncColl:
    """The ``timeline`` collection of the database of ``c`` (in ``c``'s transaction when it is one's)."""
    return c.metadata.database[TIMELINE]


async def write_buckets(coll: AsyncColl, docs: list[Document]) -> int:
    """Set each bucket document of ``docs`` (upserted), as one command; how many were written."""
    if not docs:
        return 0
    ops = [UpdateOne({"_id": d["_id"]}, {"$set": {k: v for k, v in d.items() if k != "_id"}}, upsert=True)
           for d in docs]
    result = await coll.bulk_write(ops, ordered=False)
    return int(result.upserted_count + result.matched_count)


def read_buckets(db: SyncDb, resolution: str, since: datetime, until: datetime, groups: list[str | None],
                 limit: int) -> list[Document]:
    """The bucket documents of ``groups`` (None: the whole queue) between ``since`` and ``until``
    (their starts, inclusive), through ``by_time``: the newest ``limit`` of them."""
    query = {"res": resolution, "at": {"$gte": since, "$lte": until}, "group": {"$in": groups}}
    return list(db[TIMELINE].find(query, hint=BY_TIME_INDEX).sort("at", -1).limit(limit))


def read_groups(db: SyncDb, resolution: str, since: datetime, until: datetime, limit: int) -> list[str]:
    """The groups with a bucket between ``since`` and ``until`` (at most ``limit``, sorted)."""
    query = {"res": resolution, "at": {"$gte": since, "$lte": until}, "group": {"$type": "string"}}
    names = db[TIMELINE].distinct("group", query)
    return sorted(n for n in names if isinstance(n, str))[:limit]
