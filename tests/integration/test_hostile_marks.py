"""Hostile marks in roster entries on a real server, the processes driven step by step
(tests/integration/test_processes_inproc.py's harness): the round that reads them goes on."""

from __future__ import annotations

import pytest
from bson import Regex

from tests.integration.test_processes_inproc import Harness, run, take_and_work
from tests.workables import Record


@pytest.mark.parametrize("mark", [{"$where": "sleep(1000)"}, {"a": {"$x": 1}}, [1, [2]], Regex(".*"), "freed"],
                         ids=["dollar-name", "nested-dollar-name", "array", "regex", "string"])
def test_a_freed_mark_of_a_hostile_value_is_removed_by_type_and_the_rounds_go_on(db_uri: str, mark: object) -> None:
    """An entry written whole (an insert stores such values) with a ``freed`` mark that is not one
    the code writes: on the code before the check, a document holding a ``$`` name made the round's
    write removing the marks read fail ("cannot nest $ under $in"), and every round after it, since
    the mark stayed. The mark goes; the job is handed out and runs once."""
    async def scenario(h: Harness) -> None:
        job = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        workers = [await h.worker("w1"), await h.worker("w2")]
        entry = await h.roster("w2")
        assert entry is not None
        await h.db.roster.delete_one({"_id": "w2"})
        await h.db.roster.insert_one({**entry, "freed": mark})

        assert (await h.round()).assigned == 1
        assert await h.db.roster.count_documents({"freed": {"$exists": True}}) == 0
        for process, slot in workers:
            if await process.poll(slot) is not None:
                await take_and_work(process, slot)
        await h.settle()

        assert (await h.archived(job) or {}).get("why") == "done"
        assert len(await h.ledger(event="start")) == 1

    run(db_uri, scenario)
