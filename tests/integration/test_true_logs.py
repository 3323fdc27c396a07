"""Logs say what happened (issue 9, part 5): an event is logged after the write that
makes it true, and only if that write took effect.

- a round or cleaner pass whose transaction does not commit logs none of what its
  writes would have made true (``job.archived``, ``jobs.rolled_back``,
  ``worker.dead``, ``job.crashed``...);
- a worker whose outcome write was refused because an earlier try of the same
  write had landed (its reply lost) does not claim it discarded the outcome.

Driven step by step on the real server (see ``test_processes_inproc``).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError, WriteConcernError
from structlog.testing import capture_logs

from recruiter.processes.leadership import LostLease, no_fault
from recruiter.processes.recruiter import RecruiterConfig, RecruiterProcess
from recruiter.store import strict
from tests.conftest import wait_for_async
from tests.integration.test_never_lost import crash_at
from tests.integration.test_processes_inproc import DEAD_AFTER_S, Harness, run, take_and_work
from tests.workables import Record

WRITE_EVENTS = {"job.archived", "jobs.rolled_back", "round.assigned", "worker.dead", "job.crashed",
                "job.returned", "archive.reconciled", "archived.pruned"}


def events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == name]


async def an_outcome_and_a_waiting_job(h: Harness) -> tuple[Any, Any]:
    """A job run by worker w1 (its outcome recorded, not applied), and another one waiting."""
    done = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
    process, slot = await h.worker("w1")
    assert (await h.round()).assigned == 1
    await take_and_work(process, slot)
    waiting = await Record(h.db_uri, n=2).as_job_of(h.producer).enqueue()
    return done, waiting


def test_a_round_whose_transaction_aborts_logs_nothing_it_would_have_written(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        done, waiting = await an_outcome_and_a_waiting_job(h)
        h.recruiter.fault = crash_at("round.before_commit")  # every write of the round made, then it aborts
        with capture_logs() as logs, pytest.raises(RuntimeError, match="injected"):
            await h.round()
        assert {e["event"] for e in logs} & WRITE_EVENTS == set(), logs
        assert await h.db.archived.count_documents({}) == 0
        assert (await h.job(waiting))["locked"] is False

        h.recruiter.fault = no_fault
        with capture_logs() as logs:
            report = await h.round()
        assert report.applied == 1
        assert report.assigned == 1
        assert [(e["job_id"], e["why"]) for e in events(logs, "job.archived")] == [(str(done), "done")]
        assert (await h.archived(done))["why"] == "done"

    run(db_uri, scenario)


def test_a_round_whose_commit_is_refused_after_a_takeover_logs_no_archive(db_uri: str) -> None:
    """The leader loses its lease in the middle of a round (it froze): every write is
    made inside the transaction, then its successor takes over and the commit fails."""

    async def scenario(h: Harness) -> None:
        done, _ = await an_outcome_and_a_waiting_job(h)
        other: AsyncMongoClient[Any] = AsyncMongoClient(h.db_uri, tz_aware=True, event_listeners=strict.listeners())
        try:
            successor = RecruiterProcess(other.get_default_database(), h.clock, RecruiterConfig(), owner="successor")
            carry_out = h.recruiter.carry_out

            async def then_frozen(c: Any, plan: Any) -> Any:
                report = await carry_out(c, plan)
                h.clock.advance(timedelta(seconds=RecruiterConfig().lease_ttl_s + 1))
                takeover = asyncio.create_task(successor.lease.acquire(), context=contextvars.Context())
                assert await asyncio.wait_for(takeover, timeout=10)
                return report

            h.recruiter.carry_out = then_frozen  # type: ignore[method-assign]
            with capture_logs() as logs, pytest.raises((LostLease, PyMongoError)):
                await h.recruiter.fenced_round()
            assert events(logs, "job.archived") == [], logs
            assert await h.db.archived.count_documents({}) == 0

            with capture_logs() as logs:
                assert (await successor.fenced_round()).applied == 1
            assert [e["job_id"] for e in events(logs, "job.archived")] == [str(done)]
        finally:
            await other.close()

    run(db_uri, scenario)


def test_a_cleaner_pass_that_aborts_logs_no_dead_worker_and_no_crash(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await Record(h.db_uri).as_job_of(h.producer).enqueue()
        process, slot = await h.worker("silent")
        await h.round()
        assert await process.poll(slot) == job_id
        h.clock.advance(timedelta(seconds=DEAD_AFTER_S + 1))
        cleaner = await h.cleaner()
        cleaner.fault = crash_at("clean.before_commit")
        with capture_logs() as logs, pytest.raises(RuntimeError, match="injected"):
            await cleaner.fenced_clean()
        assert {e["event"] for e in logs} & WRITE_EVENTS == set(), logs
        assert await h.roster("silent") is not None
        assert (await h.job(job_id))["locked"] is True

        cleaner.fault = no_fault
        with capture_logs() as logs:
            report = await cleaner.fenced_clean()
        assert report.dead_workers == 1
        assert report.unlocked_jobs == 1
        assert [e["worker_id"] for e in events(logs, "worker.dead")] == ["silent"]
        # Its heartbeats never showed the job running: returned, not crashed (recruiter.liveness).
        assert [e["job_id"] for e in events(logs, "job.returned")] == [str(job_id)]

    run(db_uri, scenario)


class ReplyLost:
    """A roster collection whose next outcome write lands but reports a write-concern
    error, as when the server applied it and the reply did not say so: the worker tries
    it again. ``meanwhile`` runs between the write and the error (e.g. a round)."""

    def __init__(self, roster: Any, meanwhile: Any = None) -> None:
        self._roster = roster
        self._meanwhile = meanwhile
        self.fired = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._roster, name)

    async def update_many(self, filter_: Any, update: Any, **kwargs: Any) -> Any:
        # The outcome write (recruiter.store.unrecorded: not a retryable write, so the worker's
        # own retry is all there is).
        result = await self._roster.update_many(filter_, update, **kwargs)
        if not self.fired and "outcome" in update.get("$set", {}):
            assert result.modified_count == 1
            self.fired = True
            if self._meanwhile is not None:
                await self._meanwhile()
            raise WriteConcernError("injected: the write was applied, its write concern failed", 64, {})
        return result


@pytest.mark.parametrize("applied_meanwhile", [False, True], ids=["retried", "applied-before-the-retry"])
def test_an_outcome_whose_first_write_landed_is_not_reported_discarded(db_uri: str, applied_meanwhile: bool) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await Record(h.db_uri, n=7).as_job_of(h.producer).enqueue()
        process, slot = await h.worker("w1")
        assert (await h.round()).assigned == 1

        async def a_round() -> None:
            assert (await h.round()).applied == 1

        lossy = ReplyLost(process.c.roster, a_round if applied_meanwhile else None)
        # The slot's roster entry (recruiter.processes.worker.entry) writes the outcome, alone: the
        # completer (outcomes of several slots in one command) is off here; a lost reply to its
        # command is tests/integration/test_outcome_batches.py's.
        process.c = process.entries.c = dataclasses.replace(process.c, roster=lossy)
        process.entries.completer = None
        with capture_logs() as logs:
            await take_and_work(process, slot)
        assert lossy.fired
        assert events(logs, "outcome.write_failed"), "the first try raised"
        assert events(logs, "job.outcome_discarded") == [], logs
        assert len(events(logs, "outcome.recorded")) == 1
        assert events(logs, "worker.available_again") == []

        if not applied_meanwhile:
            assert (await h.round()).applied == 1
        archived = await h.archived(job_id)
        assert archived is not None
        assert archived["why"] == "done"
        assert len(archived["executions"]) == 1
        entry = await h.roster("w1")
        assert entry is not None
        assert entry["available"] is True
        assert "outcome" not in entry

    run(db_uri, scenario)


def test_an_outcome_refused_because_the_job_was_cancelled_says_so(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await Record(h.db_uri, n=1, sleep_s=1.0).as_job_of(h.producer).enqueue()
        process, slot = await h.worker("w1")
        assert (await h.round()).assigned == 1
        with capture_logs() as logs:
            working = asyncio.create_task(take_and_work(process, slot))
            await wait_for_async(lambda: h.ledger(event="start"), message="the job to start")
            await h.producer.cancel(job_id)  # no heartbeat before the job ends: it is not halted
            await asyncio.wait_for(working, timeout=30)
        (discarded,) = events(logs, "job.outcome_discarded")
        assert discarded["reason"] == "the job was cancelled"
        assert events(logs, "outcome.recorded") == []
        assert (await h.archived(job_id))["why"] == "cancelled"
        assert (await h.roster("w1"))["available"] is True

    run(db_uri, scenario)
