"""Snooze on the real server, the recruiter and a worker driven step by step (recruiter.domain.snooze):
a job that returns ``Snooze(...)`` goes back to ``scheduled`` due at the time asked, its attempt not
counted and its retry policy not asked, recorded in its history; capped; fenced; refused when hostile."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from bson import ObjectId
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from recruiter.admin import Admin
from recruiter.admin.explain import explain_job
from recruiter.domain.events import JobFinished
from recruiter.domain.retry import RetryManyTimes
from recruiter.domain.waiting import Waiting
from recruiter.processes.events import Bus
from recruiter.processes.metrics import EventMetrics
from recruiter.processes.worker.runtime import WorkerConfig, WorkerProcess
from tests.integration.test_processes_inproc import START, Harness, run, take_and_work
from tests.snoozing import (
    AsyncSnoozesThenDone,
    HostileSnooze,
    SnoozesForEver,
    SnoozesThenDone,
    SnoozesUntil,
    TimedSnoozesThenDone,
    snoozing_function,
)
from tests.workables import Record, UniqueRecord


async def _run_once(h: Harness, worker: Any, job_id: object) -> None:
    """One round hands the job to the worker, which runs it; the next round applies its outcome."""
    process, slot = worker
    report = await h.round()
    assert report.assigned == 1, f"{job_id} was not assigned"
    assert await take_and_work(process, slot) == job_id
    await h.round()


async def _later(h: Harness, worker: Any, seconds: float) -> None:
    """``seconds`` pass; the worker beats (a worker silent that long is not handed jobs)."""
    h.clock.advance(timedelta(seconds=seconds))
    await worker[0].heartbeat()


@pytest.mark.parametrize("cls", [SnoozesThenDone, AsyncSnoozesThenDone, TimedSnoozesThenDone])
def test_a_job_snoozes_twice_then_is_done_with_one_attempt_counted(db_uri: str, cls: type) -> None:
    """Sync (in a thread), async (on the loop) and in a child process (a timeout) alike."""
    async def scenario(h: Harness) -> None:
        job_id = await cls(h.db_uri, times=2, seconds=30).as_job_of(h.producer) \
            .retry_with(RetryManyTimes(0)).enqueue()
        worker = await h.worker("w1")
        for number in (1, 2):
            await _run_once(h, worker, job_id)
            job = await h.job(job_id)
            assert job is not None, "a snoozed job stays in scheduled"
            assert (job["status"], job["locked"], job["attempts"], job["snoozes"]) == ("queued", False, 0, number)
            assert job["scheduled_at"] == h.clock.now() + timedelta(seconds=30)
            last = job["last_execution"]
            assert (last["outcome"], last["attempt"], last["snooze"]) == ("snoozed", 1, number)
            assert last["snoozed_until"] == job["scheduled_at"]
            assert (await h.round()).assigned == 0, "not run before its snooze ends"
            await _later(h, worker, 30)
        await _run_once(h, worker, job_id)
        archived = await h.archived(job_id)
        assert archived is not None
        # RetryManyTimes(0) archives a first failure: a snooze never asked it, nor counted an attempt.
        assert (archived["why"], archived["attempts"], archived["result"], archived["snoozes"]) == ("done", 1, 3, 2)
        assert [e["outcome"] for e in archived["executions"]] == ["snoozed", "snoozed", "done"]
        assert [e.get("snooze") for e in archived["executions"]] == [1, 2, None]

    run(db_uri, scenario)


def test_a_function_job_snoozes_and_its_decorator_caps_it(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await snoozing_function.enqueue(h.producer, h.db_uri, 1)
        stored = await h.job(job_id)
        assert stored is not None
        assert stored["max_snoozes"] == 5
        worker = await h.worker("w1")
        await _run_once(h, worker, job_id)
        assert (await h.job(job_id) or {}).get("snoozes") == 1
        await _run_once(h, worker, job_id)
        assert (await h.archived(job_id) or {}).get("result") == "done"

    run(db_uri, scenario)


def test_a_job_that_snoozes_past_its_cap_is_archived_saying_so(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await SnoozesForEver(h.db_uri).as_job_of(h.producer).enqueue()
        worker = await h.worker("w1")
        for _ in range(3):  # the class's cap: 3
            await _run_once(h, worker, job_id)
        assert (await h.job(job_id) or {}).get("snoozes") == 3
        await _run_once(h, worker, job_id)
        archived = await h.archived(job_id)
        assert archived is not None
        assert await h.job(job_id) is None
        assert archived["why"] == "snoozed-too-often"
        assert archived["reason"] == "it asked to snooze a 4th time; a job may snooze 3 times (max_snoozes)"
        assert archived["attempts"] == 0
        assert len(archived["executions"]) == 4
        explanation = explain_job(h.sync_db, job_id, h.clock.now())
        assert explanation is not None
        assert "snoozed-too-often" in explanation.text

        capped = await SnoozesForEver(h.db_uri).as_job_of(h.producer).max_snoozes(1).enqueue()
        await _run_once(h, worker, capped)  # the builder's cap: 1
        await _run_once(h, worker, capped)
        assert (await h.archived(capped) or {}).get("why") == "snoozed-too-often"

    run(db_uri, scenario)


def test_explain_says_a_job_snoozed_how_many_times_and_until_when(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await SnoozesThenDone(h.db_uri, times=2, seconds=600).as_job_of(h.producer).enqueue()
        worker = await h.worker("w1")
        await _run_once(h, worker, job_id)
        await _later(h, worker, 600)
        await _run_once(h, worker, job_id)
        explanation = explain_job(h.sync_db, job_id, h.clock.now())
        assert explanation is not None
        assert explanation.code is Waiting.SNOOZED
        until = h.clock.now() + timedelta(seconds=600)
        assert explanation.text.startswith("snoozed 2 times (of at most 100): due ")
        assert explanation.details["snoozes"] == 2
        assert explanation.details["snoozed_until"] == until

    run(db_uri, scenario)


def test_a_snooze_until_a_date_is_due_then_and_a_past_date_at_once(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        later = START + timedelta(hours=2)
        past = START - timedelta(days=3)
        later_id = await SnoozesUntil(h.db_uri, later).as_job_of(h.producer).enqueue()
        worker = await h.worker("w1")
        await _run_once(h, worker, later_id)
        assert (await h.job(later_id) or {}).get("scheduled_at") == later
        past_id = await SnoozesUntil(h.db_uri, past).as_job_of(h.producer).enqueue()
        await _run_once(h, worker, past_id)
        assert (await h.job(past_id) or {}).get("scheduled_at") == h.clock.now()

    run(db_uri, scenario)


@pytest.mark.parametrize(("kind", "why"), [
    ("negative", "a snooze cannot be negative, got -5s"),
    ("nan", "a snooze needs a finite number of seconds, got nan"),
    ("huge", "a snooze lasts at most 30 days, got 1e+300s"),
    ("text", "a snooze needs seconds (a number or a timedelta), got str"),
    ("far", "a snooze lasts at most 30 days; until 9999-12-31T00:00:00Z is further"),
])
def test_a_hostile_snooze_fails_the_attempt_with_its_reason_and_the_worker_goes_on(
        db_uri: str, kind: str, why: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await HostileSnooze(h.db_uri, kind).as_job_of(h.producer).enqueue()
        worker = await h.worker("w1")
        with capture_logs() as logs:
            await _run_once(h, worker, job_id)
        archived = await h.archived(job_id)  # DoNotDoItAgain, the default policy, judged the failure
        assert archived is not None
        last = archived["last_execution"]
        assert (archived["why"], last["outcome"], last["class"]) == (
            "not-scheduled-by-retry-policy", "failed", "recruiter.domain.snooze:SnoozeRefused")
        assert last["message"] == why
        assert any(e["event"] == "job.snooze_refused" and e["reason"] == why for e in logs)
        other = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        await _run_once(h, worker, other)
        assert (await h.archived(other) or {}).get("why") == "done"

    run(db_uri, scenario)


def test_a_stale_workers_snooze_is_not_applied(db_uri: str) -> None:
    """The lock was taken away (and the job locked again) after the worker recorded its snooze: the
    round finds the outcome's token is not the job's and leaves the job as it is."""
    async def scenario(h: Harness) -> None:
        job_id = await SnoozesThenDone(h.db_uri, times=1, seconds=30).as_job_of(h.producer).enqueue()
        process, slot = await h.worker("w1")
        assert (await h.round()).assigned == 1
        await take_and_work(process, slot)
        assert (await h.roster("w1") or {})["outcome"]["execution"]["outcome"] == "snoozed"
        taken_over = ObjectId()
        await h.db.scheduled.update_one({"_id": job_id}, {"$set": {"lock_token": taken_over}})
        await h.round()
        job = await h.job(job_id)
        assert job is not None
        assert (job["locked"], job["lock_token"], job["attempts"], "snoozes" in job) == (True, taken_over, 1, False)
        assert job["executions"] == []
        assert job["scheduled_at"] == START

    run(db_uri, scenario)


def test_a_snoozed_job_keeps_its_unique_key_and_frees_its_limit_slot(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        unique = await UniqueRecord(h.db_uri, n=7).as_job_of(h.producer).enqueue()
        snoozing = await SnoozesThenDone(h.db_uri, times=1, seconds=60).as_job_of(h.producer) \
            .unique("snoozer").enqueue()
        await h.db.scheduled.delete_one({"_id": unique})  # only the snoozing job in the queue
        worker = await h.worker("w1")
        await _run_once(h, worker, snoozing)
        assert (await h.job(snoozing) or {}).get("snoozes") == 1
        again = await SnoozesThenDone(h.db_uri, times=1, seconds=60).as_job_of(h.producer) \
            .unique("snoozer").enqueue()
        assert again == snoozing, "a snoozed job is unfinished: its key still holds"
        assert again.existed
        # Its place under its group's limit is free: another job of its group runs while it sleeps.
        Admin(h.sync_db, h.clock).set_limit("generic", max_running=1)
        other = await Record(h.db_uri, n=2).as_job_of(h.producer).enqueue()
        await _run_once(h, worker, other)
        assert (await h.archived(other) or {}).get("why") == "done"
        await _later(h, worker, 60)
        await _run_once(h, worker, snoozing)
        assert (await h.archived(snoozing) or {}).get("why") == "done"

    run(db_uri, scenario)


def test_a_snoozed_job_is_read_by_a_0_2_0_style_leader_as_a_plain_give_back(db_uri: str) -> None:
    """A leader that does not know snoozes (0.2.0) reschedules the outcome as a give-back: the
    count then comes from the numbered history entries, so the cap still holds."""
    async def scenario(h: Harness) -> None:
        job_id = await SnoozesForEver(h.db_uri).as_job_of(h.producer).enqueue()
        worker = await h.worker("w1")
        await _run_once(h, worker, job_id)
        # As a 0.2.0 leader leaves it: no ``snoozes``, status retrying; the history entry numbered.
        await h.db.scheduled.update_one({"_id": job_id}, {"$unset": {"snoozes": ""},
                                                         "$set": {"status": "retrying"}})
        await _run_once(h, worker, job_id)
        assert (await h.job(job_id) or {}).get("snoozes") == 2

    run(db_uri, scenario)


def test_a_snooze_is_emitted_counted_and_logged_once_recorded(db_uri: str) -> None:
    """The worker's JobFinished says ``snoozed`` (not failed), with the decision: the metrics count
    it under outcome ``snoozed``, the log subscriber prints ``job.snoozed``."""
    async def scenario(h: Harness) -> None:
        registry = CollectorRegistry()
        seen: list[object] = []
        bus = Bus.logging(seen.append, EventMetrics(registry, "worker"))
        process = WorkerProcess(h.db, h.clock, WorkerConfig(worker_id="w1"), heartbeat_db=h.sync_db, bus=bus)
        (slot,) = process.slots
        await process.register(slot)
        job_id = await SnoozesThenDone(h.db_uri, times=1, seconds=30).as_job_of(h.producer).enqueue()
        with capture_logs() as logs:
            await _run_once(h, (process, slot), job_id)
        (finished,) = [e for e in seen if isinstance(e, JobFinished)]
        assert (finished.job_id, finished.outcome, finished.error) == (job_id, "snoozed", None)
        assert finished.worker_id == "w1"
        assert finished.decision == "retry at 2026-01-01T12:00:30Z"
        assert registry.get_sample_value("recruiter_jobs_finished_total",
                                         {"group": "generic", "outcome": "snoozed"}) == 1
        assert registry.get_sample_value("recruiter_jobs_finished_total",
                                         {"group": "generic", "outcome": "failed"}) is None
        (line,) = [e for e in logs if e["event"] == "job.snoozed"]
        assert line["decision"] == "retry at 2026-01-01T12:00:30Z"
        assert not [e for e in logs if e["event"] == "job.failed"]

    run(db_uri, scenario)
