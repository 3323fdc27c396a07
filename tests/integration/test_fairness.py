"""Fair assignment on the real server: the cursor in metadata, pause and resume, round cost."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pymongo import MongoClient

from recruiter.processes.recruiter import RecruiterConfig, RecruiterProcess
from recruiter.store import metadata, strict
from recruiter.store.readahead import WINDOW
from tests.integration.test_processes_inproc import Harness, run
from tests.workables import Record


def switch(h: Harness, kind: str, name: str, pause: bool) -> None:
    """What ``recruiter groups|tenants pause|resume`` does."""
    client: MongoClient[Any] = MongoClient(h.db_uri, event_listeners=strict.listeners())
    try:
        metadata.switch_paused(client.get_default_database().metadata, kind, [name], pause)
    finally:
        client.close()


async def assigned(h: Harness) -> dict[str, Any]:
    """Job id -> tenant of every locked job."""
    return {d["_id"]: d.get("tenant") for d in await h.db.scheduled.find({"locked": True}).to_list()}


def test_tenants_round_robin_and_the_cursor_survives_failover(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        p = h.producer
        ids = {}
        for tenant, n in (("A", 4), ("B", 2), ("C", 1)):
            for i in range(n):
                ids[f"{tenant}{i}"] = await Record(h.db_uri, n=i).as_job_of(p).for_tenant(tenant).enqueue()
        names = {v: k for k, v in ids.items()}

        workers = []

        async def one_round(recruiter: RecruiterProcess, worker: str) -> str:
            workers.append((await h.worker(worker))[0])
            assert await recruiter.lease.acquire()
            assert (await recruiter.round()).assigned == 1
            return str(names[(await h.roster(worker))["assigned_to"][worker]])

        assert [await one_round(h.recruiter, f"w{i}") for i in range(2)] == ["A0", "B0"]
        stored = await h.db.metadata.find_one({"_id": "fairness"})
        assert stored["last_group"] == "generic"
        assert stored["last_tenant"] == {"generic": "B"}

        # The leader dies; a successor goes on after B, not from the start.
        h.clock.advance(timedelta(seconds=RecruiterConfig().lease_ttl_s + 1))
        for w in workers:
            await w.heartbeat()  # the workers live on (their jobs are not taken back)
        successor = RecruiterProcess(h.db, h.clock, RecruiterConfig(), owner="successor")
        assert [await one_round(successor, f"w{i}") for i in range(2, 6)] == ["C0", "A1", "B1", "A2"]

    run(db_uri, scenario)


def test_pausing_a_group_stops_its_assignments_within_one_round(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        p = h.producer
        for i in range(4):
            await h.worker(f"w{i}", "a", "b")
        assert (await h.round()).assigned == 0  # a leader at work, nothing paused yet
        a_jobs = [await Record(h.db_uri, n=i).as_job_of(p).in_group("a").enqueue() for i in range(3)]
        b_job = await Record(h.db_uri, n=9).as_job_of(p).in_group("b").enqueue()

        switch(h, "group", "a", pause=True)
        assert (await h.round()).assigned == 1
        assert set(await assigned(h)) == {b_job}
        assert await h.db.scheduled.count_documents({"group": "a", "locked": False, "status": "queued"}) == 3
        assert (await h.round()).assigned == 0  # still paused: the free workers wait

        switch(h, "group", "a", pause=False)
        assert (await h.round()).assigned == 3
        assert set(await assigned(h)) == {*a_jobs, b_job}

    run(db_uri, scenario)


def test_pausing_a_tenant_keeps_its_jobs_queued(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        p = h.producer
        noisy = [await Record(h.db_uri, n=i).as_job_of(p).for_tenant("noisy%$example").enqueue() for i in range(3)]
        quiet = await Record(h.db_uri, n=9).as_job_of(p).enqueue()
        for i in range(3):
            await h.worker(f"w{i}")
        switch(h, "tenant", "noisy%$example", pause=True)
        assert (await h.round()).assigned == 1
        assert set(await assigned(h)) == {quiet}
        switch(h, "tenant", "noisy%$example", pause=False)
        assert (await h.round()).assigned == 2
        assert len(set(await assigned(h)) & set(noisy)) == 2

    run(db_uri, scenario)


def test_steady_round_with_one_tenant_reads_the_same_whatever_the_backlog_and_writes_no_cursor(
        db_uri: str) -> None:
    async def steady_round(h: Harness, first_worker: int) -> tuple[int, int]:
        """A round for 8 new workers, after one that served 8 others: (candidate finds, documents)."""
        for i in range(first_worker, first_worker + 8):
            await h.worker(f"w{i}")
        h.commands.clear()
        assert (await h.round()).assigned == 8
        reads = [e for e in h.commands.events if e[0] in ("find", "aggregate") and e[1] == "scheduled"]
        # Every candidate read is a find of the shape the embedded server serves from the
        # candidates index (no $unionWith, no $or, at most one range after the equalities).
        assert {e[0] for e in reads} == {"find"}
        for _, _, cmd in reads:
            ranges = [k for k, v in cmd["filter"].items() if isinstance(v, dict)]
            assert len(ranges) <= 1, cmd["filter"]
            assert not any(k.startswith("$") for k in cmd["filter"]), cmd["filter"]
        # The round's only metadata write is the fence of its transaction, not the cursor.
        cursor_writes = [u for c in h.commands.named("update", "metadata") for u in c["updates"]
                         if u["q"].get("_id") != "recruiter"]
        assert cursor_writes == []
        return len(reads), h.commands.documents

    async def scenario(h: Harness) -> None:
        await h.producer.enqueue_many([Record(h.db_uri, n=i) for i in range(300)])
        for i in range(8):
            await h.worker(f"w{i}")
        assert (await h.round()).assigned == 8
        small = await steady_round(h, 8)
        await h.producer.enqueue_many([Record(h.db_uri, n=i) for i in range(3_000)])
        assert (await h.round()).assigned == 0  # no free worker: the new jobs are only read
        big = await steady_round(h, 16)
        # Ten times the backlog: the same reads, and no more documents than about one window
        # (64 jobs, what is left of it depends on where the round stands in it, not on the backlog).
        assert big[0] == small[0], (small, big)
        assert small[1] <= 2 * WINDOW, (small, big)
        assert big[1] <= 2 * WINDOW, (small, big)

    run(db_uri, scenario)
