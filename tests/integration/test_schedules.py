"""Periodic jobs on the real server (issue 15): the upsert from code, bad input, and the
leader's firing, driven step by step with a manual clock (see ``test_processes_inproc``).

- ``rec.schedule`` inserts, updates a changed definition (keeping ``last_fire`` and
  ``skipped``), and only refreshes ``declared_at`` for an unchanged one;
- a bad definition is one line and stores nothing;
- a due slot fires once, with its ``unique_keys`` reservation; firing again (a
  repeated round, a successor) fires nothing twice; catch-up and overlap are counted;
- a malformed schedule document is skipped with one warning, and the others still fire.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId
from structlog.testing import capture_logs

from recruiter import Recruiter, ScheduleRefused
from recruiter.domain.clock import ManualClock
from recruiter.domain.schedule_view import read_schedule
from recruiter.processes.recruiter import RecruiterConfig, RecruiterProcess
from recruiter.retry import RetryManyTimes
from tests.integration.test_processes_inproc import START, Harness, run, take_and_work
from tests.workables import AlwaysFails, Record

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_upsert_create_update_unchanged(db_uri: str, db: Any) -> None:
    clock = ManualClock(T0)
    with Recruiter.connect(db_uri, clock=clock) as rec:
        job = Record(db_uri, 1).as_job_of(rec).in_group("reports").with_priority("high")
        view = rec.schedule("nightly", cron="0 3 * * *", tz="Europe/Rome", job=job)
        assert view.change == "created"
        assert view.next_fire_at == datetime(2026, 1, 1, 2, tzinfo=UTC)  # 03:00 in Rome (CET)
        doc = db.schedules.find_one({"_id": "nightly"})
        assert doc["job"]["group"] == "reports"
        assert doc["job"]["priority"] == "high"
        assert "_id" not in doc["job"]
        assert "unique" not in doc["job"]
        assert "scheduled_at" not in doc["job"]
        assert doc["skipped"] == 0
        assert doc["last_fire"] is None
        assert doc["paused"] is False
        db.schedules.update_one({"_id": "nightly"}, {"$set": {"skipped": 4, "last_fire": {"x": 1}}})

        clock.advance(timedelta(minutes=5))
        again = rec.schedule("nightly", cron="0 3 * * *", tz="Europe/Rome", job=job)
        assert again.change == "unchanged"
        assert again.version == view.version
        touched = db.schedules.find_one({"_id": "nightly"})
        assert touched["declared_at"] == clock.now()
        assert touched["updated_at"] == T0

        changed = rec.schedule("nightly", cron="0 4 * * *", tz="Europe/Rome", job=job)
        assert changed.change == "updated"
        assert changed.version != view.version
        doc = db.schedules.find_one({"_id": "nightly"})
        assert doc["cron"] == "0 4 * * *"
        assert doc["next_fire_at"] == datetime(2026, 1, 1, 3, tzinfo=UTC)
        assert doc["skipped"] == 4
        assert doc["last_fire"] == {"x": 1}
        assert db.schedules.count_documents({}) == 1


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"cron": "61 * * * *"}, "invalid cron expression"),
    ({"cron": "0 3 * * *", "tz": "Mars/Olympus"}, "unknown timezone"),
    ({"every": timedelta(0)}, "every must be at least"),
    ({"every": "0s"}, "every must be at least"),
    ({"every": timedelta(seconds=-5)}, "every must not be negative"),
    ({}, "exactly one of cron= or every="),
    ({"cron": "* * * * *", "every": "1m"}, "exactly one of cron= or every="),
    ({"every": "1m", "overlap": "sometimes"}, "overlap must be"),
    ({"every": "1m", "catch_up": "some"}, "catch_up must be"),
    ({"every": "1m", "jitter": "2m"}, "jitter"),
    # Issue 22: out of range values are one line, not an OverflowError.
    ({"every": 1e300}, "too large"),
    ({"every": timedelta(days=365 * 10_000)}, "too large"),
    ({"every": "1000000d"}, "too large"),
    ({"every": "1m", "jitter": 1e300}, "too large"),
    ({"cron": "* * * * *", "jitter": "2h"}, "jitter (7200s) must be shorter than the interval (60s)"),
    ({"every": "1m", "catch_up": timedelta(days=10**6)}, "catch_up must be"),
])
def test_bad_definitions_are_one_line_and_store_nothing(db_uri: str, db: Any, kwargs: dict[str, Any],
                                                        says: str) -> None:
    with Recruiter.connect(db_uri) as rec, pytest.raises(ScheduleRefused) as info:
        rec.schedule("bad", job=Record(db_uri, 1).as_job_of(rec), **kwargs)
    message = str(info.value)
    assert says in message
    assert "\n" not in message
    assert "nothing was stored" in message
    assert db.schedules.count_documents({}) == 0


def test_a_job_that_cannot_be_stored_is_refused(db_uri: str, db: Any) -> None:
    with Recruiter.connect(db_uri) as rec:
        for job in (Record(db_uri, 1).as_job_of(rec).unique("k"), Record(db_uri, "x" * (17 * 1024 * 1024))):
            with pytest.raises(ScheduleRefused) as info:
                rec.schedule("bad", every="1m", job=job)
            assert "\n" not in str(info.value)
    assert db.schedules.count_documents({}) == 0


async def fire(h: Harness) -> int:
    assert await h.recruiter.lease.acquire()
    h.recruiter.firer.changed()
    return await h.recruiter.fire_schedules()


async def occurrences(h: Harness) -> list[dict[str, Any]]:
    return [d async for d in h.db.scheduled.find({"schedule": {"$exists": True}}).sort("schedule.slot", 1)]


def test_a_due_slot_fires_once_with_its_reservation(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.producer.schedule("tick", every="1m", job=Record(db_uri, 1).as_job_of(h.producer).for_tenant("t"),
                                  overlap="allow")
        assert await fire(h) == 0  # not due yet
        h.clock.advance(timedelta(minutes=1))
        assert await fire(h) == 1
        assert await fire(h) == 0  # a repeated firing fires nothing twice
        (occ,) = await occurrences(h)
        slot = occ["schedule"]["slot"]
        key = f"tick@{slot.isoformat(timespec='milliseconds').replace('+00:00', 'Z')}"
        assert occ["unique"] == {"key": key, "scope": "forever"}
        assert occ["tenant"] == "t"
        assert await h.db.unique_keys.find_one({"_id": key}) is not None
        sched = await h.db.schedules.find_one({"_id": "tick"})
        assert sched["last_fire"]["job"] == occ["_id"]
        assert sched["next_slot"] == slot + timedelta(minutes=1)
        # A stale copy of the schedule (as a crashed leader's round would have read it) fires nothing.
        await h.db.schedules.update_one({"_id": "tick"}, {"$set": {"next_slot": slot, "next_fire_at": slot}})
        assert await fire(h) == 0
        assert len(await occurrences(h)) == 1

    run(db_uri, scenario)


def test_catch_up_none_fires_the_latest_and_counts_the_rest(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.producer.schedule("tick", every="1m", job=Record(db_uri, 1).as_job_of(h.producer))
        h.clock.advance(timedelta(minutes=5, seconds=30))  # the recruiter was down: 5 slots passed
        assert await fire(h) == 1
        (occ,) = await occurrences(h)
        sched = await h.db.schedules.find_one({"_id": "tick"})
        assert sched["skipped"] == 4
        assert sched["last_skip"]["reason"] == "catch-up"
        assert occ["schedule"]["slot"] == START + timedelta(minutes=5)

    run(db_uri, scenario)


def test_overlap_skip_counts_slots_while_the_previous_runs(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.producer.schedule("tick", every="1m", job=Record(db_uri, 1).as_job_of(h.producer))
        h.clock.advance(timedelta(minutes=1))
        assert await fire(h) == 1
        first = (await occurrences(h))[0]["_id"]
        h.clock.advance(timedelta(minutes=1))
        with capture_logs() as logs:
            assert await fire(h) == 0  # the first is still waiting: skipped
        sched = await h.db.schedules.find_one({"_id": "tick"})
        assert sched["skipped"] == 1
        assert sched["last_skip"]["reason"] == "overlap"
        # The log names the slot skipped and the job in the way.
        (skipped,) = [e for e in logs if e["event"] == "schedule.skipped"]
        assert skipped["slot"] == (START + timedelta(minutes=2)).isoformat()
        assert (skipped["reason"], skipped["slots"], skipped["waiting_on"]) == ("overlap", 1, str(first))
        process, slot = await h.worker("w1")
        await h.round()
        await take_and_work(process, slot)
        await h.settle()  # archived: the next slot fires
        h.clock.advance(timedelta(minutes=1))
        assert await fire(h) == 1
        assert len(await occurrences(h)) == 1
        assert await h.db.archived.count_documents({}) == 1

    run(db_uri, scenario)


def test_an_outcome_recorded_but_not_applied_is_not_an_overlap(db_uri: str) -> None:
    """Issue 22, item 1: the previous run ended (its outcome is in the worker's roster entry),
    but no round has applied it yet (firing runs before the round): the next slot fires."""
    async def scenario(h: Harness) -> None:
        await h.producer.schedule("tick", every="1m", job=Record(db_uri, 1).as_job_of(h.producer))
        h.clock.advance(timedelta(minutes=1))
        assert await fire(h) == 1
        process, slot = await h.worker("w1")
        await h.round()
        await take_and_work(process, slot)  # the outcome is recorded, not applied
        assert await h.db.roster.count_documents({"outcome.job": {"$exists": True}}) == 1
        h.clock.advance(timedelta(minutes=1))
        assert await fire(h) == 1
        sched = await h.db.schedules.find_one({"_id": "tick"})
        assert sched["skipped"] == 0

    run(db_uri, scenario)


def test_a_retrying_occurrence_is_still_unfinished(db_uri: str) -> None:
    """An outcome that retries the job leaves the occurrence unfinished, before and after it is applied."""
    async def scenario(h: Harness) -> None:
        job = AlwaysFails(db_uri).as_job_of(h.producer).retry_with(RetryManyTimes(3, timedelta(hours=1)))
        await h.producer.schedule("tick", every="1m", job=job)
        h.clock.advance(timedelta(minutes=1))
        assert await fire(h) == 1
        process, slot = await h.worker("w1")
        await h.round()
        await take_and_work(process, slot)
        h.clock.advance(timedelta(minutes=1))
        assert await fire(h) == 0
        sched = await h.db.schedules.find_one({"_id": "tick"})
        assert sched["last_skip"]["reason"] == "overlap"

    run(db_uri, scenario)


def test_slot_reservations_stay_bounded(db_uri: str) -> None:
    """Issue 22, item 2: a fired slot's reservation expires past the catch-up window and is
    deleted by a later firing (and by a TTL index on MongoDB), so their number stays bounded
    whatever the run time; a legacy one with no ``until`` goes once a day old."""
    async def scenario(h: Harness) -> None:
        # Ahead of the server's clock: its TTL sweeper (every 60 s) deleted reservations expired by it mid-count.
        h.clock.set(datetime.now(UTC) + timedelta(days=1))
        await h.producer.schedule("tick", every="1m", overlap="allow", job=Record(db_uri, 1).as_job_of(h.producer))
        legacy = {"_id": "tick@2025-12-01T00:00:00.000Z", "job": ObjectId(), "created_at": START - timedelta(days=31)}
        other = {"_id": "tock@2025-12-01T00:00:00.000Z", "job": ObjectId(), "created_at": START - timedelta(days=31)}
        await h.db.unique_keys.insert_many([legacy, other])
        counts = []
        for _ in range(150):  # two and a half hours of slots
            h.clock.advance(timedelta(minutes=1))
            assert await fire(h) == 1
            counts.append(await h.db.unique_keys.count_documents({"_id": {"$regex": "^tick@"}}))
        assert await h.db.unique_keys.find_one({"_id": legacy["_id"]}) is None
        assert await h.db.unique_keys.find_one({"_id": other["_id"]}) is not None  # another schedule's
        # Kept: the margin (1 h) plus the slot itself, never more.
        assert max(counts) <= 62, max(counts)
        assert counts[-1] == counts[-30]
        newest = await h.db.unique_keys.find_one({"_id": {"$regex": "^tick@"}}, sort=[("created_at", -1)])
        assert newest["until"] > h.clock.now()

    run(db_uri, scenario)


def test_run_now_fires_one_extra_and_clears(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.producer.schedule("daily", cron="0 3 * * *", job=Record(db_uri, 1).as_job_of(h.producer))
        asked = h.clock.now()
        await h.db.schedules.update_one({"_id": "daily"}, {"$set": {"run_now": asked}})
        assert await fire(h) == 1
        (occ,) = await occurrences(h)
        assert occ["unique"]["key"].startswith("daily@run-now:")
        assert (await h.db.schedules.find_one({"_id": "daily"}))["run_now"] is None
        assert await fire(h) == 0

    run(db_uri, scenario)


def test_a_schedule_paused_while_read_is_not_moved_on_and_a_hand_paused_one_loses_its_time(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.producer.schedule("tick", every="1m", job=Record(db_uri, 1).as_job_of(h.producer), overlap="allow")
        h.clock.advance(timedelta(minutes=1))
        # Paused by hand in mongosh, its next fire time left in place: nothing fires, the time is cleared.
        await h.db.schedules.update_one({"_id": "tick"}, {"$set": {"paused": True}})
        assert await fire(h) == 0
        sched = await h.db.schedules.find_one({"_id": "tick"})
        assert sched["next_fire_at"] is None
        assert sched["paused"] is True
        assert await occurrences(h) == []
        # A firing that read the schedule before a pause does not write its next time back over it.
        read = {**sched, "paused": False, "next_fire_at": sched["next_slot"]}
        defn = h.recruiter.firer._definition(read)
        assert defn is not None
        assert await h.recruiter.firer._fire_one(h.db, read, defn, h.clock.now()) == 0
        after = await h.db.schedules.find_one({"_id": "tick"})
        assert after["paused"] is True
        assert after["next_fire_at"] is None
        assert await occurrences(h) == []

    run(db_uri, scenario)


def test_malformed_schedules_are_skipped_with_one_warning(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.producer.schedule("good", every="1m", job=Record(db_uri, 1).as_job_of(h.producer))
        past = h.clock.now()
        await h.db.schedules.insert_many([
            {"_id": "bad-cron", "cron": "every day", "every_s": None, "tz": "UTC", "job": {}, "next_fire_at": past,
             "next_slot": past},
            {"_id": "bad-types", "cron": None, "every_s": "60", "job": 3, "next_fire_at": past},
            {"_id": "bad-job", "cron": None, "every_s": 60.0, "tz": "UTC", "job": {"group": 5},
             "next_fire_at": past, "next_slot": past},
        ])
        h.clock.advance(timedelta(minutes=1))
        with capture_logs() as logs:
            assert await fire(h) == 1
            assert await fire(h) == 0
        warned = sorted(e["schedule"] for e in logs if e["event"] == "schedule.malformed")
        assert warned == ["bad-cron", "bad-job", "bad-types"]  # once each
        assert [o["schedule"]["name"] for o in await occurrences(h)] == ["good"]

    run(db_uri, scenario)


def test_a_second_recruiter_fires_nothing_twice(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.producer.schedule("tick", every="1m", job=Record(db_uri, 1).as_job_of(h.producer), overlap="allow")
        h.clock.advance(timedelta(minutes=1))
        stale = await h.db.schedules.find_one({"_id": "tick"})
        assert await fire(h) == 1
        await h.recruiter.lease.release()
        other = RecruiterProcess(h.db, h.clock, RecruiterConfig(), owner="successor")
        assert await other.lease.acquire()
        await h.db.schedules.replace_one({"_id": "tick"}, stale)  # it reads the state before the firing
        other.firer.changed()
        assert await other.fire_schedules() == 0
        assert len(await occurrences(h)) == 1

    run(db_uri, scenario)


def test_concurrent_declarations_converge_without_an_error(db_uri: str, db: Any) -> None:
    """Issue 22, item 4: producers declaring one schedule at once (here with two definitions,
    as two releases would) never get an error; the last declaration wins. The old code
    raised "kept changing while it was declared" 38 times in 320 declarations."""
    errors: list[str] = []

    def declare(i: int) -> None:
        with Recruiter.connect(db_uri) as rec:
            for k in range(40):
                try:
                    rec.schedule("s", every="1m" if (i + k) % 2 else "2m", job=Record(db_uri, 1).as_job_of(rec))
                except Exception as exc:  # noqa: BLE001 - the test counts every error
                    errors.append(repr(exc))

    threads = [threading.Thread(target=declare, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    doc = db.schedules.find_one({"_id": "s"})
    assert doc["every_s"] in (60.0, 120.0)
    assert read_schedule(doc).problem is None


@pytest.mark.parametrize("scope", [timedelta(days=10**6), timedelta.max])
def test_huge_unique_periods_are_one_line(db_uri: str, db: Any, scope: timedelta) -> None:
    with Recruiter.connect(db_uri) as rec, pytest.raises(ValueError, match="at most 36525d") as info:
        rec.enqueue(Record(db_uri, 1).as_job_of(rec).unique("k", scope=scope))
    assert "\n" not in str(info.value)
    assert db.scheduled.count_documents({}) == 0
    assert db.unique_keys.count_documents({}) == 0
