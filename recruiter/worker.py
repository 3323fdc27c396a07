"""The worker process: N worker slots, each with its own roster document.

A slot reads only its own roster document. When the recruiter has assigned it a
job (``available: false``, ``assigned_to.<id>`` set and a copy of the job in
``job``) it runs it, judges the result by the job's retry policy
and writes the outcome into its roster document in the same write that makes it
available again. That write is conditional on the assignment still being there,
so a slot declared dead by the cleaner cannot record anything (it is halted).

A slot learns of its job from a change stream on its roster document (one
stream per process, see :mod:`recruiter.wakeup`) or, where the server has no
change streams, by polling its document with a backoff.

One heartbeat task per process keeps ``last_seen_at`` fresh for every slot,
whether idle or running a long job.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import socket
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pymongo
import structlog
from bson import ObjectId
from pymongo import UpdateOne
from pymongo.errors import DuplicateKeyError, PyMongoError

from recruiter.attempt import describe_exception, failure_of, judge, judge_crash, storable_result
from recruiter.clock import Clock
from recruiter.connection import first_line
from recruiter.outcome import DONE, Execution, Kind, Outcome, describe_decision
from recruiter.retry import Archive, Decision
from recruiter.selection import ANY_GROUP
from recruiter.store import Collections
from recruiter.wakeup import RosterWatch, Wake
from recruiter.workable import JobContext, accepts_context, workable_from_document

log = structlog.get_logger("recruiter.worker")


class JobTimedOut(Exception):
    """The attempt ran longer than the job's timeout."""


@dataclass(frozen=True)
class WorkerConfig:
    groups: tuple[str, ...] = (ANY_GROUP,)
    concurrency: int = 1
    worker_id: str | None = None
    heartbeat_interval_s: float = 5.0
    poll_from_s: float = 0.02
    poll_to_s: float = 0.5
    max_crashes: int = 3
    deregister_wait_s: float = 10.0
    wake: Wake = Wake.AUTO
    # With a change stream, each slot still reads its entry this often, in case an
    # event was missed; the stream's own wait (``stream_await_s``) bounds idle cost.
    safety_poll_s: float = 30.0
    stream_await_s: float = 2.0

    def __post_init__(self) -> None:
        if not self.groups:
            raise ValueError("a worker needs at least one group")
        for g in self.groups:
            if not g or g.startswith("$") or "." in g:
                raise ValueError(f"invalid group {g!r}")
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if self.worker_id is not None and (
            not self.worker_id or "." in self.worker_id or self.worker_id.startswith("$")
        ):
            raise ValueError(f"invalid worker id {self.worker_id!r}: it cannot be empty, contain '.' or start with '$'")
        if self.heartbeat_interval_s <= 0:
            raise ValueError("heartbeat interval must be positive")
        if not 0 < self.poll_from_s <= self.poll_to_s:
            raise ValueError("poll-from must be positive and not above poll-to")
        if self.max_crashes < 1:
            raise ValueError("max crashes must be at least 1")

    def slot_ids(self) -> list[str]:
        base = self.worker_id or str(ObjectId())
        if self.concurrency == 1:
            return [base]
        return [f"{base}-{i}" for i in range(self.concurrency)]


@dataclass
class Running:
    job_id: ObjectId
    started_at: datetime
    task: asyncio.Task[Any] | None = None
    halted: bool = False


@dataclass
class Slot:
    id: str
    running: Running | None = None
    lost: bool = False  # our roster document disappeared (declared dead)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    delivered: dict[str, Any] | None = None  # a job copy a change stream event carried
    must_poll: bool = True  # read our entry before waiting again
    last_token: Any = None  # lock token of the last job run, so a late event is not run twice
    waiting: bool = False  # waiting for an assignment


