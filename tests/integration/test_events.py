"""The events seam (recruiter.domain.events, recruiter.processes.events) on the real processes, in one
process: each kind is emitted once per fact, after the write that makes it true (a subscriber that
reads the database when called finds the fact there), and a failing subscriber breaks nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient, MongoClient
from structlog.testing import capture_logs

from recruiter.domain.clock import ManualClock
from recruiter.domain.events import (
    Event,
    JobArchived,
    JobFinished,
    JobStarted,
    LeaseLost,
    LeaseWon,
    RoundCommitted,
    WorkerGone,
    WorkerRegistered,
)
from recruiter.processes.cleaner import CleanerConfig, CleanerProcess
from recruiter.processes.events import Bus, load_subscriber
from recruiter.processes.leadership import LostLease
from recruiter.processes.recruiter import RecruiterConfig, RecruiterProcess
from recruiter.processes.worker.runtime import WorkerConfig, WorkerProcess
from recruiter.processes.worker.state import Slot
from recruiter.producer.client import AsyncRecruiter
from recruiter.producer.workflows import Workflow
from recruiter.store import strict
from recruiter.store.indexes import ensure_indexes
from tests.workables import AlwaysFails, Record

START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


class Witness:
    """A subscriber that records each event with what the database held when it was called."""

    def __init__(self, db: Any) -> None:
        self.db = db  # synchronous: a subscriber is called in the process's thread
        self.seen: list[tuple[Event, bool]] = []

    def __call__(self, event: Event) -> None:
        self.seen.append((event, self.true_in_db(event)))

    def true_in_db(self, e: Event) -> bool:
        if isinstance(e, JobStarted):
            return bool(self.db.scheduled.find_one({"_id": e.job_id, "locked_by": e.worker_id}))
        if isinstance(e, JobFinished):
            entry = self.db.roster.find_one({"_id": e.worker_id}) or {}
            return (entry.get("outcome") or {}).get("job") == e.job_id
        if isinstance(e, JobArchived):
            return bool(self.db.archived.find_one({"_id": e.job_id, "why": e.why})) and \
                self.db.scheduled.find_one({"_id": e.job_id}) is None
        if isinstance(e, RoundCommitted):
            return e.assigned == 0 or self.db.roster.count_documents({"available": False}) > 0
        if isinstance(e, WorkerRegistered):
            return bool(self.db.roster.find_one({"_id": e.worker_id})) and \
                bool(self.db.heartbeats.find_one({"ids": e.worker_id}))
        if isinstance(e, WorkerGone):
            return self.db.roster.find_one({"_id": e.worker_id}) is None
        if isinstance(e, LeaseWon):
            return bool(self.db.metadata.find_one({"_id": e.role, "owner": e.owner, "epoch": e.epoch}))
        return True

    def kinds(self, kind: type) -> list[Any]:
        return [e for e, _ in self.seen if isinstance(e, kind)]


def run(db_uri: str, scenario: Callable[[Any, MongoClient[Any], ManualClock], Any]) -> None:
    async def main() -> None:
        client: AsyncMongoClient[Any] = AsyncMongoClient(db_uri, tz_aware=True, event_listeners=strict.listeners())
        sync: MongoClient[Any] = MongoClient(db_uri, tz_aware=True, event_listeners=strict.listeners())
        try:
            db = client.get_default_database()
            await ensure_indexes(db)
            await scenario(db, sync, ManualClock(START))
        finally:
            sync.close()
            await client.close()

    asyncio.run(main())


async def witnessed_leader(db: Any, sync: MongoClient[Any],
                           clock: ManualClock) -> tuple[Witness, RecruiterProcess, WorkerProcess, Slot]:
    """A recruiter whose events the witness checks, and a registered worker of one slot ("w")."""
    sync_db = sync.get_default_database()
    witness = Witness(sync_db)
    recruiter = RecruiterProcess(db, clock, RecruiterConfig(), owner="r", bus=Bus.logging(witness))
    worker = WorkerProcess(db, clock, WorkerConfig(worker_id="w"), heartbeat_db=sync_db)
    (slot,) = worker.slots
    await worker.register(slot)
    return witness, recruiter, worker, slot


def test_each_event_once_after_the_write_that_makes_it_true(db_uri: str) -> None:
    async def scenario(db: Any, sync: MongoClient[Any], clock: ManualClock) -> None:
        sync_db = sync.get_default_database()
        witness = Witness(sync_db)
        bus = Bus.logging(witness)
        recruiter = RecruiterProcess(db, clock, RecruiterConfig(), owner="r", bus=bus)
        worker = WorkerProcess(db, clock, WorkerConfig(worker_id="w"), heartbeat_db=sync_db, bus=bus)
        (slot,) = worker.slots
        producer = AsyncRecruiter(db.client, db.name, clock=clock)
        done_id = await producer.enqueue(Record(db_uri, n=1))
        failed_id = await producer.enqueue(AlwaysFails(db_uri))

        await worker.register(slot)
        assert await recruiter.lease.acquire()
        for job_id in (done_id, failed_id):
            assert (await recruiter.fenced_round()).assigned == 1
            assert await worker.poll(slot) == job_id
            await worker.work(slot, job_id)
        await recruiter.fenced_round()  # applies the last outcome
        await worker.slot_loop.deregister(slot)

        assert all(true for _, true in witness.seen), [e for e, true in witness.seen if not true]
        assert [e.job_id for e in witness.kinds(JobStarted)] == [done_id, failed_id]
        finished = witness.kinds(JobFinished)
        assert [(e.job_id, e.outcome) for e in finished] == [(done_id, "done"), (failed_id, "failed")]
        assert finished[0].worker_id == "w"
        assert finished[0].class_name == "tests.workables:Record"
        assert finished[1].error is not None
        assert finished[1].decision is not None
        # An error reporter gets the exception itself, with its traceback.
        assert isinstance(finished[1].exception, ValueError)
        assert finished[1].exception.__traceback__ is not None
        assert sorted((e.job_id, e.why, e.by) for e in witness.kinds(JobArchived)) == sorted(
            [(done_id, "done", "recruiter"), (failed_id, "not-scheduled-by-retry-policy", "recruiter")])
        rounds = witness.kinds(RoundCommitted)
        assert [r.assigned for r in rounds] == [1, 1, 0]
        assert [r.applied for r in rounds] == [0, 1, 1]
        assert all("commit" in r.phases and r.duration_s >= sum(r.phases.values()) for r in rounds)
        assert [(e.worker_id, e.groups) for e in witness.kinds(WorkerRegistered)] == [("w", ("*",))]
        assert [(e.worker_id, e.reason) for e in witness.kinds(WorkerGone)] == [("w", "deregistered")]

    run(db_uri, scenario)


def test_leases_won_and_lost_and_a_dead_worker_gone(db_uri: str) -> None:
    async def scenario(db: Any, sync: MongoClient[Any], clock: ManualClock) -> None:
        sync_db = sync.get_default_database()
        witness = Witness(sync_db)
        bus = Bus.logging(witness)
        cleaner = CleanerProcess(db, clock, CleanerConfig(considered_dead_after_s=30.0), owner="c", bus=bus)

        async def lead_then_lose() -> None:
            cleaner.leadership.stop()
            raise LostLease()

        await cleaner.leadership.run(lead_then_lose, standby_poll_s=0.01)
        assert [(e.role, e.owner) for e in witness.kinds(LeaseWon)] == [("cleaner", "c")]
        assert [(e.role, e.epoch) for e in witness.kinds(LeaseLost)] == [("cleaner", witness.kinds(LeaseWon)[0].epoch)]

        worker = WorkerProcess(db, clock, WorkerConfig(worker_id="dead"), heartbeat_db=sync_db, bus=bus)
        (slot,) = worker.slots
        await worker.register(slot)
        clock.advance(timedelta(seconds=31))
        assert await cleaner.lease.acquire()
        assert (await cleaner.fenced_clean()).dead_workers == 1
        gone = witness.kinds(WorkerGone)
        assert [(e.worker_id, e.reason) for e in gone] == [("dead", "dead")]
        assert all(true for _, true in witness.seen), [e for e, true in witness.seen if not true]

    run(db_uri, scenario)


def test_an_archived_step_names_its_workflow_and_a_malformed_tag_is_named_so(db_uri: str) -> None:
    async def scenario(db: Any, sync: MongoClient[Any], clock: ManualClock) -> None:
        witness, recruiter, worker, slot = await witnessed_leader(db, sync, clock)
        producer = AsyncRecruiter(db.client, db.name, clock=clock)
        nightly = Workflow("nightly")
        nightly.step("only", Record(db_uri, n=1))
        step_id = (await nightly.enqueue(producer))["only"].id
        plain_id = await producer.enqueue(Record(db_uri, n=2))
        hostile_id = await producer.enqueue(Record(db_uri, n=3))
        await db.scheduled.update_one({"_id": hostile_id}, {"$set": {"workflow": {"name": "x" * 10_000}}})
        assert await recruiter.lease.acquire()
        for job_id in (step_id, plain_id, hostile_id):
            assert (await recruiter.fenced_round()).assigned == 1
            assert await worker.poll(slot) == job_id
            await worker.work(slot, job_id)
        await recruiter.fenced_round()  # applies the last outcome
        # The cleaner's archive (a step aimed at a worker that never came, past its deadline) too.
        late = Record(db_uri, n=4).as_job_of(producer).on_worker("nobody", deadline=timedelta(seconds=1))
        late_id = await late.enqueue()
        tag = (await db.archived.find_one({"_id": step_id}))["workflow"]
        await db.scheduled.update_one({"_id": late_id}, {"$set": {"workflow": {**tag, "name": "cleanup"}}})
        clock.advance(timedelta(seconds=2))
        cleaner = CleanerProcess(db, clock, CleanerConfig(), owner="c", bus=Bus.logging(witness))
        assert await cleaner.lease.acquire()
        await cleaner.fenced_clean()
        assert sorted((str(e.job_id), e.why, e.workflow or "") for e in witness.kinds(JobArchived)) == sorted(
            [(str(step_id), "done", "nightly"), (str(plain_id), "done", ""), (str(hostile_id), "done", "(malformed)"),
             (str(late_id), "worker-deadline", "cleanup")])

    run(db_uri, scenario)


def test_an_aborted_round_emits_nothing_it_would_have_made_true(db_uri: str) -> None:
    async def scenario(db: Any, sync: MongoClient[Any], clock: ManualClock) -> None:
        witness, recruiter, worker, slot = await witnessed_leader(db, sync, clock)
        job_id = await AsyncRecruiter(db.client, db.name, clock=clock).enqueue(Record(db_uri, n=1))
        assert await recruiter.lease.acquire()
        await recruiter.fenced_round()
        assert await worker.poll(slot) == job_id
        await worker.work(slot, job_id)

        def fail(point: str) -> None:
            if point == "round.before_commit":
                raise RuntimeError("crash before commit")

        recruiter.fault = fail
        with pytest.raises(RuntimeError):
            await recruiter.fenced_round()
        assert witness.kinds(JobArchived) == []  # the archive write was rolled back: no event
        assert len(witness.kinds(RoundCommitted)) == 1  # the first round only
        recruiter.fault = lambda point: None
        await recruiter.fenced_round()
        assert [e.job_id for e in witness.kinds(JobArchived)] == [job_id]

    run(db_uri, scenario)


def test_a_failing_subscriber_is_logged_and_the_others_still_called() -> None:
    got: list[Event] = []

    def broken(event: Event) -> None:
        raise ValueError("reporter down")

    bus = Bus([broken, got.append])
    event = LeaseWon("recruiter", 3, "me")
    with capture_logs() as logs:
        bus.emit(event)
        bus.emit(event)
    assert got == [event, event]
    failures = [entry for entry in logs if entry["event"] == "event.subscriber_failed"]
    assert len(failures) == 2
    assert failures[0]["subscriber"].endswith("broken")
    assert failures[0]["kind"] == "LeaseWon"
    assert "reporter down" in failures[0]["error"]
    unsubscribe = bus.subscribe(got.append)
    bus.emit(event)
    unsubscribe()
    bus.emit(event)
    assert len(got) == 2 + 2 + 1


def test_the_log_subscriber_prints_the_lines_of_before() -> None:
    with capture_logs() as logs:
        Bus.logging().emit(JobArchived("j1", "done", 1, "mail", by="recruiter"))
        Bus.logging().emit(LeaseLost("cleaner", 4))
    assert logs[0] == {"event": "job.archived", "job_id": "j1", "why": "done", "attempts": 1, "group": "mail",
                       "log_level": "info"}
    assert logs[1] == {"event": "leader.lost", "role": "cleaner", "epoch": 4, "log_level": "warning"}


def test_load_subscriber_refuses_in_one_line() -> None:
    assert load_subscriber("tests.event_subscribers:record") is not None
    for spec, fragment in (("nocolon", "MODULE:CALLABLE"), ("no.such.module:f", "cannot import"),
                           ("tests.event_subscribers:missing", "has no"),
                           ("tests.event_subscribers:NOT_CALLABLE", "not callable")):
        with pytest.raises(ValueError, match=fragment):
            load_subscriber(spec)
