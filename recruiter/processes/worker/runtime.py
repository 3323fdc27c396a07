"""The worker process: N worker slots, each with its own roster document.

A slot reads only its own roster document. When the recruiter has assigned it a
job (``available: false``, ``assigned_to.<id>`` set and a copy of the job in
``job``) it runs it, judges the result by the job's retry policy
and writes the outcome into its roster document in the same write that makes it
available again. That write is conditional on the assignment still being there,
so a slot declared dead by the cleaner cannot record anything (it is halted).

Fencing: each registration gets a fresh ``session`` id, stored in the roster
entry. Every write the slot makes (heartbeat, outcome, leaving) is conditional
on it, and those about a job also on ``assigned_to.<id>`` naming that job. A
worker declared dead, replaced by a restart with the same ``--id``, or whose
job was taken away learns it on its next write, halts the job and discards
its outcome.

Heartbeats come from a thread with its own client (:mod:`recruiter.heartbeat`),
so a job that blocks the event loop cannot silence them. They are written to the
slot's document in ``heartbeats`` (:mod:`recruiter.liveness`), not to its roster
entry; starting a job nudges the thread, so that the heartbeat soon shows the
attempt started (:class:`recruiter.heartbeat.HeartbeatThread`).

Stopping: :meth:`WorkerProcess.stop` is graceful (no new work, running jobs
finish within ``grace_period_s``); :meth:`WorkerProcess.force`, or the grace
period running out, interrupts running jobs and gives them back to the queue
without counting the attempt, with an ``interrupted`` entry in their history.

A slot learns of its job from a change stream on its roster document (one
stream per process, see :mod:`recruiter.wakeup`) or, where the server has no
change streams, by polling its document with a backoff.

"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pymongo
import structlog
from bson import ObjectId
from pymongo import UpdateOne
from pymongo.errors import DuplicateKeyError, PyMongoError

from recruiter.domain.attempt import describe_exception, failure_of, import_refusal, judge, judge_crash, storable_result
from recruiter.domain.clock import Clock
from recruiter.domain.documents import job_problem
from recruiter.domain.liveness import heartbeat_document, rescue_update
from recruiter.domain.naming import AllowedModules, module_problem, name_problem
from recruiter.domain.outcome import (
    DONE,
    MALFORMED,
    Execution,
    Kind,
    Outcome,
    describe_decision,
    jobs_referenced_by,
)
from recruiter.domain.quarantine import malformed_outcome
from recruiter.domain.retry import Archive, Decision, RetryAt
from recruiter.domain.selection import ANY_GROUP
from recruiter.domain.workable import JobContext, accepts_context, workable_from_document
from recruiter.processes.worker.child import ChildAttempt, ChildDied, JobTimedOut
from recruiter.processes.worker.heartbeat import JOB_TAKEN_AWAY, HeartbeatThread, SlotView, beat
from recruiter.store.connection import first_line
from recruiter.store.layout import Collections, SyncCollections
from recruiter.store.wakeup import RosterWatch, Wake, is_copy

log = structlog.get_logger("recruiter.worker")

__all__ = ["ChildDied", "JobTimedOut", "WorkerConfig", "WorkerIdTaken", "WorkerProcess"]

# Exit status of a worker that stopped because it went over --memory-limit: its
# supervisor starts a fresh one (EX_TEMPFAIL: "try again").
EXIT_MEMORY = 75
# Exit status of a worker that found itself declared dead or replaced while a job it
# could not stop (a thread) was still running: it ends the process to stop that job.
EXIT_FENCED = 70
# A job given back while it still runs in a thread is due again only this much later.
THREAD_EXIT_MARGIN_S = 2.0
# A worker whose heartbeat is this many of its intervals old is taken for dead
# when a new process starts with its id.
MISSED_BEATS_FOR_RESTART = 3


def _process_exists(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def resident_bytes() -> int:
    """This process's resident set size now (not its peak)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # peak; bytes on macOS


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
    grace_period_s: float = 30.0
    memory_limit_bytes: int | None = None
    wake: Wake = Wake.AUTO
    # With a change stream, each slot still reads its entry this often, in case an
    # event was missed; the stream's own wait (``stream_await_s``) bounds idle cost.
    safety_poll_s: float = 30.0
    stream_await_s: float = 2.0
    # Module prefixes jobs may name (see recruiter.naming.AllowedModules); None allows any
    # module, for code that builds a WorkerProcess itself. The CLI always sets it.
    allowed_modules: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not self.groups:
            raise ValueError("a worker needs at least one group")
        for g in self.groups:
            problem = None if g == ANY_GROUP else name_problem("group", g)
            if problem:
                raise ValueError(problem)
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
        if self.grace_period_s < 0:
            raise ValueError("grace period cannot be negative")
        if self.memory_limit_bytes is not None and self.memory_limit_bytes <= 0:
            raise ValueError("memory limit must be positive")
        for prefix in self.allowed_modules or ():
            problem = module_problem(prefix)
            if problem:
                raise ValueError(f"invalid allowed module: {problem}")

    def slot_ids(self) -> list[str]:
        base = self.worker_id or str(ObjectId())
        if self.concurrency == 1:
            return [base]
        return [f"{base}-{i}" for i in range(self.concurrency)]


