"""Hostile values that a round or the cleaner fences its writes on (a roster entry's ``freed`` mark, a
heartbeat's dates and sessions), on a real server, the processes driven step by step
(tests/integration/test_processes_inproc.py's harness): the pass that reads them goes on."""

from __future__ import annotations

from datetime import timedelta

import pytest
from bson import Regex

from tests.integration.test_processes_inproc import DEAD_AFTER_S, Harness, run, take_and_work
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


@pytest.mark.parametrize(("path", "value"), [("slots.w2.session", {"$x": 1}), ("last_seen_at", {"$x": 1})],
                         ids=["slot-session", "last_seen_at"])
def test_a_heartbeat_value_shaped_like_an_operator_does_not_stop_the_cleaner_freeing_a_dead_workers_job(
        db_uri: str, path: str, value: object) -> None:
    """A dead worker's heartbeat document (written whole) holding a value the cleaner fences its
    delete on, shaped like an operator: on the code before the fix, the server refused the fence
    ("unknown operator: $x") and the cleaner's pass with it, at every pass, so the dead worker's job
    stayed locked for good. The job is unlocked and runs once on the live worker."""
    async def scenario(h: Harness) -> None:
        job = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        await h.worker("w2")
        assert (await h.round()).assigned == 1  # to w2, which dies with it
        doc = await h.db.heartbeats.find_one({"ids": "w2"})
        assert doc is not None
        *parents, name = path.split(".")
        node = doc
        for part in parents:
            node = node[part]
        node[name] = value
        await h.db.heartbeats.delete_one({"_id": doc["_id"]})
        await h.db.heartbeats.insert_one(doc)
        h.clock.advance(timedelta(seconds=DEAD_AFTER_S * 3))
        process, slot = await h.worker("w1")

        report = await (await h.cleaner()).fenced_clean()

        assert (report.dead_workers, report.unlocked_jobs) == (1, 1)
        assert await h.db.heartbeats.count_documents({"ids": "w2"}) == 0
        await h.round()
        await take_and_work(process, slot)
        await h.settle()
        assert (await h.archived(job) or {}).get("why") == "done"
        assert len(await h.ledger(event="start")) == 1

    run(db_uri, scenario)
