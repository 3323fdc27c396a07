"""A worker process's change stream on the real server: it hears the assignments of its own entries
and of no other, however alike their ids (the stream names its entries by one anchored pattern)."""

from __future__ import annotations

import asyncio
from typing import Any

from recruiter.store.connection import async_client, parse_target
from recruiter.store.wakeup import RosterWatch, watch_pipeline
from tests.conftest import wait_for_async

MINE = ["w1-0", "w1-1", "w1-1~1", "a.b*(c)-0"]
# Ids one character away from one of MINE: longer, shorter, a final newline, another lane or slot.
ALIKE = ["w1-10", "w1-1~10", "w1-", "w1", "w1-0\n", "w1-1~", "w1-2", "xw1-0", "a.b*(c)-00", "aXb*(c)-0"]


def test_a_worker_stream_hears_its_own_entries_and_no_other(db_uri: str, db: Any) -> None:
    db.roster.insert_many([{"_id": i, "available": True} for i in [*MINE, *ALIKE]])
    # The server matches the pattern (MINE share no common prefix, so it is all alternatives).
    assert "$regex" in watch_pipeline(MINE)[0]["$match"]["documentKey._id"]
    heard: list[str] = []

    async def heard_at_least(count: int) -> bool:
        return len(heard) >= count

    async def scenario() -> None:
        target = parse_target(db_uri)
        client = async_client(target)
        idle = asyncio.Event()
        idle.set()
        opened = asyncio.Event()
        watch = RosterWatch(client[target.database].roster, MINE, lambda slot, job, ahead: heard.append(slot),
                            opened.set, idle, max_await_s=0.2)
        task = asyncio.create_task(watch.run())
        try:
            await asyncio.wait_for(opened.wait(), 10)
            roster = client[target.database].roster
            for entry in [*ALIKE, *MINE]:
                await roster.update_one({"_id": entry}, {"$set": {"job": {"_id": entry}, "available": False}})
            await wait_for_async(lambda: heard_at_least(len(MINE)), 10, message="its own assignments")
            # One more event of its own, after every other: nothing alike was heard before it.
            await roster.update_one({"_id": MINE[0]}, {"$set": {"stop_requested": True}})
            await wait_for_async(lambda: heard_at_least(len(MINE) + 1), 10, message="its stop")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()

    asyncio.run(scenario())
    assert heard == [*MINE, MINE[0]]
