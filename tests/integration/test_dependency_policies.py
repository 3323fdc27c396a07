"""Per-dependency, per-outcome policies (recruiter.domain.dependency_policy) on the real server; the
fan-in's last two upstreams racing; and random DAGs (Hypothesis) driven through the store."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from bson import ObjectId
from hypothesis import HealthCheck, given, settings
from pymongo import AsyncMongoClient

from recruiter.domain.cancel import WAS_WAITING
from recruiter.domain.dependencies import HELD_UNTIL
from recruiter.domain.dependency_policy import OUTCOMES, SKIPPED, checked_policy
from recruiter.domain.job import JobOptions
from recruiter.domain.waiting_actions import WAS_DELETED
from recruiter.processes.cleaner import CleanReport, Pass
from recruiter.store.cancel import cancel_job
from recruiter.store.dependencies import release_dependents
from recruiter.store.layout import Collections
from recruiter.store.waiting_actions import delete_waiting
from tests.flow_workables import ReadsResults, Step
from tests.integration.test_dependencies import sweep, work_all
from tests.integration.test_processes_inproc import START, Harness, run
from tests.unit.test_dependency_policy import _expected, dags
from tests.workables import AlwaysFails, Record


def test_a_skipped_dependent_names_its_upstream_and_its_own_dependents_follow_their_policy(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        p = h.producer
        bad = await AlwaysFails(h.db_uri).as_job_of(p).enqueue()
        optional = await Record(h.db_uri, n=2).as_job_of(p).after(bad, on={"failed": "skip"}).enqueue()
        joins = await Record(h.db_uri, n=3).as_job_of(p).after(optional, on={"skipped": "run"}).enqueue()
        stops = await Record(h.db_uri, n=4).as_job_of(p).after(optional).enqueue()
        guarded = await h.job(optional)
        assert guarded is not None
        assert guarded["after"]["pending"] == [bad, optional]  # its guard: a 0.2.0 leader leaves it
        workers = [await h.worker("w1")]

        assert await work_all(h, workers) == [bad]
        skipped = await h.archived(optional)
        assert skipped is not None
        assert skipped["why"] == SKIPPED
        assert skipped["reason"] == (f"job {bad} it waited for ended not-scheduled-by-retry-policy, "
                                     "which its policy skips on")
        assert skipped["after"]["pending"] == []  # its guard is not history
        cancelled = await h.archived(stops)  # a skipped upstream cancels by default
        assert cancelled is not None
        assert cancelled["why"] == "upstream-failed"
        assert cancelled["reason"] == f"job {optional} it waited for ended skipped"
        released = await h.job(joins)
        assert released is not None
        assert released["scheduled_at"] == START
        assert await work_all(h, workers) == [joins]

    run(db_uri, scenario)


def test_a_guarded_job_is_released_by_the_round_and_by_the_sweep(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        p = h.producer
        first = await Record(h.db_uri, n=1).as_job_of(p).enqueue()
        later = await Record(h.db_uri, n=2).as_job_of(p).schedule_in(hours=1).enqueue()
        by_round = await Record(h.db_uri, n=3).as_job_of(p).after(first, on={"failed": "skip"}).enqueue()
        by_sweep = await Record(h.db_uri, n=4).as_job_of(p).after(later, on={"cancelled": "run"}).enqueue()
        workers = [await h.worker("w1")]
        assert await work_all(h, workers) == [first]
        released = await h.job(by_round)
        assert released is not None
        assert released["scheduled_at"] == START
        assert released["after"]["pending"] == []
        assert "held" not in released["after"]

        doc = await h.job(later)  # archived by a process that resolves no dependent (a 0.2.0 client)
        assert doc is not None
        await h.db.archived.insert_one({**doc, "why": "cancelled", "archived_at": START})
        await h.db.scheduled.delete_one({"_id": later})
        assert await sweep(h) == 1
        swept = await h.job(by_sweep)
        assert swept is not None
        assert swept["scheduled_at"] == START
        assert await sweep(h) == 0

    run(db_uri, scenario)


def test_the_last_two_upstreams_archived_at_once_decide_the_fan_in_exactly_once(db_uri: str) -> None:
    """Two threads, each with its own client, archive one of the last two upstreams and release
    its dependents at the same instant: the dependent is decided (here archived) by one only."""
    async def scenario(h: Harness) -> None:
        for attempt in range(6):
            one = await Record(h.db_uri, n=1).as_job_of(h.producer).schedule_in(hours=1).enqueue()
            two = await Record(h.db_uri, n=2).as_job_of(h.producer).schedule_in(hours=1).enqueue()
            policy = {"on": {"cancelled": "skip"}} if attempt % 2 else {}
            final = await Record(h.db_uri, n=3).as_job_of(h.producer).after(one, two, **policy).enqueue()
            decided = await asyncio.to_thread(_race, h, [one, two], h.clock.now())
            assert sum(decided) == 1, decided
            archived = await h.archived(final)
            assert archived is not None
            assert archived["why"] == (SKIPPED if attempt % 2 else "upstream-failed")
            assert await h.job(final) is None

    run(db_uri, scenario)


def _race(h: Harness, upstreams: list[ObjectId], now: datetime) -> list[int]:
    barrier = threading.Barrier(len(upstreams))
    decided = [0] * len(upstreams)

    def archive_one(k: int) -> None:
        async def go() -> None:
            client: AsyncMongoClient[Any] = AsyncMongoClient(h.db_uri)
            try:
                c = Collections.of(client[h.db.name])
                doc = await c.scheduled.find_one({"_id": upstreams[k]})
                assert doc is not None
                await c.archived.insert_one({**doc, "why": "cancelled", "archived_at": now})
                await c.scheduled.delete_one({"_id": upstreams[k]})
                barrier.wait()
                decided[k] = len(await release_dependents(c, {upstreams[k]: "cancelled"}, now))
            finally:
                await client.close()
        asyncio.run(go())

    threads = [threading.Thread(target=archive_one, args=(k,)) for k in range(len(upstreams))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return decided


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dags())
def test_random_dags_through_the_store_end_every_job_once_in_order(
        db_uri: str, dag: tuple[list[list[tuple[int, dict[str, str]]]], list[str], list[int]]) -> None:
    """Every job of a random DAG enqueued in one batch; a job due (released) "runs": it is archived
    with its drawn outcome and its dependents released by the store, as a round does."""
    deps, outcomes, order = dag

    async def scenario(h: Harness) -> None:
        c = h.recruiter.c
        await c.scheduled.delete_many({})
        await c.archived.delete_many({})
        ids = [ObjectId() for _ in deps]
        builders = [Record(h.db_uri, n=k).as_job_of(h.producer) for k in range(len(deps))]
        builders = [replace(b, options=JobOptions(after=tuple(ids[d] for d, _ in deps[k]), job_id=ids[k],
                                                  policies=tuple(checked_policy("cancel", p) for _, p in deps[k])))
                    for k, b in enumerate(builders)]
        await h.producer.enqueue_many(builders)
        ran: list[int] = []
        for _ in range(len(deps) + 1):
            due = [d["_id"] async for d in c.scheduled.find({"scheduled_at": {"$lt": HELD_UNTIL}})]
            due.sort(key=lambda i: order.index(ids.index(i)))
            for job_id in due:
                k = ids.index(job_id)
                ended = {d["_id"] async for d in c.archived.find({"_id": {"$in": [ids[d] for d, _ in deps[k]]}})}
                assert len(ended) == len(deps[k]), f"job {k} released before its dependencies ended"
                assert k not in ran, f"job {k} ran twice"
                ran.append(k)
                await _archive(c, job_id, outcomes[k])
        assert await c.scheduled.count_documents({}) == 0, "a job never ended"
        whys = {ids.index(d["_id"]): d["why"] async for d in c.archived.find({}, {"why": 1})}
        assert set(whys) == set(range(len(deps)))
        for k in range(len(deps)):
            if k not in ran:
                fate = _expected(k, deps[k], whys)
                assert whys[k] == {"skip": SKIPPED, "cancel": "upstream-failed"}[fate], (k, whys[k], fate)

    run(db_uri, scenario)


async def _archive(c: Collections, job_id: ObjectId, why: str) -> None:
    doc = await c.scheduled.find_one({"_id": job_id})
    assert doc is not None
    await c.archived.insert_one({**doc, "why": why, "archived_at": START})
    await c.scheduled.delete_one({"_id": job_id})
    await release_dependents(c, {job_id: why}, START)


def test_a_running_job_reads_its_dependencies_results_by_id_and_step_a_dropped_one_says_so(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        p = h.producer
        fetch = await Step(h.db_uri, n=7).as_job_of(p).enqueue()
        await h.db.scheduled.update_one({"_id": fetch}, {"$set": {"workflow": {"id": ObjectId(), "name": "w",
                                                                                "step": "fetch"}}})
        big = await Step(h.db_uri, n=8).as_job_of(p).schedule_in(hours=1).enqueue()
        stopped = await Step(h.db_uri, n=9).as_job_of(p).schedule_in(hours=1).enqueue()
        reader = await ReadsResults(h.db_uri).as_job_of(p).after(fetch, big, stopped, if_failed="run").enqueue()
        # big ended done with its result dropped (over the size limit), as a worker archives it.
        doc = await h.job(big)
        assert doc is not None
        await h.db.archived.insert_one({**doc, "why": "done", "archived_at": START,
                                        "result_dropped": {"reason": "over the size limit", "size_bytes": 2 << 20}})
        await h.db.scheduled.delete_one({"_id": big})
        await p.cancel(stopped)
        workers = [await h.worker("w1")]
        assert await work_all(h, workers) == [fetch]
        assert await sweep(h) == 1
        assert await work_all(h, workers) == [reader]
        [start] = await h.ledger(event="start", job=str(reader))
        assert start["seen"]["fetch"] == {"why": "done", "result": 7, "dropped": None, "step": "fetch"}
        assert start["seen"][str(fetch)] == start["seen"]["fetch"]
        assert start["values"][str(fetch)] == 7
        assert start["seen"][str(big)]["dropped"] == "over the size limit"
        assert start["seen"][str(big)]["result"] is None
        assert start["values"][str(big)] == (f"unavailable: job {big} ended done, but its result was dropped: "
                                             "over the size limit")
        assert start["values"][str(stopped)] == f"unavailable: job {stopped} ended cancelled: it has no result"

    run(db_uri, scenario)


def test_every_terminal_state_of_an_upstream_resolves_its_dependents_at_once(db_uri: str) -> None:
    """A cancel (sync and asyncio), an operator's delete, a quarantine by the round, the cleaner
    archiving a job whose worker is gone: each decides the dependents itself, no sweep needed."""
    async def scenario(h: Harness) -> None:
        p = h.producer

        async def upstream_and_dependents() -> tuple[ObjectId, ObjectId, ObjectId]:
            up = await Record(h.db_uri).as_job_of(p).schedule_in(hours=1).enqueue()
            stops = await Record(h.db_uri).as_job_of(p).after(up).enqueue()
            runs = await Record(h.db_uri).as_job_of(p).after(up, on={o: "run" for o in OUTCOMES}).enqueue()
            return up, stops, runs

        async def resolved(up: ObjectId, stops: ObjectId, runs: ObjectId, why: str) -> None:
            stopped = await h.archived(stops)
            assert stopped is not None, f"{why}: its dependent is still held"
            assert stopped["why"] == "upstream-failed"
            assert stopped["reason"] == f"job {up} it waited for ended {why}"
            released = await h.job(runs)
            assert released is not None
            assert released["scheduled_at"] == START, f"{why}: not released"

        up, stops, runs = await upstream_and_dependents()
        assert cancel_job(h.sync_db, up, START).state == WAS_WAITING  # the sync client's cancel
        await resolved(up, stops, runs, "cancelled")
        up, stops, runs = await upstream_and_dependents()
        assert (await p.cancel(up)).state == WAS_WAITING
        await resolved(up, stops, runs, "cancelled")
        up, stops, runs = await upstream_and_dependents()
        assert delete_waiting(h.sync_db, up, START).state == WAS_DELETED
        await resolved(up, stops, runs, "deleted")

        up, stops, runs = await upstream_and_dependents()
        await h.db.scheduled.update_one({"_id": up}, {"$set": {"scheduled_at": START, "tenant": 7}},
                                        bypass_document_validation=True)
        await h.worker("w1")
        await h.round()  # meets it, quarantines it: in the same transaction, its dependents
        await resolved(up, stops, runs, "malformed")

        up = await Record(h.db_uri).as_job_of(p).on_worker("w9", timedelta(seconds=1)).enqueue()
        stops = await Record(h.db_uri).as_job_of(p).after(up).enqueue()
        runs = await Record(h.db_uri).as_job_of(p).after(up, on={"failed": "run"}).enqueue()
        cleaner = await h.cleaner()
        later = START + timedelta(hours=1)  # past its worker deadline: the cleaner archives it
        assert await cleaner.archive_unplaced(Pass(cleaner.c, later, later, CleanReport())) == 1
        await resolved(up, stops, runs, "worker-deadline")
        assert await sweep(h) == 0

    run(db_uri, scenario)