@dataclass
class Running:
    job_id: ObjectId
    started_at: datetime
    token: Any = None  # the lock token of the attempt
    task: asyncio.Task[Any] | None = None
    child: ChildAttempt | None = None
    in_thread: bool = False
    halted: bool = False  # taken away: nothing may be recorded
    interrupted: bool = False  # forced stop: given back without counting the attempt
    recording: bool = False  # the outcome write is under way


@dataclass
class Slot:
    id: str
    session: ObjectId = field(default_factory=ObjectId)
    running: Running | None = None
    replaced: bool = False  # a process restarted with our id took the roster entry over
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    delivered: dict[str, Any] | None = None  # a job copy a change stream event carried
    must_poll: bool = True  # read our entry before waiting again
    last_token: Any = None  # lock token of the last job run, so a late event is not run twice
    waiting: bool = False  # waiting for an assignment
    leaving: bool = False  # deleting its own roster entry (a clean stop): a missing entry is expected
    left: bool = False  # its roster entry is gone by its own hand: no more heartbeats


class WorkerProcess:
    def __init__(self, db: Any, clock: Clock, config: WorkerConfig, *, heartbeat_db: Any,
                 exit_now: Callable[[int], None] = os._exit) -> None:
        """``heartbeat_db`` is the same database through a synchronous client, for the heartbeat thread.

        ``exit_now`` ends the process at once after a forced stop that had to leave a
        job running in a thread (which cannot be stopped otherwise).
        """
        self.c = Collections.of(db)
        self.sync = SyncCollections.of(heartbeat_db)
        self.clock = clock
        self.config = config
        self.pid = os.getpid()
        self.hostname = socket.gethostname()
        self.slots = [Slot(i) for i in config.slot_ids()]
        self.by_id = {s.id: s for s in self.slots}
        self.stopping = asyncio.Event()
        self.forced = False
        self.exit_code = 0
        self.exit_now = exit_now
        self._stop_requested_at: float | None = None
        self._abandoned_threads = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self.heartbeats = HeartbeatThread(self.sync, clock, config.heartbeat_interval_s,
                                          self._slot_views, self._lost_from_thread)
        self.watch: RosterWatch | None = None
        self.idle = asyncio.Event()  # some slot is waiting for work
        self.allowed = None if config.allowed_modules is None else AllowedModules(config.allowed_modules)

    # -- roster ---------------------------------------------------------------

    def _roster_document(self, slot: Slot, now: datetime) -> dict[str, Any]:
        return {
            "_id": slot.id,
            "work_on": list(self.config.groups),
            "available": True,
            "available_since": now,
            "created_at": now,
            "pid": self.pid,
            "hostname": self.hostname,
            "session": slot.session,
            "heartbeat_interval_s": self.config.heartbeat_interval_s,
        }

    async def register(self, slot: Slot) -> None:
        """Enter the roster; if the id is still there from a dead process, recover it first."""
        slot.session = ObjectId()
        while True:
            now = self.clock.now()
            try:
                await self.c.roster.insert_one(self._roster_document(slot, now))
                break
            except DuplicateKeyError:
                pass
            old = await self.c.roster.find_one({"_id": slot.id})
            if old is not None and await self.recover(slot, old, now):
                break
        # The entry is not given work until this document says it is alive (recruiter.liveness).
        await self.c.heartbeats.replace_one({"_id": slot.id}, heartbeat_document(
            slot.id, slot.session, self.clock.now(), self.config.heartbeat_interval_s, self.pid, self.hostname),
            upsert=True)
        log.info("worker.registered", worker_id=slot.id, groups=list(self.config.groups), pid=self.pid)

    async def recover(self, slot: Slot, old: dict[str, Any], now: datetime) -> bool:
        """Take over the entry a previous process with our id left, and release its jobs.

        Refused (:class:`WorkerIdTaken`) while that process still heartbeats. Its
        unapplied outcome is kept for the recruiter; the jobs it was given or was
        running are returned or unlocked as crashed attempts, as its heartbeats
        tell (:func:`recruiter.liveness.rescue_update`). The takeover changes
        ``session``, so if the old process was only paused, its writes are
        refused from now on. Returns False when the entry changed under us (read
        it again).
        """
        beat = await self.c.heartbeats.find_one({"_id": slot.id})
        if beat is not None and beat.get("session") != old.get("session"):
            beat = None  # not the heartbeat of that entry
        interval = float((beat or old).get("heartbeat_interval_s") or self.config.heartbeat_interval_s)
        seen = (beat or old).get("last_seen_at")
        seen = seen if isinstance(seen, datetime) else None
        silent = now - seen if seen is not None else None
        # On this machine we can see whether its process is gone; elsewhere, its heartbeat tells.
        gone_here = old.get("hostname") == self.hostname and not _process_exists(old.get("pid"))
        if not gone_here and silent is not None and silent < timedelta(seconds=MISSED_BEATS_FOR_RESTART * interval):
            raise WorkerIdTaken(slot.id, old, silent)
        entry = self._roster_document(slot, now)
        entry.update(available=False, recovering=True)
        if old.get("outcome"):
            entry["outcome"] = old["outcome"]
        result = await self.c.roster.replace_one({"_id": slot.id, "session": old.get("session")}, entry)
        if result.matched_count == 0:
            return False
        held = jobs_referenced_by(old) - {(old.get("outcome") or {}).get("job")}
        jobs = await self.c.scheduled.find(
            {"_id": {"$in": list(held)}, "locked": True, "locked_by": slot.id}).to_list() if held else []
        reason = (f"worker {slot.id} (pid {old.get('pid')} on {old.get('hostname')}) was restarted; "
                  f"last seen {seen.isoformat() if seen else 'never'}")
        if jobs:
            await self.c.scheduled.bulk_write(
                [UpdateOne(*rescue_update(j, old, beat, now, reason)[1]) for j in jobs], ordered=False)
        await self.c.roster.update_one(
            {"_id": slot.id, "session": slot.session},
            {"$set": {"available": True, "available_since": self.clock.now()}, "$unset": {"recovering": ""}})
        log.warning("worker.recovered", worker_id=slot.id, previous_pid=old.get("pid"),
                    previous_hostname=old.get("hostname"), released=[str(j["_id"]) for j in jobs],
                    kept_outcome=bool(old.get("outcome")))
        return True

    async def deregister(self, slot: Slot) -> None:
        """Leave the roster without losing an assignment or an unapplied outcome.

        Bounded by ``deregister_wait_s`` even when the server is unreachable: an
        entry left behind is removed by the cleaner once it stops heartbeating.
        After a forced stop it does not wait for the recruiter: an outcome left
        in the entry is applied all the same, and the cleaner removes the entry.
        """
        if slot.replaced:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.deregister_wait_s
        mine = {"_id": slot.id, "session": slot.session}
        try:
            with pymongo.timeout(self.config.deregister_wait_s):
                result = await self.c.roster.update_one(
                    {**mine, "available": True}, {"$set": {"stopping": True, "available": False}}
                )
                job_id = None
                if result.matched_count == 0:
                    doc = await self.c.roster.find_one(mine, {f"assigned_to.{slot.id}": 1})
                    job_id = ((doc or {}).get("assigned_to") or {}).get(slot.id)
            if job_id is not None:
                # Assigned while we were deciding to stop: do it (or, forced, give it back), then leave.
                await self.work(slot, job_id)
                deadline = loop.time() + self.config.deregister_wait_s
            slot.leaving = True
            while True:
                with pymongo.timeout(max(0.1, deadline - loop.time())):
                    deleted = await self.c.roster.delete_one({**mine, "outcome": {"$exists": False}})
                    gone = deleted.deleted_count or not await self.c.roster.find_one(mine, {"_id": 1})
                if gone:
                    await self.c.heartbeats.delete_one(mine)
                    slot.left = True
                    log.info("worker.deregistered", worker_id=slot.id)
                    return
                if self.forced or loop.time() >= deadline:
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
        self._loop = asyncio.get_running_loop()
        if self.allowed is not None:
            log.info("worker.allowed_modules", modules=list(self.allowed.prefixes),
                     detail="jobs naming any other module are archived as malformed, unimported")
        for slot in self.slots:
            await self.register(slot)
        self.heartbeats.start()
        side: list[asyncio.Task[Any]] = []
        if self.config.wake is not Wake.POLL:
            watch = RosterWatch(self.c.roster, [s.id for s in self.slots], self._delivered, self._stream_opened,
                                self.idle, max_await_s=self.config.stream_await_s)
            if self.config.wake is Wake.CHANGE_STREAM or await watch.supported():
                self.watch = watch
                side.append(asyncio.create_task(watch.run(), name="worker.watch"))
        slot_tasks = [asyncio.create_task(self._slot_loop(s), name=f"worker.slot.{s.id}") for s in self.slots]
        check_s = min(0.25, self.config.heartbeat_interval_s)
        try:
            pending: set[asyncio.Task[Any]] = {*slot_tasks, *side}
            while any(t in pending for t in slot_tasks):
                done, pending = await asyncio.wait(pending, timeout=check_s)
                for task in done:
                    if task.exception() is not None:
                        raise task.exception()  # type: ignore[misc]
                    if task in side:
                        raise RuntimeError(f"the {task.get_name()} task stopped")
                # The heartbeat thread is supervised: a new one replaces it if it died.
                self.heartbeats.ensure_alive()
                if (self._stop_requested_at is not None and not self.forced
                        and self._loop.time() >= self._stop_requested_at + self.config.grace_period_s):
                    log.warning("worker.grace_period_over", grace_period_s=self.config.grace_period_s)
                    self.force()
        finally:
            self.stopping.set()
            for s in self.slots:
                s.wake.set()
            await asyncio.gather(*slot_tasks, return_exceptions=True)
            for task in side:
                task.cancel()
            await asyncio.gather(*side, return_exceptions=True)
            self.heartbeats.stop()
        if self._abandoned_threads:
            # A synchronous job cannot be stopped inside its thread, and it was given
            # back to the queue: end the process now so it cannot run on beside its rerun.
            log.warning("worker.exit_now", reason="interrupted jobs were running in threads",
                        threads=self._abandoned_threads)
            self.exit_now(self.exit_code)

    def busy(self) -> bool:
        """Whether a job is running here (a graceful stop waits for it)."""
        return any(s.running is not None for s in self.slots)

    def stop(self) -> None:
        """Graceful stop: take no new work, let running jobs finish, leave the roster."""
        if not self.stopping.is_set():
            log.info("worker.stopping", workers=[s.id for s in self.slots],
                     grace_period_s=self.config.grace_period_s)
            self._stop_requested_at = asyncio.get_running_loop().time()
        self.stopping.set()
        for s in self.slots:
            s.wake.set()

    def force(self) -> None:
        """Forced stop: interrupt running jobs; each is given back without counting the attempt."""
        self.stop()
        if self.forced:
            return
        self.forced = True
        log.warning("worker.forced_stop", running=[str(s.running.job_id) for s in self.slots if s.running])
        for s in self.slots:
            r = s.running
            if r is None or r.recording:
                continue
            if not r.halted:
                r.interrupted = True
                self._interrupt(r)
            elif r.in_thread and r.task is not None:
                # A cancelled job still running in its thread: stop waiting for it, and
                # end the process (run() does, seeing an abandoned thread).
                self._abandoned_threads += 1
                r.task.cancel()

    def _interrupt(self, running: Running) -> None:
        if running.child is not None:
            running.child.kill()
        if running.task is not None:
            running.task.cancel()

    def _delivered(self, slot_id: str, job: dict[str, Any] | None) -> None:
        slot = self.by_id.get(slot_id)
        if slot is None:
            return
        if isinstance(job, dict) and job.get("lock_token") != slot.last_token:
            slot.delivered = job
        else:
            # No job (e.g. the assignment was cancelled): a copy delivered earlier and
            # not started yet is no longer to be trusted; read the entry instead.
            slot.delivered = None
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
        while not self.stopping.is_set() and not slot.replaced:
            streaming = self._streaming()
            try:
                job: dict[str, Any] | None = None
                job_id: ObjectId | None = None
                if slot.delivered is not None:
                    job, slot.delivered = slot.delivered, None
                    if job.get("lock_token") != slot.last_token:
                        job_id = job.get("_id")
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
            if self.stopping.is_set() or slot.replaced:
                continue  # stop() ran during this pass (e.g. from fetch): its wake-up was just cleared
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
            {"_id": slot.id},
            {"available": 1, f"assigned_to.{slot.id}": 1, "job": 1, "session": 1, "stop_requested": 1})
        if doc is None:
            log.warning("worker.lost_registration", worker_id=slot.id,
                        detail="the cleaner removed this worker (missed heartbeats); registering again")
            await self.register(slot)
            return None, None
        if doc.get("session") != slot.session:
            log.error("worker.replaced", worker_id=slot.id,
                      detail="another process took over this worker id (this one was taken for dead); "
                             "this slot stops")
            slot.replaced = True
            return None, None
        if doc.get("stop_requested") and not self.stopping.is_set():
            log.info("worker.stop_requested", worker_id=slot.id)
            self.stop()
        if doc.get("available"):
            return None, None
        assigned = doc.get("assigned_to")
        job_id = assigned.get(slot.id) if isinstance(assigned, dict) else None
        if job_id is None and not self.stopping.is_set():
            # Not available and nothing assigned: the job was cancelled before this
            # slot started it (recruiter.cancel).
            await self._available_again(slot)
        return job_id, doc.get("job")

    # -- heartbeats -------------------------------------------------------------

    def _slot_views(self) -> list[SlotView]:
        views = []
        for s in self.slots:
            if s.replaced or s.left:
                continue
            r = s.running
            # A halted job is no longer this slot's to report (a thread may run on):
            # beat as an idle slot, so that the worker stays alive meanwhile.
            busy = r is not None and not r.recording and not r.halted
            views.append(SlotView(s.id, s.session, r.job_id if busy and r else None,
                                  r.started_at if busy and r else None, r.token if busy and r else None))
        return views

    def _lost_from_thread(self, view: SlotView, reason: str) -> None:
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed: the process is ending
                self._loop.call_soon_threadsafe(self._on_lost, view, reason)

    def _on_lost(self, view: SlotView, reason: str) -> None:
        slot = next((s for s in self.slots if s.id == view.id), None)
        if slot is None or (slot.leaving and slot.running is None):
            return  # a slot deleting its own entry finds it gone: that is no fence
        r = slot.running
        if r is not None and r.job_id == view.job_id and not r.recording and not r.halted:
            self._halt(slot, reason, worker_lost=reason != JOB_TAKEN_AWAY)
        elif view.job_id is None:
            log.warning("heartbeat.fenced", worker_id=slot.id, reason=reason)

    async def heartbeat(self) -> None:
        """One heartbeat now, as the thread does it (for tests and tools)."""
        for view, reason in await asyncio.to_thread(beat, self.sync, self.clock, self.config.heartbeat_interval_s,
                                                    self._slot_views()):
            self._on_lost(view, reason)

    def _halt(self, slot: Slot, reason: str, *, worker_lost: bool) -> None:
        """Stop a job that was taken away; its outcome will be discarded.

        An ``async`` job is cancelled and a child process killed. A thread cannot
        be stopped: when the whole worker was declared dead or replaced (its job
        may already run elsewhere), the process ends at once so that it does not
        run beside its rerun; when only the job was taken away, the thread runs
        to its end and its outcome is discarded.
        """
        assert slot.running is not None
        slot.running.halted = True
        log.warning("job.halted", worker_id=slot.id, job_id=str(slot.running.job_id), reason=reason)
        if not slot.running.in_thread:
            self._interrupt(slot.running)
        elif worker_lost:
            log.error("worker.exit_now", worker_id=slot.id, exit_status=EXIT_FENCED,
                      reason="a job that may now run elsewhere cannot be stopped inside its thread")
            self.exit_now(EXIT_FENCED)

    # -- one job ----------------------------------------------------------------

    async def work(self, slot: Slot, job_id: ObjectId, job: dict[str, Any] | None = None) -> None:
        """Run the job assigned to ``slot``: from the copy the assignment carried, or read
        by ``_id`` (no copy, or only a reference to a job too big to copy)."""
        if not isinstance(job, dict) or not is_copy(job) or job.get("_id") != job_id:
            job = await self.c.scheduled.find_one({"_id": job_id})
        if not job or job.get("locked") is not True or job.get("locked_by") != slot.id:
            log.warning("assignment.stale", worker_id=slot.id, job_id=str(job_id))
            result = await self.c.roster.update_one(
                {"_id": slot.id, "session": slot.session, f"assigned_to.{slot.id}": job_id},
                {"$set": {"available": not self.stopping.is_set(), "available_since": self.clock.now()},
                 "$unset": {"assigned_to": "", "job": ""}},
            )
            if result.matched_count == 0:  # the assignment itself is gone (cancelled)
                await self._available_again(slot)
            return
        bound = log.bind(worker_id=slot.id, job_id=str(job_id), group=str(job.get("group"))[:100],
                         attempt=job.get("attempts"))
        slot.running = Running(job_id, self.clock.now(), token=job.get("lock_token"))
        slot.last_token = job.get("lock_token")
        self.heartbeats.nudge()
        problem = job_problem(job)
        try:
            if problem is not None:
                bound.warning("job.malformed", reason=problem, detail="not run; the recruiter archives it as malformed")
                outcome: Outcome | None = malformed_outcome(job, problem)
            elif self.forced:
                outcome = self._given_back(job, slot.running, "the worker was stopping (forced)")
            else:
                outcome = await self.attempt(slot, job, bound)
            # Checked before the outcome is written, so that write already says "stopping"
            # and the recruiter hands this worker nothing more.
            self._check_memory(bound)
            if outcome is not None:
                await self.record(slot, outcome, bound)
            else:
                await self._available_again(slot)
        finally:
            slot.running = None

    def _check_memory(self, bound: Any) -> None:
        limit = self.config.memory_limit_bytes
        if limit is None or self.stopping.is_set():
            return
        rss = resident_bytes()
        if rss > limit:
            bound.warning("worker.memory_limit", rss_bytes=rss, limit_bytes=limit,
                          detail=f"stopping; exit status {EXIT_MEMORY} asks the supervisor for a fresh worker")
            self.exit_code = EXIT_MEMORY
            self.stop()

    def _given_back(self, job: dict[str, Any], running: Running, reason: str) -> Outcome:
        """The outcome of an attempt cut short by a forced stop: back in the queue, attempt not counted.

        Due at once, except when the attempt still runs in a thread: then only after
        ``THREAD_EXIT_MARGIN_S``, by when this process (which ends itself to stop
        that thread) is gone, so the rerun cannot overlap it.
        """
        now = self.clock.now()
        due = now + timedelta(seconds=THREAD_EXIT_MARGIN_S) if running.in_thread else now
        attempt = int(job.get("attempts", 1))
        execution = Execution(
            attempt=attempt, kind="interrupted", worker=str(job.get("locked_by")), pid=self.pid,
            hostname=self.hostname, scheduled_at=job.get("scheduled_at"), started_at=running.started_at,
            ended_at=now, error_class=None, message=reason, assigned_at=job.get("locked_at"),
        )
        return Outcome(job["_id"], job["lock_token"], attempt, executed=False, decision=RetryAt(due),
                       execution=execution)

    async def attempt(self, slot: Slot, job: dict[str, Any], bound: Any) -> Outcome | None:
        """Run (or, after a crash, judge) one attempt and return its outcome.

        ``None`` when the attempt was halted: the assignment was taken away while
        it ran, so there is nothing this worker may record.
        """
        now = self.clock.now()
        token = job["lock_token"]
        attempt = int(job.get("attempts", 1))
        settled = self._refused(job, now, bound) or self._crash_judged(job, now, bound)
        if settled is not None:
            return settled

        started_at = now
        error: BaseException | None = None
        result: Any = None
        kind: Kind = "done"
        running = slot.running
        assert running is not None
        try:
            result = await self._execute(slot, job)
        except asyncio.CancelledError:
            if running.halted:
                bound.warning("job.outcome_discarded", reason="halted while running")
                return None
            if running.interrupted:
                if running.in_thread:
                    self._abandoned_threads += 1
                bound.warning("job.interrupted", detail="given back to the queue; the attempt does not count")
                return self._given_back(job, running, "interrupted by a forced stop of the worker")
            raise
        except JobTimedOut as exc:
            error, kind = exc, "timed-out"
        except Exception as exc:  # noqa: BLE001 - any failure of user code is an attempt outcome
            error, kind = exc, "failed"
        if running.halted:
            bound.warning("job.outcome_discarded", reason="halted while running")
            return None
        if running.interrupted:
            return self._given_back(job, running, "interrupted by a forced stop of the worker")
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

    def _crash_judged(self, job: dict[str, Any], now: datetime, bound: Any) -> Outcome | None:
        """After a crash, the outcome the poison limit (or at_most_once) gives without running; None: run it."""
        if not job.get("crash_pending"):
            return None
        verdict = judge_crash(job, now, self.config.max_crashes)
        if verdict is None:
            return None
        bound.info("job.crash_judged", decision=describe_decision(verdict))
        return Outcome(job["_id"], job["lock_token"], int(job.get("attempts", 1)), executed=False, decision=verdict)

    def _refused(self, job: dict[str, Any], now: datetime, bound: Any) -> Outcome | None:
        """The outcome of a job naming a module outside the allowed ones: archived ``malformed``, unrun.

        Decided on the names alone, so the module is never imported.
        """
        refusal = None if self.allowed is None else import_refusal(job, self.allowed)
        if refusal is None:
            return None
        bound.warning("job.refused", why=MALFORMED, reason=refusal)
        attempt = int(job.get("attempts", 1))
        return Outcome(job["_id"], job["lock_token"], attempt, executed=False,
                       decision=Archive(MALFORMED, refusal),
                       execution=self._execution(job, attempt, "refused", now, now, message=refusal))

    def _execution(self, job: dict[str, Any], attempt: int, kind: Kind, started_at: datetime, ended_at: datetime,
                   cls: str | None = None, message: str | None = None, trace: str | None = None) -> Execution:
        return Execution(
            attempt=attempt, kind=kind, worker=str(job.get("locked_by")), pid=self.pid, hostname=self.hostname,
            scheduled_at=job.get("scheduled_at"), started_at=started_at, ended_at=ended_at,
            error_class=cls, message=message, trace=trace, assigned_at=job.get("locked_at"),
        )

    async def _execute(self, slot: Slot, job: dict[str, Any]) -> Any:
        """Run the job's method.

        With a timeout, a synchronous method runs in a child process that is
        killed when the timeout passes (a thread could not be stopped); an
        ``async`` one is cancelled. Without a timeout, synchronous code runs in
        a thread (no process to start) and ``async`` code on the event loop.
        """
        running = slot.running
        assert running is not None
        ctx = JobContext(
            job_id=str(job["_id"]), attempt=int(job.get("attempts", 1)), worker_id=slot.id,
            group=job.get("group", ""), tags=tuple(job.get("tags") or ()), tenant=job.get("tenant"),
            scheduled_at=job.get("scheduled_at"), assigned_at=job.get("locked_at"),
        )
        timeout_s = job.get("timeout_s")
        workable = workable_from_document(job["workable"])
        method = getattr(workable, job["workable"].get("method") or "execute")
        is_async = inspect.iscoroutinefunction(method)
        if timeout_s and not is_async:
            running.child = ChildAttempt()
            coro = running.child.run(job["workable"], ctx, float(timeout_s))
        else:
            args = (ctx,) if accepts_context(method) else ()
            running.in_thread = not is_async
            coro = method(*args) if is_async else asyncio.to_thread(method, *args)
        task = asyncio.ensure_future(coro)
        running.task = task
        try:
            if timeout_s and is_async:
                try:
                    value = await asyncio.wait_for(task, timeout=timeout_s)
                except TimeoutError:
                    raise JobTimedOut(f"the attempt ran longer than its timeout of {timeout_s:g}s") from None
            else:
                value = await task
        finally:
            running.task = None
        if inspect.isawaitable(value):
            value = await value
        return value

    async def record(self, slot: Slot, outcome: Outcome, bound: Any) -> None:
        """Write the outcome into our roster entry and become available, in one write.

        Fenced by our session and the assignment; retries on connection errors:
        a lost outcome would leave the job locked.
        """
        if slot.running is not None:
            if slot.running.halted:
                bound.warning("job.outcome_discarded", reason="halted")
                await self._available_again(slot)
                return
            slot.running.recording = True
        stopping = self.stopping.is_set()
        backoff = self.config.poll_from_s
        while True:
            now = self.clock.now()
            try:
                result = await self.c.roster.update_one(
                    {"_id": slot.id, "session": slot.session, f"assigned_to.{slot.id}": outcome.job_id},
                    {
                        "$set": {
                            "outcome": outcome.to_document(),
                            "available": not stopping,
                            "stopping": stopping,
                            "available_since": now,
                        },
                        "$unset": {"assigned_to": "", "job": ""},
                    },
                )
                break
            except PyMongoError as exc:
                bound.warning("outcome.write_failed", error=first_line(exc))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.config.poll_to_s)
        if result.matched_count == 0:
            try:
                await self._outcome_write_refused(slot, outcome, bound)
            except PyMongoError as exc:
                bound.warning("job.outcome_refused", error=first_line(exc),
                              detail="the outcome write matched nothing, and why could not be read")
                await self._available_again(slot)

    async def _outcome_write_refused(self, slot: Slot, outcome: Outcome, bound: Any) -> None:
        """The outcome write matched nothing: find out why, and log what truly happened.

        An earlier try of the same write may have landed with its reply lost (a
        write-concern or network error, then :meth:`record` tried again), and the
        recruiter may have applied the outcome since: then nothing was discarded.
        Otherwise the job was taken away, or this worker declared dead or replaced.
        """
        entry = await self.c.roster.find_one({"_id": slot.id}, {"session": 1, "outcome.token": 1})
        ours = entry is not None and entry.get("session") == slot.session
        if ours and ((entry or {}).get("outcome") or {}).get("token") == outcome.token:
            bound.info("outcome.recorded", detail="an earlier try of this write had landed")
            return
        applied, reason = await self._outcome_applied(outcome)
        if applied:
            bound.info("outcome.recorded", detail="an earlier try of this write had landed; it is applied already")
            return
        bound.warning("job.outcome_discarded", reason=reason if ours else "this worker was declared dead or replaced")
        await self._available_again(slot)

    async def _outcome_applied(self, outcome: Outcome) -> tuple[bool, str]:
        """Whether the job's last execution is the one ``outcome`` reports (the recruiter
        applied it); if not, why the assignment went, as far as the job tells."""
        fields = {"lock_token": 1, "last_execution": 1}
        job = (await self.c.scheduled.find_one({"_id": outcome.job_id}, fields)
               or await self.c.archived.find_one({"_id": outcome.job_id}, fields))
        last = (job or {}).get("last_execution")
        last = last if isinstance(last, dict) else {}
        if outcome.execution is not None and (job or {}).get("lock_token") != outcome.token:
            mine = outcome.execution.to_document()
            if all(last.get(k) == mine[k] for k in ("attempt", "outcome", "worker", "pid", "hostname")):
                return True, ""
        if last.get("outcome") == "cancelled" and last.get("attempt") == outcome.attempt:
            return False, "the job was cancelled"
        if outcome.execution is None:  # a judged crash: no execution to recognise it by
            return False, "the assignment is gone (applied already, or the job was cancelled or rescued)"
        return False, "the assignment was taken away (the job was cancelled or rescued)"

    async def _available_again(self, slot: Slot) -> None:
        """After a job was taken away from this slot (cancelled), make the entry available again.

        Fenced by our session and by the entry holding no assignment: when the
        whole worker was declared dead or replaced this matches nothing, and
        nothing is written.
        """
        now = self.clock.now()
        stopping = self.stopping.is_set()
        try:
            result = await self.c.roster.update_one(
                {"_id": slot.id, "session": slot.session, "assigned_to": {"$exists": False},
                 "recovering": {"$exists": False}},
                {"$set": {"available": not stopping, "stopping": stopping, "available_since": now},
                 "$unset": {"job": ""}},
            )
        except PyMongoError as exc:
            log.warning("worker.release_failed", worker_id=slot.id, error=first_line(exc),
                        detail="the cleaner removes this entry once it stops heartbeating")
            return
        if result.matched_count:
            log.info("worker.available_again", worker_id=slot.id, detail="its job was taken away")


class WorkerIdTaken(RuntimeError):
    def __init__(self, worker_id: str, entry: dict[str, Any], silent: timedelta) -> None:
        super().__init__(
            f"worker id {worker_id!r} is in use by pid {entry.get('pid')} on {entry.get('hostname')} "
            f"(last heartbeat {silent.total_seconds():.1f}s ago); stop it first "
            f"(recruiter workers stop {worker_id}) or choose another --id"
        )
