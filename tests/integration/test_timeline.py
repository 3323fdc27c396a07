"""The history over time on the real server: the leader writes one document per group per minute, in one
command, under a TTL index; a flush repeated, or a second leader, never counts an outcome twice."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from bson import ObjectId
from pymongo.errors import OperationFailure

from recruiter.domain.timeline import KEPT, MINUTE
from recruiter.processes import timeline as timeline_process
from recruiter.processes.recruiter import RecruiterConfig, RecruiterProcess
from recruiter.processes.worker.runtime import WorkerProcess
from recruiter.processes.worker.state import Slot
from tests.conftest import wait_for_async
from tests.integration.test_processes_inproc import START, Harness, run, take_and_work
from tests.workables import AlwaysFails, Record


async def work_through(h: Harness, recruiter: RecruiterProcess, process: WorkerProcess, slot: Slot,
                       jobs: list[ObjectId]) -> None:
    """Each job handed to the slot by a fenced round of ``recruiter`` and run; a last round applies the last."""
    for _ in jobs:
        assert await recruiter.lease.acquire()
        assert (await recruiter.fenced_round()).assigned == 1
        await take_and_work(process, slot)
    assert await recruiter.lease.acquire()
    await recruiter.fenced_round()


async def minute_docs(h: Harness) -> dict[tuple[object, object], dict[str, object]]:
    return {(d["group"], d["epoch"]): d for d in await h.db.timeline.find({"res": MINUTE}).to_list()}


def test_the_leader_writes_one_document_per_group_per_minute_in_one_command(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        p = h.producer
        jobs = [await Record(h.db_uri, n=i).as_job_of(p).in_group("a").enqueue() for i in range(2)]
        jobs.append(await AlwaysFails(h.db_uri).as_job_of(p).in_group("b").enqueue())
        process, slot = await h.worker("w")
        h.clock.advance(timedelta(seconds=3))  # each job waits 3 s before it starts
        await work_through(h, h.recruiter, process, slot, jobs)

        h.commands.clear()
        written = await h.recruiter.timeline.flush_if_due(h.recruiter.leadership)
        assert written == 6  # (a, b, the whole queue) x (minute, hour)
        assert len(h.commands.named("update", "timeline")) == 1  # one bulk upsert
        docs = await minute_docs(h)
        epoch = h.recruiter.lease.epoch
        assert set(docs) == {(None, epoch), ("a", epoch), ("b", epoch)}
        assert (docs["a", epoch]["done"], docs["a", epoch]["failed"]) == (2, 0)
        assert (docs["b", epoch]["done"], docs["b", epoch]["failed"]) == (0, 1)
        assert (docs[None, epoch]["done"], docs[None, epoch]["failed"]) == (2, 1)
        assert docs[None, epoch]["wait_n"] == 3
        assert docs[None, epoch]["wait_max_s"] >= 3.0
        assert docs["a", epoch]["at"] == START.replace(second=0)
        assert docs["a", epoch]["expires_at"] == START.replace(second=0) + timedelta(minutes=1) + KEPT[MINUTE]

        # Within the same minute nothing more is written; the minute turned, only what changed is.
        h.commands.clear()
        assert await h.recruiter.timeline.flush_if_due(h.recruiter.leadership) == 0
        assert h.commands.named("update", "timeline") == []
        h.clock.advance(timedelta(minutes=1))
        assert await h.recruiter.lease.acquire()
        assert await h.recruiter.timeline.flush_if_due(h.recruiter.leadership) == 1  # the new minute's coverage
        assert len(await h.db.timeline.find({"res": MINUTE}).to_list()) == 4

    run(db_uri, scenario)


def test_the_history_collection_has_a_ttl_index(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        indexes = await h.db.timeline.index_information()
        assert indexes["expiry"]["key"] == [("expires_at", 1)]
        assert indexes["expiry"]["expireAfterSeconds"] == 0
        assert indexes["by_time"]["key"] == [("res", 1), ("at", 1)]

    run(db_uri, scenario)


def test_a_repeated_flush_and_a_second_leader_never_count_twice(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        p = h.producer
        first = h.recruiter
        process, slot = await h.worker("w")
        for i in range(3):
            await Record(h.db_uri, n=i).as_job_of(p).in_group("a").enqueue()
        for i in range(3):
            assert await first.lease.acquire()
            assert (await first.fenced_round()).assigned == 1
            await take_and_work(process, slot)
            if i == 1:  # one outcome applied so far: written at once (the first write of this leader)
                assert await first.timeline.flush_if_due(first.leadership) > 0
        assert (await first.fenced_round()).applied == 1
        # Written again within the minute (as a retry after a lost reply would): totals set, not added.
        assert await first.timeline.flush(first.leadership, h.clock.now()) > 0
        first.timeline.tally.dirty.update(first.timeline.tally.buckets)
        assert await first.timeline.flush(first.leadership, h.clock.now()) > 0
        old_epoch = first.lease.epoch
        assert (await minute_docs(h))["a", old_epoch]["done"] == 3

        # The first leader's lease runs out; a successor applies two more in the same minute.
        h.clock.advance(timedelta(seconds=RecruiterConfig().lease_ttl_s + 1))
        await process.heartbeat()
        successor = RecruiterProcess(h.db, h.clock, RecruiterConfig(), owner="successor")
        more = [await Record(h.db_uri, n=i).as_job_of(p).in_group("a").enqueue() for i in range(2)]
        await work_through(h, successor, process, slot, more)
        assert successor.lease.epoch != old_epoch
        assert await successor.timeline.flush_if_due(successor.leadership) > 0
        # The deposed leader's write is fenced out: nothing of it lands.
        first.timeline.tally.dirty.update(first.timeline.tally.buckets)
        assert await first.timeline.flush(first.leadership, h.clock.now()) == 0

        docs = await minute_docs(h)
        assert {k: d["done"] for k, d in docs.items() if k[0] == "a"} == {("a", old_epoch): 3,
                                                                          ("a", successor.lease.epoch): 2}
        assert sum(d["done"] for k, d in docs.items() if k[0] is None) == 5  # five jobs done, five counted

    run(db_uri, scenario)


def test_the_leading_recruiter_writes_its_history_from_its_loop(db_uri: str) -> None:
    """The leader loop flushes before its rounds: coverage at once, outcomes once the minute turns."""

    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w")
        await Record(h.db_uri, n=1).as_job_of(h.producer).in_group("a").enqueue()
        leader = RecruiterProcess(h.db, h.clock, RecruiterConfig(backoff_to_s=0.05), owner="looping")
        task = asyncio.create_task(leader.run())
        try:
            await wait_for_async(lambda: h.db.timeline.find_one({"res": MINUTE, "group": None}),
                                 message="the leader's first write (coverage)")
            await wait_for_async(lambda: process.poll(slot), message="the job to be assigned")
            job_id = (await h.roster("w"))["assigned_to"]["w"]
            await process.work(slot, job_id)
            await wait_for_async(lambda: h.archived(job_id), message="the outcome applied")
            assert await h.db.timeline.find_one({"group": "a"}) is None  # the minute has not turned
            h.clock.advance(timedelta(minutes=1))
            await process.heartbeat()
            doc = await wait_for_async(lambda: h.db.timeline.find_one({"res": MINUTE, "group": "a"}),
                                       message="the minute's write")
            assert doc["done"] == 1
            assert doc["epoch"] == leader.lease.epoch
        finally:
            leader.stop()
            await asyncio.wait_for(task, timeout=10)

    run(db_uri, scenario)


def test_a_failed_write_is_tried_again_next_minute_with_nothing_lost(db_uri: str, monkeypatch: Any) -> None:
    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w")
        job = await Record(h.db_uri, n=1).as_job_of(h.producer).in_group("a").enqueue()
        await work_through(h, h.recruiter, process, slot, [job])
        calls: list[int] = []

        async def refused(coll: Any, docs: list[Any]) -> int:
            calls.append(len(docs))
            raise OperationFailure("not now")

        monkeypatch.setattr(timeline_process, "write_buckets", refused)
        assert await h.recruiter.timeline.flush_if_due(h.recruiter.leadership) == 0
        assert await h.recruiter.timeline.flush_if_due(h.recruiter.leadership) == 0
        assert len(calls) == 1  # not again within the minute: one attempt a minute, not one a round
        monkeypatch.undo()
        h.clock.advance(timedelta(minutes=1))
        assert await h.recruiter.lease.acquire()
        assert await h.recruiter.timeline.flush_if_due(h.recruiter.leadership) > 0
        doc = await h.db.timeline.find_one({"res": MINUTE, "group": "a"})
        assert doc["done"] == 1

    run(db_uri, scenario)
