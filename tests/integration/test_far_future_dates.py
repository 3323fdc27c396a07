"""Dates stored far in the future, on the real server: a lease, a heartbeat and a rate-limit bucket
dated in year 9999 are set aside as malformed, with a warning, and never stop progress."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from structlog.testing import capture_logs

from recruiter.processes.cleaner import CleanerConfig, CleanerProcess
from recruiter.processes.recruiter import RecruiterConfig, RecruiterProcess
from recruiter.processes.worker.runtime import WorkerConfig
from recruiter.store.heartbeats import process_key
from recruiter.store.leases import MAX_TTL, Lease
from tests.integration.test_processes_inproc import Harness, run, take_and_work
from tests.workables import Record

Y9999 = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)


def test_a_lease_expiring_in_year_9999_is_taken_over_once_with_a_higher_epoch(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.db.metadata.insert_many([
            {"_id": "recruiter", "owner": "ghost", "epoch": 1, "expires_at": Y9999, "session": {"id": "x"}},
            {"_id": "cleaner", "owner": "ghost", "epoch": 4, "expires_at": Y9999},
        ])
        ttl = timedelta(seconds=10)
        first = Lease(h.db.metadata, "recruiter", "first", ttl, h.clock)
        second = Lease(h.db.metadata, "recruiter", "second", ttl, h.clock)

        with capture_logs() as logs:
            assert await first.acquire() is True
            assert await second.acquire() is False  # two standbys: one wins
        assert first.epoch == 2  # the fencing epoch still increases
        holder = await first.holder()
        assert holder is not None
        assert (holder["owner"], holder["epoch"], holder["expires_at"]) == ("first", 2, h.clock.now() + ttl)
        (warning,) = [e for e in logs if e["event"] == "lease.malformed"]
        assert (warning["log_level"], warning["lease"], warning["owner"]) == ("warning", "recruiter", "ghost")
        assert warning["expires_at"].startswith("9999-12-31")

        # The processes take it as they take any expired lease: the cleaner's too.
        recruiter = RecruiterProcess(h.db, h.clock, RecruiterConfig(), owner="successor")
        h.clock.advance(ttl + timedelta(seconds=1))
        job_id = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        process, slot = await h.worker("w1")
        assert await recruiter.lease.acquire()
        assert recruiter.lease.epoch == 3
        assert (await recruiter.fenced_round()).assigned == 1
        await take_and_work(process, slot)
        await recruiter.fenced_round()
        cleaner = CleanerProcess(h.db, h.clock, CleanerConfig())
        assert await cleaner.lease.acquire()
        assert cleaner.lease.epoch == 5
        await cleaner.fenced_clean()
        assert (await h.archived(job_id) or {}).get("why") == "done"

        # A lease as long as the longest ttl, read by a standby whose clock is an hour behind, is obeyed.
        assert await Lease(h.db.metadata, "long", "holder", MAX_TTL, h.clock).acquire()
        h.clock.set(h.clock.now() - timedelta(hours=1))
        assert await Lease(h.db.metadata, "long", "standby", ttl, h.clock).acquire() is False

    run(db_uri, scenario)


def test_a_heartbeat_dated_in_year_9999_is_given_no_work_and_its_worker_is_removed_as_dead(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.worker("ghost")
        await h.db.heartbeats.update_one({"_id": process_key((await h.roster("ghost"))["process"])},
                                         {"$set": {"last_seen_at": Y9999, "fresh_until": Y9999}})
        job_id = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()

        with capture_logs() as logs:
            assert (await h.round()).assigned == 0  # not live: given no work
        assert [e["worker_id"] for e in logs if e["event"] == "heartbeat.malformed"] == ["ghost"]
        cleaner = await h.cleaner()
        assert (await cleaner.clean(cleaner.c)).dead_workers == 1
        assert await h.roster("ghost") is None

        process, slot = await h.worker("live")
        assert (await h.round()).assigned == 1
        assert await take_and_work(process, slot) == job_id

    run(db_uri, scenario)


def test_a_job_held_by_a_worker_whose_heartbeat_jumps_to_year_9999_is_taken_back(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        await h.worker("ghost")
        assert (await h.round()).assigned == 1
        await h.db.heartbeats.update_one({"_id": process_key((await h.roster("ghost"))["process"])},
                                         {"$set": {"last_seen_at": Y9999, "fresh_until": Y9999}})
        h.clock.advance(timedelta(seconds=WorkerConfig().heartbeat_interval_s))  # the next stale read

        assert (await h.round()).busy  # the round takes it back
        job = await h.job(job_id)
        assert job is not None
        assert (job["locked"], job["status"]) == (False, "queued")
        assert await h.roster("ghost") is None

    run(db_uri, scenario)


def test_a_rate_limit_bucket_dated_in_year_9999_is_set_aside_and_its_group_runs_again(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.db.metadata.insert_one({"_id": "limits", "groups": {"bench": {"rate": "1000/s", "burst": 5}}})
        await h.db.metadata.insert_one({"_id": "fairness", "limiter": {"groups": {"bench": {"t": 0.0, "at": Y9999}},
                                                                       "tenants": {}}})
        for i in range(3):
            await h.worker(f"w{i}")
        for i in range(3):
            await Record(h.db_uri, n=i).as_job_of(h.producer).in_group("bench").enqueue()

        with capture_logs() as logs:
            first = (await h.round()).assigned
        (warning,) = [e for e in logs if e["event"] == "limiter.malformed"]
        assert "limiter.groups.bench.at" in warning["reason"]
        h.clock.advance(timedelta(seconds=1))
        assert first + (await h.round()).assigned == 3
        stored = await h.db.metadata.find_one({"_id": "fairness"})
        assert stored["limiter"]["groups"]["bench"]["at"] < Y9999  # written afresh

    run(db_uri, scenario)

