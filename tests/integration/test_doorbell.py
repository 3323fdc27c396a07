"""The recruiter's doorbell on the real server: it outlives its stream ended by the server."""

from __future__ import annotations

import asyncio
from typing import Any

from recruiter.store.connection import async_client, parse_target
from recruiter.store.wakeup import Doorbell


def test_a_doorbell_whose_stream_the_server_ends_opens_another(db_uri: str, db: Any) -> None:
    async def scenario() -> None:
        target = parse_target(db_uri)
        client = async_client(target)
        adb = client[target.database]
        bell = Doorbell(adb, max_await_s=0.2)
        try:
            await bell.open()
            await adb.scheduled.insert_one({"_id": "before"})
            assert await bell.wait(5)
            assert bell.take("scheduled")
            # Dropping the database invalidates a database's stream; the driver then answers
            # "no event" for ever. The bell must see that, not keep reading a dead stream.
            await client.drop_database(target.database)
            assert not await bell.wait(1)
            assert bell.stream is None
            await bell.open()
            await adb.scheduled.insert_one({"_id": "after"})
            assert await bell.wait(5)
            assert bell.take("scheduled")
        finally:
            await bell.close()
            await client.close()

    asyncio.run(scenario())
