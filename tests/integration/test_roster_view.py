"""The leader's roster view (recruiter.store.roster_view): whole once, then only what changed."""

from __future__ import annotations

import asyncio
from typing import Any

from pymongo import AsyncMongoClient, monitoring

from recruiter.store import strict
from recruiter.store.roster import read_round_entries
from recruiter.store.roster_view import RosterView
from tests.conftest import wait_for_async


class Finds(monitoring.CommandListener):
    """The documents each ``find`` on the roster returned (its first batch and its ``getMore``s)."""

    def __init__(self) -> None:
        self.ids: dict[int, str] = {}
        self.returned: list[int] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "find" and event.command.get("find") == "roster":
            self.ids[event.request_id] = "find"
        elif event.command_name == "getMore" and event.command.get("collection") == "roster":
            self.ids[event.request_id] = "getMore"

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        kind = self.ids.pop(event.request_id, None)
        cursor = event.reply.get("cursor", {})
        if kind == "find":
            self.returned.append(len(cursor.get("firstBatch", [])))
        elif kind == "getMore" and "nextBatch" in cursor and self.returned:
            if not any(isinstance(d, dict) and "operationType" in d for d in cursor["nextBatch"]):
                self.returned[-1] += len(cursor["nextBatch"])  # more of a find (not a change stream's events)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self.ids.pop(event.request_id, None)


def entry(i: int, **fields: Any) -> dict[str, Any]:
    return {"_id": f"w{i:03d}", "work_on": ["*"], "available": True, **fields}


def test_the_view_reads_the_roster_once_then_only_the_entries_that_changed(db_uri: str) -> None:
    async def scenario() -> None:
        finds = Finds()
        client: AsyncMongoClient[Any] = AsyncMongoClient(db_uri, tz_aware=True,
                                                         event_listeners=[finds, *strict.listeners()])
        try:
            roster = client.get_default_database().roster
            plain: AsyncMongoClient[Any] = AsyncMongoClient(db_uri, tz_aware=True)  # the test's own reads, not counted
            truth = plain.get_default_database().roster
            await roster.insert_many([entry(i) for i in range(200)] + [entry(900, available=False)])
            view = RosterView(roster)
            assert len(await view.read()) == 200
            assert view.last_read == ("whole", 200)
            assert finds.returned == [200]

            # Two slots take jobs, one records an outcome, one leaves, one registers.
            await roster.update_many({"_id": {"$in": ["w000", "w001"]}}, {"$set": {"available": False}})
            await roster.update_one({"_id": "w900"}, {"$set": {"outcome": {"token": 1, "job": 7}}})
            await roster.delete_one({"_id": "w002"})
            await roster.insert_one(entry(201))

            async def caught_up() -> bool:
                await view.read()
                return {e["_id"] for e in view.entries.values()} == {
                    e["_id"] for e in await read_round_entries(truth)}

            await wait_for_async(caught_up, timeout_s=10, message="the view to see the changes")
            assert "w900" in view.entries
            assert {"w000", "w001", "w002"}.isdisjoint(view.entries)
            # Every read after the first returned only changed entries, never the roster again.
            assert all(n <= 5 for n in finds.returned[1:]), finds.returned

            # What a committed round wrote is seen at once, before its events arrive.
            view.assigned(["w003"])
            view.cleared([("w900", 1)])
            assert "w003" not in view.entries
            assert "w900" not in view.entries  # not available, no outcome left: not a round's entry

            # A broken stream: the next read is whole again, and so is one past full_every_s.
            await view.close()
            await view.read()
            assert view.last_read[0] == "whole"
            view.full_every_s = 0.0
            await view.read()
            assert view.last_read[0] == "whole"
            full = RosterView(roster, enabled=False)
            await full.read()
            await full.read()
            assert full.last_read == ("whole", len(await read_round_entries(truth)))
            await view.close()
            await plain.close()
        finally:
            await client.close()

    asyncio.run(scenario())
