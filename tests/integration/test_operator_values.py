"""Values read from the database that a command or a pass puts in a query, stored as documents
shaped like operators, on a real server: compared as values (or looked up nowhere), never read as
operators. On the server, ``{"field": {"$x": 1}}`` fails ("unknown operator"), ``{"_id": {"$ne":
null}}`` matches another document, and ``{"$in": [{"$x": 1}]}`` fails ("cannot nest $ under $in")."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from bson import ObjectId

from recruiter.domain.cancel import WAS_ASSIGNED
from recruiter.domain.resubmit import AFTER_ATTEMPT
from tests.integration.test_processes_inproc import DEAD_AFTER_S, Harness, run, take_and_work
from tests.workables import Record

OPERATORS = [{"$x": 1}, {"$ne": None}]
IDS = ["unknown-operator", "ne-null"]


async def rewritten(h: Harness, job_id: ObjectId, **fields: Any) -> None:
    """The job written whole with ``fields`` (an insert stores values a ``$set`` would refuse),
    past the collection's validator should it check them: as a hand edit or a restore that
    bypasses it writes it, or a document older than the validator."""
    doc = await h.job(job_id)
    assert doc is not None
    await h.db.scheduled.delete_one({"_id": job_id})
    await h.db.scheduled.insert_one({**doc, **fields}, bypass_document_validation=True)


@pytest.mark.parametrize("holder", OPERATORS, ids=IDS)
def test_a_locked_job_whose_locked_by_is_shaped_like_an_operator_is_cancelled(db_uri: str, holder: object) -> None:
    """On the code before the check, the cancel looked its worker's entry up by the ``locked_by``
    read: the server refused it ("unknown operator"), or matched another worker's entry, and the
    heartbeats' read failed on the unhashable value: the cancel failed at every try. The job is
    archived as cancelled as one no worker holds; the other worker's entry is left as it was."""
    async def scenario(h: Harness) -> None:
        job_id = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        await h.worker("w1")
        assert (await h.round()).assigned == 1
        other = await Record(h.db_uri, n=2).as_job_of(h.producer).enqueue()
        await h.worker("w2")
        assert (await h.round()).assigned == 1
        w2_before = await h.roster("w2")
        target = job_id if (await h.job(job_id) or {}).get("locked_by") == "w1" else other
        await rewritten(h, target, locked_by=holder)

        result = await h.producer.cancel(target)

        assert (result.state, result.worker) == (WAS_ASSIGNED, str(holder))
        assert await h.job(target) is None
        assert (await h.archived(target) or {}).get("why") == "cancelled"
        assert await h.roster("w2") == w2_before  # the other worker's entry: not fenced

    run(db_uri, scenario)


def test_a_lock_token_the_cancel_deletes_on_shaped_like_an_operator_is_compared_as_a_value(db_uri: str) -> None:
    """The cancel deletes a locked job as read (its ``lock_token``): on the code before ``$eq`` the
    server refused the delete ("unknown operator"), and the cancel failed at every try."""
    async def scenario(h: Harness) -> None:
        job_id = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        await h.worker("w1")
        assert (await h.round()).assigned == 1
        await rewritten(h, job_id, lock_token={"$x": 1})

        result = await h.producer.cancel(job_id)

        assert result.state == WAS_ASSIGNED
        assert await h.job(job_id) is None
        assert (await h.archived(job_id) or {}).get("why") == "cancelled"

    run(db_uri, scenario)


def test_a_lock_token_the_resubmit_writes_on_shaped_like_an_operator_is_compared_as_a_value(db_uri: str) -> None:
    """A resubmit of a locked job asks for it on the lock as read (its ``lock_token``): on the code
    before ``$eq`` the server refused the update ("unknown operator"), and the resubmit failed."""
    async def scenario(h: Harness) -> None:
        job_id = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        await h.worker("w1")
        assert (await h.round()).assigned == 1
        await rewritten(h, job_id, lock_token={"$x": 1})

        assert (await h.producer.resubmit(job_id)).state == AFTER_ATTEMPT
        assert (await h.job(job_id) or {}).get("resubmit", {}).get("requested_at") == h.clock.now()

    run(db_uri, scenario)


def test_an_assignment_shaped_like_an_operator_is_dropped_by_the_worker_which_goes_on(db_uri: str) -> None:
    """A worker's own entry (written whole) whose assignment names a job by a document shaped
    like an operator: on the code before ``$eq`` the worker's read of the job by that id, and its
    drop of the assignment, were refused ("unknown operator") at every poll. The assignment is
    dropped as stale, the slot is available again and runs the next job."""
    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w1")
        entry = await h.roster("w1")
        assert entry is not None
        await h.db.roster.delete_one({"_id": "w1"})
        await h.db.roster.insert_one({**entry, "available": False, "assigned_to": {"w1": {"$x": 1}}, "job": None})

        assert await process.poll(slot) == {"$x": 1}
        await process.work(slot, {"$x": 1})

        assert (await h.roster("w1") or {}).get("available") is True
        job_id = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        assert (await h.round()).assigned == 1
        assert await take_and_work(process, slot) == job_id
        await h.settle()
        assert (await h.archived(job_id) or {}).get("why") == "done"

    run(db_uri, scenario)


@pytest.mark.parametrize("path", ["halting.job", "session"])
def test_a_dead_entry_value_shaped_like_an_operator_does_not_stop_the_cleaner(db_uri: str, path: str) -> None:
    """A dead worker's entry still halting a cancelled job (``halting``), written whole with its
    halting job or its session shaped like an operator: the cleaner records in the archived job
    that it ended with the worker, matched on those values. On the code before ``$eq`` the server
    refused that write ("unknown operator") once a document was there to match, and the pass
    failed after the entry was deleted. The pass goes on; the next job runs once on a live worker."""
    async def scenario(h: Harness) -> None:
        cancelled = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        await h.worker("w2")
        assert (await h.round()).assigned == 1  # to w2, which dies with it
        assert (await h.producer.cancel(cancelled)).state == WAS_ASSIGNED
        entry = await h.roster("w2")
        assert entry is not None
        assert entry["halting"]["job"] == cancelled
        *parents, name = path.split(".")
        node = entry
        for part in parents:
            node = node[part]
        node[name] = {"$x": 1}
        await h.db.roster.delete_one({"_id": "w2"})
        await h.db.roster.insert_one(entry)
        h.clock.advance(timedelta(seconds=DEAD_AFTER_S * 3))
        process, slot = await h.worker("w1")
        job_id = await Record(h.db_uri, n=2).as_job_of(h.producer).enqueue()

        report = await (await h.cleaner()).fenced_clean()

        assert report.dead_workers == 1
        assert await h.roster("w2") is None
        await h.round()
        assert await take_and_work(process, slot) == job_id
        await h.settle()
        assert (await h.archived(job_id) or {}).get("why") == "done"
        assert [d["n"] for d in await h.ledger(event="start")] == [2]

    run(db_uri, scenario)