class WorkerProcess:
    def __init__(self, db: Any, clock: Clock, config: WorkerConfig) -> None:
        self.c = Collections.of(db)
        self.clock = clock
        self.config = config
        self.pid = os.getpid()
        self.hostname = socket.gethostname()
        self.slots = [Slot(i) for i in config.slot_ids()]
        self.by_id = {s.id: s for s in self.slots}
        self.stopping = asyncio.Event()
        self.watch: RosterWatch | None = None
        self.idle = asyncio.Event()  # some slot is waiting for work

    # -- roster ---------------------------------------------------------------

    def _roster_document(self, slot: Slot, now: datetime) -> dict[str, Any]:
        return {
            "_id": slot.id,
            "work_on": list(self.config.groups),
            "available": True,
            "available_since": now,
            "last_seen_at": now,
            "created_at": now,
            "working": False,
            "pid": self.pid,
            "hostname": self.hostname,
        }

    async def register(self, slot: Slot) -> None:
        now = self.clock.now()
        try:
            await self.c.roster.insert_one(self._roster_document(slot, now))
        except DuplicateKeyError:
            raise WorkerIdTaken(slot.id) from None
        slot.lost = False
        log.info("worker.registered", worker_id=slot.id, groups=list(self.config.groups), pid=self.pid)

    async def deregister(self, slot: Slot) -> None:
        """Leave the roster without losing an assignment or an unapplied outcome.

        Bounded by ``deregister_wait_s`` even when the server is unreachable: an
        entry left behind is removed by the cleaner once it stops heartbeating.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.deregister_wait_s
        try:
            with pymongo.timeout(self.config.deregister_wait_s):
                result = await self.c.roster.update_one(
                    {"_id": slot.id, "available": True}, {"$set": {"stopping": True, "available": False}}
                )
                job_id = None
                if result.matched_count == 0:
                    doc = await self.c.roster.find_one({"_id": slot.id}, {f"assigned_to.{slot.id}": 1})
                    job_id = ((doc or {}).get("assigned_to") or {}).get(slot.id)
            if job_id is not None:
                # Assigned while we were deciding to stop: do it, then leave.
                await self.work(slot, job_id)
                deadline = loop.time() + self.config.deregister_wait_s
            while True:
                with pymongo.timeout(max(0.1, deadline - loop.time())):
                    result = await self.c.roster.delete_one({"_id": slot.id, "outcome": {"$exists": False}})
                    gone = result.deleted_count or not await self.c.roster.find_one({"_id": slot.id}, {"_id": 1})
                if gone:
                    log.info("worker.deregistered", worker_id=slot.id)
                    return
                if loop.time() >= deadline:
                    log.warning("worker.left_outcome", worker_id=slot.id,
                                detail="the recruiter has not applied the last outcome yet; the cleaner removes "
                                       "this entry once it has")
                    return
                await asyncio.sleep(0.1)
        except PyMongoError as exc:
            log.warning("worker.deregister_failed", worker_id=slot.id, error=first_line(exc),
                        detail="the cleaner removes this entry once it stops heartbeating")

    # -- main loops -------------------------------------------------------------

    async def run(self) -> None:
        for slot in self.slots:
            await self.register(slot)
        side: list[asyncio.Task[Any]] = []
        if self.config.wake is not Wake.POLL:
            watch = RosterWatch(self.c.roster, [s.id for s in self.slots], self._delivered, self._stream_opened,
                                self.idle, max_await_s=self.config.stream_await_s)
            if self.config.wake is Wake.CHANGE_STREAM or await watch.supported():
                self.watch = watch
                side.append(asyncio.create_task(watch.run(), name="worker.watch"))
        slot_tasks = [asyncio.create_task(self._slot_loop(s), name=f"worker.slot.{s.id}") for s in self.slots]
        heartbeat = asyncio.create_task(self._heartbeat_loop(), name="worker.heartbeat")
        side.append(heartbeat)
        try:
            # Heartbeat and watch are supervised side tasks: if one dies, the process stops.
            pending: set[asyncio.Task[Any]] = {*slot_tasks, *side}
            while any(t in pending for t in slot_tasks):
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task.exception() is not None:
                        raise task.exception()  # type: ignore[misc]
                    if task in side:
                        raise RuntimeError(f"the {task.get_name()} task stopped")
        finally:
            self.stopping.set()
            for s in self.slots:
                s.wake.set()
            await asyncio.gather(*slot_tasks, return_exceptions=True)
            for task in side:
                task.cancel()
            await asyncio.gather(*side, return_exceptions=True)

    def stop(self) -> None:
        """Graceful stop: take no new work, let running jobs finish, leave the roster."""
        if not self.stopping.is_set():
            log.info("worker.stopping", workers=[s.id for s in self.slots])
        self.stopping.set()
        for s in self.slots:
            s.wake.set()

    def _delivered(self, slot_id: str, job: dict[str, Any] | None) -> None:
        slot = self.by_id.get(slot_id)
        if slot is None:
            return
        if job is not None and job.get("lock_token") != slot.last_token:
            slot.delivered = job
        else:
            slot.must_poll = True
        slot.wake.set()

    def _stream_opened(self) -> None:
        for slot in self.slots:
            slot.must_poll = True
            slot.wake.set()

    def _streaming(self) -> bool:
        return self.watch is not None and self.watch.streaming.is_set()

    async def _slot_loop(self, slot: Slot) -> None:
        backoff = self.config.poll_from_s
        while not self.stopping.is_set():
            streaming = self._streaming()
            try:
                job: dict[str, Any] | None = None
                job_id: ObjectId | None = None
                if slot.delivered is not None:
                    job, slot.delivered = slot.delivered, None
                    if job.get("lock_token") != slot.last_token:
                        job_id = job["_id"]
                elif slot.must_poll or not streaming:
                    slot.must_poll = False
                    job_id, job = await self.fetch(slot)
                if job_id is not None:
                    # Until the outcome is written the assignment stays in our entry,
                    # so after a database error the next poll finds it again.
                    await self.work(slot, job_id, job)
                    backoff = self.config.poll_from_s
                    continue
            except PyMongoError as exc:
                log.warning("poll.failed", worker_id=slot.id, error=first_line(exc))
                slot.must_poll = True
                backoff = self.config.poll_to_s
            else:
                if slot.delivered is not None or (streaming and slot.must_poll):
                    continue
            slot.wake.clear()
            slot.waiting = True
            self.idle.set()
            try:
                await asyncio.wait_for(slot.wake.wait(), timeout=self.config.safety_poll_s if streaming else backoff)
            except TimeoutError:
                if streaming:
                    slot.must_poll = True
            finally:
                slot.waiting = False
                if not any(s.waiting for s in self.slots):
                    self.idle.clear()
            backoff = min(backoff * 2, self.config.poll_to_s)
        await self.deregister(slot)

    async def poll(self, slot: Slot) -> ObjectId | None:
        """Read our own roster document; return the id of the job assigned to us, if any."""
        return (await self.fetch(slot))[0]

    async def fetch(self, slot: Slot) -> tuple[ObjectId | None, dict[str, Any] | None]:
        """Read our own roster document; return the job assigned to us (id and copy), if any."""
        doc = await self.c.roster.find_one(
            {"_id": slot.id}, {"available": 1, f"assigned_to.{slot.id}": 1, "job": 1})
        if doc is None:
            log.warning("worker.lost_registration", worker_id=slot.id,
                        detail="the cleaner removed this worker (missed heartbeats); registering again")
            await self.register(slot)
            return None, None
        if doc.get("available"):
            return None, None
        job_id = (doc.get("assigned_to") or {}).get(slot.id)
        return job_id, doc.get("job")

    async def _heartbeat_loop(self) -> None:
        while True:
            try:
                await self.heartbeat()
            except PyMongoError as exc:
                log.warning("heartbeat.failed", error=first_line(exc))
            await asyncio.sleep(self.config.heartbeat_interval_s)

    async def heartbeat(self) -> None:
        """Refresh ``last_seen_at`` of every slot in one round trip; halt slots that lost their entry."""
        now = self.clock.now()
        ops = []
        for s in self.slots:
            set_: dict[str, Any] = {"last_seen_at": now}
            if s.running is not None:
                set_.update(working=True, working_on=s.running.job_id, working_since=s.running.started_at)
            ops.append(UpdateOne({"_id": s.id}, {"$set": set_}))
        result = await self.c.roster.bulk_write(ops, ordered=False)
        if result.matched_count == len(self.slots):
            return
        present = {d["_id"] for d in await self.c.roster.find(
            {"_id": {"$in": [s.id for s in self.slots]}}, {"_id": 1}).to_list()}
        for s in self.slots:
            if s.id not in present and s.running is not None and not s.running.halted:
                self._halt(s, "the worker was declared dead; its job may run elsewhere")

    def _halt(self, slot: Slot, reason: str) -> None:
        assert slot.running is not None
        slot.running.halted = True
        log.warning("job.halted", worker_id=slot.id, job_id=str(slot.running.job_id), reason=reason)
        if slot.running.task is not None:
            slot.running.task.cancel()

    # -- one job ----------------------------------------------------------------

    async def work(self, slot: Slot, job_id: ObjectId, job: dict[str, Any] | None = None) -> None:
        """Run the job assigned to ``slot``: from the copy the assignment carried, or read."""
        if job is None or job.get("_id") != job_id:
            job = await self.c.scheduled.find_one({"_id": job_id})
        if not job or not job.get("locked") or job.get("locked_by") != slot.id:
            log.warning("assignment.stale", worker_id=slot.id, job_id=str(job_id))
            await self.c.roster.update_one(
                {"_id": slot.id, f"assigned_to.{slot.id}": job_id},
                {"$set": {"available": not self.stopping.is_set(), "available_since": self.clock.now()},
                 "$unset": {"assigned_to": "", "job": ""}},
            )
            return
        bound = log.bind(worker_id=slot.id, job_id=str(job_id), group=job.get("group"), attempt=job.get("attempts"))
        slot.running = Running(job_id, self.clock.now())
        slot.last_token = job.get("lock_token")
        try:
            outcome = await self.attempt(slot, job, bound)
            if outcome is not None:
                await self.record(slot, outcome, bound)
        finally:
            slot.running = None

    async def attempt(self, slot: Slot, job: dict[str, Any], bound: Any) -> Outcome | None:
        """Run (or, after a crash, judge) one attempt and return its outcome.

        ``None`` when the attempt was halted: the assignment was taken away while
        it ran, so there is nothing this worker may record.
        """
        now = self.clock.now()
        token = job["lock_token"]
        attempt = int(job.get("attempts", 1))
        if job.get("crash_pending"):
            verdict = judge_crash(job, now, self.config.max_crashes)
            if verdict is not None:
                bound.info("job.crash_judged", decision=describe_decision(verdict))
                return Outcome(job["_id"], token, attempt, executed=False, decision=verdict)

        started_at = now
        error: BaseException | None = None
        result: Any = None
        kind: Kind = "done"
        try:
            result = await self._execute(slot, job)
        except asyncio.CancelledError:
            if slot.running is None or not slot.running.halted:
                raise
            bound.warning("job.outcome_discarded", reason="halted while running")
            return None
        except JobTimedOut as exc:
            error, kind = exc, "timed-out"
        except Exception as exc:  # noqa: BLE001 - any failure of user code is an attempt outcome
            error, kind = exc, "failed"
        ended_at = self.clock.now()

        decision: Decision
        if error is None:
            result, dropped = storable_result(result)
            if dropped:
                bound.warning("job.result_dropped", reason=dropped)
            decision = Archive(DONE)
            execution = self._execution(job, attempt, kind, started_at, ended_at)
            bound.info("job.done", duration_s=(ended_at - started_at).total_seconds())
        else:
            cls, message, trace = describe_exception(error)
            decision = judge(job, failure_of(job, error, ended_at), ended_at)
            execution = self._execution(job, attempt, kind, started_at, ended_at, cls, message, trace)
            bound.info("job.failed", error=cls, message=message[:200], outcome=kind,
                       decision=describe_decision(decision))
        return Outcome(job["_id"], token, attempt, executed=True, decision=decision,
                       execution=execution, result=result if error is None else None)

    def _execution(self, job: dict[str, Any], attempt: int, kind: Kind, started_at: datetime, ended_at: datetime,
                   cls: str | None = None, message: str | None = None, trace: str | None = None) -> Execution:
        return Execution(
            attempt=attempt, kind=kind, worker=str(job.get("locked_by")), pid=self.pid, hostname=self.hostname,
            scheduled_at=job.get("scheduled_at"), started_at=started_at, ended_at=ended_at,
            error_class=cls, message=message, trace=trace,
        )

    async def _execute(self, slot: Slot, job: dict[str, Any]) -> Any:
        workable = workable_from_document(job["workable"])
        method = getattr(workable, job["workable"].get("method") or "execute")
        ctx = JobContext(
            job_id=str(job["_id"]), attempt=int(job.get("attempts", 1)), worker_id=slot.id,
            group=job.get("group", ""), tags=tuple(job.get("tags") or ()), tenant=job.get("tenant"),
            scheduled_at=job.get("scheduled_at"),
        )
        args = (ctx,) if accepts_context(method) else ()
        is_async = inspect.iscoroutinefunction(method)
        # Synchronous code runs in a thread so the event loop (and the heartbeat) keeps going.
        coro = method(*args) if is_async else asyncio.to_thread(method, *args)
        task = asyncio.ensure_future(coro)
        assert slot.running is not None
        slot.running.task = task
        timeout_s = job.get("timeout_s")
        if timeout_s and not is_async:
            # A thread cannot be stopped: giving up on it would let it run on beside
            # the next job. Until such jobs run in a child process, say so and wait.
            log.warning("job.timeout_not_enforced", job_id=str(job["_id"]), worker_id=slot.id,
                        timeout_s=timeout_s, reason="synchronous jobs are not interrupted yet")
            timeout_s = None
        try:
            if timeout_s:
                try:
                    value = await asyncio.wait_for(task, timeout=timeout_s)
                except TimeoutError:
                    raise JobTimedOut(f"the attempt ran longer than its timeout of {timeout_s}s") from None
            else:
                value = await task
        finally:
            slot.running.task = None
        if inspect.isawaitable(value):
            value = await value
        return value

    async def record(self, slot: Slot, outcome: Outcome, bound: Any) -> None:
        """Write the outcome into our roster entry and become available, in one write.

        Retries on connection errors: a lost outcome would leave the job locked.
        """
        if slot.running is not None and slot.running.halted:
            bound.warning("job.outcome_discarded", reason="halted")
            return
        stopping = self.stopping.is_set()
        backoff = self.config.poll_from_s
        while True:
            now = self.clock.now()
            try:
                result = await self.c.roster.update_one(
                    {"_id": slot.id, f"assigned_to.{slot.id}": outcome.job_id},
                    {
                        "$set": {
                            "outcome": outcome.to_document(),
                            "available": not stopping,
                            "stopping": stopping,
                            "available_since": now,
                            "last_seen_at": now,
                            "working": False,
                        },
                        "$unset": {"assigned_to": "", "job": "", "working_on": "", "working_since": ""},
                    },
                )
                break
            except PyMongoError as exc:
                bound.warning("outcome.write_failed", error=first_line(exc))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.config.poll_to_s)
        if result.matched_count == 0:
            bound.warning("job.outcome_discarded",
                          reason="the assignment was taken away (worker declared dead or job cancelled)")


class WorkerIdTaken(RuntimeError):
    def __init__(self, worker_id: str) -> None:
        super().__init__(
            f"worker id {worker_id!r} is already in the roster; another worker is using it, "
            "or it has not been cleaned yet"
        )
