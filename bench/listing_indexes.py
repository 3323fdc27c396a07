"""What the ``jobs list`` indexes of ``archived`` cost the archive: ``python -m bench.listing_indexes URI``.

Archives the same jobs (documents as ``archived_document`` writes them, 50 per
bulk upsert as a round does) into ``archived`` with the indexes of before
issue 12 (``retention``, ``by_why``, ``by_group``) and with those of
:data:`recruiter.store.indexes.INDEXES` (adds ``by_class_time``,
``by_group_time``, ``by_tenant_time``), alternating, and prints archived jobs per
second for each. Runs on the database named in URI, which it drops.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from datetime import UTC, datetime

from bson import ObjectId
from pymongo import AsyncMongoClient

from recruiter.store.archived import archive
from recruiter.store.indexes import INDEXES
from recruiter.store.layout import ARCHIVED

BEFORE = ("retention", "by_why", "by_group")
JOBS, BATCH, ROUNDS = 3000, 50, 3


def _doc(i: int, now: datetime) -> dict[str, object]:
    return {"_id": ObjectId(), "group": f"g{i % 5}", "tenant": f"t{i % 20}", "tags": ["eu"], "priority": "low",
            "workable": {"class": f"jobs:Job{i % 4}", "parameters": {"n": i, "text": "x" * 200}},
            "retry_policy": {"class": "recruiter.retry:DoNotDoItAgain", "parameters": {}},
            "created_at": now, "scheduled_at": now, "archived_at": now, "attempts": 1, "crashes": 0,
            "why": "done" if i % 3 else "tried-too-many-times", "done": True, "result": i,
            "executions": [{"attempt": 1, "outcome": "done", "worker": "w", "ended_at": now}]}


async def _rate(db: object, names: tuple[str, ...]) -> float:
    coll = db[ARCHIVED]  # type: ignore[index]
    await coll.drop()
    await coll.create_indexes([m for m in INDEXES[ARCHIVED] if m.document["name"] in names])
    now = datetime.now(UTC)
    docs = [_doc(i, now) for i in range(JOBS)]
    start = time.perf_counter()
    for k in range(0, JOBS, BATCH):
        await archive(coll, docs[k:k + BATCH])
    return JOBS / (time.perf_counter() - start)


async def main(uri: str) -> None:
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(uri, tz_aware=True)
    db = client.get_default_database()
    after = tuple(m.document["name"] for m in INDEXES[ARCHIVED])
    rates: dict[str, list[float]] = {"before": [], "after": []}
    for _ in range(ROUNDS):
        rates["before"].append(await _rate(db, BEFORE))
        rates["after"].append(await _rate(db, after))
    await client.drop_database(db.name)
    for name, values in rates.items():
        print(f"{name:6} {len(after if name == 'after' else BEFORE)} indexes + _id: "
              f"median {statistics.median(values):7.0f} archived jobs/s  ({', '.join(f'{v:.0f}' for v in values)})")
    await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "mongodb://127.0.0.1:27017/bench_listing"))
