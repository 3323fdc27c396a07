"""Unique jobs on the real server: each scope, each conflict behaviour, enqueue_many, bad keys
(the harness of ``test_processes_inproc``: rounds and workers driven step by step, a manual clock)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from bson import ObjectId

from recruiter import JobRefused, Recruiter
from recruiter.domain.retry import RetryManyTimes
from tests.integration.test_processes_inproc import Harness, run, take_and_work
from tests.workables import AlwaysFails, AsyncRecord, Record, UniqueRecord


async def finish(h: Harness, worker: str = "w1") -> ObjectId:
    """One round, the worker runs what it was given, one round applies it."""
    process, slot = await h.worker(worker)
    await h.round()
    job_id = await take_and_work(process, slot)
    await h.round()
    return job_id


def test_the_default_conflict_returns_the_existing_job_and_writes_nothing(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        first = await Record(h.db_uri, n=1).as_job_of(h.producer).unique("invoice-42").enqueue()
        assert first.existed is False
        h.commands.clear()
        second = await Record(h.db_uri, n=2).as_job_of(h.producer).unique("invoice-42").enqueue()
        assert second == first
        assert second.existed is True
        assert second.state == "queued"
        assert await h.db.scheduled.count_documents({}) == 1
        assert len(h.commands.named("insert", "scheduled")) == 1  # refused by the index: nothing written
        job = await h.job(first)
        assert job is not None
        assert job["unique"] == {"key": "invoice-42", "scope": "unfinished"}
        assert job["workable"]["parameters"]["n"] == 1  # the first one's parameters stand

        # Finished, the key is free again (scope: unfinished); the history keeps the key.
        assert await finish(h) == first
        archived = await h.archived(first)
        assert archived is not None
        assert archived["why"] == "done"
        assert archived["unique"]["key"] == "invoice-42"
        third = await Record(h.db_uri, n=3).as_job_of(h.producer).unique("invoice-42").enqueue()
        assert third != first
        assert third.existed is False

    run(db_uri, scenario)


def test_a_class_gives_its_jobs_a_key_and_the_sync_producer_follows_it(db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        a = rec.enqueue(UniqueRecord(db_uri, n=7))
        b = UniqueRecord(db_uri, n=7).as_job_of(rec).enqueue()
        c = rec.enqueue(UniqueRecord(db_uri, n=8))
        assert (a.existed, b.existed, c.existed) == (False, True, False)
        assert b == a
        assert c != a
        assert rec.db.scheduled.find_one({"_id": a})["unique"]["key"] == "record-7"
        # The builder's key wins over the class's.
        d = UniqueRecord(db_uri, n=7).as_job_of(rec).unique("other").enqueue()
        assert d.existed is False
        assert d != a


@pytest.mark.parametrize("key", [42, None, b"bytes", "", "  ", "x" * 513])
def test_a_key_that_is_not_a_non_empty_string_is_refused(db_uri: str, key: Any) -> None:
    with Recruiter.connect(db_uri) as rec:
        with pytest.raises(JobRefused, match="unique key") as info:
            Record(db_uri).as_job_of(rec).unique(key).enqueue()
        assert "\n" not in str(info.value)
        with pytest.raises(JobRefused, match="unique"):
            Record(db_uri).as_job_of(rec).unique("k", scope="sometimes")
        with pytest.raises(JobRefused, match="on_conflict"):
            Record(db_uri).as_job_of(rec).unique("k", on_conflict="replace-all")
        with pytest.raises(JobRefused, match="unique_key"):
            rec.enqueue(UniqueRecord(db_uri, n=-1))  # its unique_key() gives a number
        assert rec.db.scheduled.count_documents({}) == 0


def test_enqueue_many_reports_which_items_existed_in_one_insert(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        held = await Record(h.db_uri, n=0).as_job_of(h.producer).unique("k0").enqueue()
        h.commands.clear()
        handles = await h.producer.enqueue_many([
            Record(h.db_uri, n=1).as_job_of(h.producer).unique("k0"),  # held before
            Record(h.db_uri, n=2).as_job_of(h.producer).unique("k1"),
            Record(h.db_uri, n=3),  # no key
            Record(h.db_uri, n=4).as_job_of(h.producer).unique("k1"),  # held by item 1
        ])
        assert [hd.existed for hd in handles] == [True, False, False, True]
        assert handles[0] == held
        assert handles[3] == handles[1]
        assert await h.db.scheduled.count_documents({}) == 3
        inserts = h.commands.named("insert", "scheduled")
        assert len(inserts) == 3  # the batch, then one more try for each refused item
        assert len(inserts[0]["documents"]) == 4
        assert inserts[0]["ordered"] is False

    run(db_uri, scenario)


def test_a_period_keeps_the_key_after_the_job_ended_then_frees_it(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        def job() -> Any:
            return Record(h.db_uri).as_job_of(h.producer).unique("daily-report", scope=timedelta(hours=1)).enqueue()

        first = await job()
        assert await finish(h) == first
        again = await job()
        assert again == first
        assert again.existed is True
        assert again.state == "archived"
        reservation = await h.db.unique_keys.find_one({"_id": "daily-report"})
        assert reservation["job"] == first
        h.clock.advance(timedelta(hours=1, seconds=1))
        later = await job()
        assert later.existed is False
        assert later != first
        assert (await h.db.unique_keys.find_one({"_id": "daily-report"}))["job"] == later

    run(db_uri, scenario)


def test_forever_never_makes_a_second_job_and_racing_producers_make_one(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        racing = await asyncio.gather(*[
            Record(h.db_uri, n=i).as_job_of(h.producer).unique("once", scope="forever").enqueue() for i in range(8)])
        assert len(set(racing)) == 1
        assert sum(not r.existed for r in racing) == 1
        assert await finish(h) == racing[0]
        h.clock.advance(timedelta(days=3650))
        again = await Record(h.db_uri).as_job_of(h.producer).unique("once", scope="forever").enqueue()
        assert again == racing[0]
        assert again.existed is True
        assert await h.db.scheduled.count_documents({}) == 0

    run(db_uri, scenario)


def test_resubmit_on_conflict_reschedules_a_pending_job(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        first = await Record(h.db_uri).as_job_of(h.producer).unique("k").schedule_in(hours=1).enqueue()
        assert first.state == "delayed"
        h.clock.advance(timedelta(minutes=1))
        again = await Record(h.db_uri).as_job_of(h.producer).unique("k", on_conflict="resubmit").enqueue()
        assert again == first
        assert again.existed is True
        assert again.state == "queued"
        assert (await h.job(first))["scheduled_at"] == h.clock.now()
        # Without the option, the time stays.
        await Record(h.db_uri).as_job_of(h.producer).unique("k").schedule_in(hours=5).enqueue()
        assert (await h.job(first))["scheduled_at"] == h.clock.now()

    run(db_uri, scenario)


def test_resubmit_on_conflict_runs_a_running_job_once_more_afterwards(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        first = await AsyncRecord(h.db_uri, n=1, sleep_s=0.2).as_job_of(h.producer).unique("k").enqueue()
        process, slot = await h.worker("w1")
        await h.round()
        assert await process.poll(slot) == first
        working = asyncio.create_task(process.work(slot, first))
        for _ in range(2):
            again = await AsyncRecord(h.db_uri, n=2).as_job_of(h.producer).unique(
                "k", on_conflict="resubmit").enqueue()
            assert again == first
            assert again.existed is True
        await asyncio.wait_for(working, timeout=10)
        await h.round()  # applies the outcome: back in the queue, not archived
        assert await h.archived(first) is None
        job = await h.job(first)
        assert (job["status"], job["locked"], job["resubmits"], job["attempts"]) == ("queued", False, 1, 1)
        assert "resubmit" not in job
        assert (await h.round()).assigned == 1
        assert await take_and_work(process, slot) == first
        await h.round()
        archived = await h.archived(first)
        assert archived["why"] == "done"
        assert archived["attempts"] == 2
        assert archived["resubmits"] == 1
        assert [e["outcome"] for e in archived["executions"]] == ["done", "done"]
        assert "resubmit" not in archived
        assert len(await h.ledger(event="start")) == 2

    run(db_uri, scenario)


def test_resubmit_on_conflict_enqueues_a_finished_job_again(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        first = await Record(h.db_uri).as_job_of(h.producer).unique("k", scope="forever").enqueue()
        assert await finish(h) == first
        again = await Record(h.db_uri, n=5).as_job_of(h.producer).unique(
            "k", scope="forever", on_conflict="resubmit").enqueue()
        assert again != first
        assert again.existed is False
        assert again.state == "queued"
        assert (await h.db.unique_keys.find_one({"_id": "k"}))["job"] == again
        assert (await h.archived(first))["why"] == "done"  # the archived job is never written again
        # ... and with the default, the new holder is what a conflict returns.
        third = await Record(h.db_uri).as_job_of(h.producer).unique("k", scope="forever").enqueue()
        assert third == again
        assert third.existed is True

    run(db_uri, scenario)


def test_a_failing_unique_job_keeps_its_key_while_it_waits_for_its_retry(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        first = await AlwaysFails(h.db_uri).as_job_of(h.producer).unique("k").retry_with(
            RetryManyTimes(times=2, wait=timedelta(minutes=5))).enqueue()
        await finish(h)
        assert (await h.job(first))["status"] == "retrying"
        again = await Record(h.db_uri).as_job_of(h.producer).unique("k").enqueue()
        assert again == first
        assert again.existed is True
        assert again.state == "retrying"

    run(db_uri, scenario)


def test_the_sync_enqueue_many_takes_keys_that_reserve_too(db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        first = rec.enqueue_many([Record(db_uri, n=1).as_job_of(rec).unique("f", scope="forever"),
                                  Record(db_uri, n=2).as_job_of(rec).unique("u"),
                                  Record(db_uri, n=3)])
        again = rec.enqueue_many([Record(db_uri, n=4).as_job_of(rec).unique("u"),
                                  Record(db_uri, n=5).as_job_of(rec).unique("f", scope="forever"),
                                  Record(db_uri, n=6).as_job_of(rec).unique("p", scope=timedelta(days=1))])
        assert [h.existed for h in first] == [False, False, False]
        assert [h.existed for h in again] == [True, True, False]
        assert again[0] == first[1]
        assert again[1] == first[0]
        assert rec.db.scheduled.count_documents({}) == 4
        assert {d["_id"] for d in rec.db.unique_keys.find()} == {"f", "p"}


@pytest.mark.parametrize("reservation", [{"job": "not-an-id"}, {"job": None}, {"job": ObjectId(), "until": "never"}])
def test_a_malformed_reservation_refuses_its_key_in_one_line_and_writes_nothing(
        db_uri: str, db: Any, reservation: dict[str, Any]) -> None:
    db.unique_keys.insert_one({"_id": "hand-made", **reservation})
    with Recruiter.connect(db_uri) as rec:
        for scope in ("forever", timedelta(hours=1)):
            with pytest.raises(JobRefused) as refused:
                Record(db_uri, 1).as_job_of(rec).unique("hand-made", scope=scope).enqueue()
            assert "reservation in unique_keys is malformed" in str(refused.value)
            assert "\n" not in str(refused.value)
        assert db.scheduled.count_documents({}) == 0
        assert db.unique_keys.find_one({"_id": "hand-made"}) == {"_id": "hand-made", **reservation}
        assert Record(db_uri, 1).as_job_of(rec).unique("another", scope="forever").enqueue().existed is False
