"""The worker process: N worker slots, each with its own roster entry.

A slot reads only its own roster entry. When the recruiter has assigned it a
job (``available: false``, ``assigned_to.<id>`` set and a copy of the job in
``job``) it runs it through the :class:`~recruiter.processes.worker.executor.Executor`
(job in, outcome out, no writes), and its entry
(:class:`~recruiter.processes.worker.entry.RosterEntries`) writes the outcome in
the same write that makes it available again, fenced by its registration's
``session`` and by the assignment: a slot declared dead by the cleaner, or whose
job was taken away, records nothing (the job is halted).

Heartbeats come from a thread with its own client
(:mod:`recruiter.processes.worker.heartbeat`), so a job that blocks the event
loop cannot silence them; starting a job nudges the thread, so that the
heartbeat soon shows the attempt started. A slot learns of its job from the
process's poller, one read of all its entries (:mod:`recruiter.processes.worker.poller`,
the default), or with ``--wake change-stream`` from a change stream on its entries (one
stream per process, :mod:`recruiter.store.wakeup`); either fills the slots' inboxes
(:mod:`recruiter.processes.worker.inbox`).

Stopping: :meth:`WorkerProcess.stop` is graceful (no new work, running jobs
finish within ``grace_period_s``); :meth:`WorkerProcess.force`, or the grace
period running out, interrupts running jobs and gives them back to the queue
without counting the attempt, with an ``interrupted`` entry in their history.
With ``burst`` (``worker start --burst``) the process stops itself gracefully
once nothing is left for it (:meth:`WorkerProcess._burst`).
What stops a running job from outside its slot's loop (a halt after a lost entry
or job, a forced stop's interrupts, a thread left running) is
:class:`~recruiter.processes.worker.job_stops.JobStops`.

Invariant: a running job's state changes only through
:meth:`~recruiter.processes.worker.state.Running.move`, whichever of the three
sources acts (the slot's loop records, the heartbeat thread halts, a forced stop
interrupts); and a job that may still run in a thread after it was given back
or taken from a lost worker ends the process, so it never runs beside its rerun.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable

import structlog
from bson import ObjectId
from structlog.typing import FilteringBoundLogger

from recruiter.domain.clock import Clock
from recruiter.domain.control import read_switches
from recruiter.domain.naming import ANY_GROUP, AllowedModules
from recruiter.domain.outcome import Outcome
from recruiter.domain.records import Raw
from recruiter.processes.events import Bus
from recruiter.processes.worker import capture
from recruiter.processes.worker.child import ChildDied, JobTimedOut
from recruiter.processes.worker.completer import Completer
from recruiter.processes.worker.config import EXIT_FENCED, EXIT_MEMORY, WorkerConfig
from recruiter.processes.worker.entry import RosterEntries
from recruiter.processes.worker.executor import Executor
from recruiter.processes.worker.heartbeat import HeartbeatThread, beat, slot_views
from recruiter.processes.worker.inbox import Inboxes
from recruiter.processes.worker.job_stops import JobStops
from recruiter.processes.worker.poller import Poller
from recruiter.processes.worker.refusing import warn_unrunnable
from recruiter.processes.worker.registration import WorkerIdTaken
from recruiter.processes.worker.slots import SlotLoop, needs_read
from recruiter.processes.worker.state import Runner, Shutdown, Slot, SlotPhase
from recruiter.store import heartbeats as heartbeat_docs
from recruiter.store import metadata, roster, scheduled
from recruiter.store.connection import StoreError, first_line
from recruiter.store.layout import AsyncDb, Collections, SyncCollections, SyncDb
from recruiter.store.wakeup import RosterWatch, Wake

log = structlog.get_logger("recruiter.worker")

__all__ = ["EXIT_FENCED", "EXIT_MEMORY", "ChildDied", "JobTimedOut", "WorkerConfig", "WorkerIdTaken",
           "WorkerProcess"]


def resident_bytes() -> int:
    """This process's resident set size now (not its peak)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # peak; bytes on macOS


class WorkerProcess:
    """One worker process: its slots, their loops, the heartbeat thread and the poller (or change stream)."""

    def __init__(self, db: AsyncDb, clock: Clock, config: WorkerConfig, *, heartbeat_db: SyncDb,
                 exit_now: Callable[[int], None] = os._exit, bus: Bus | None = None) -> None:
        """``heartbeat_db`` is the same database through a synchronous client, for the heartbeat thread.

        ``exit_now`` ends the process at once after a forced stop that had to leave a
        job running in a thread (which cannot be stopped otherwise). ``bus`` receives the
        process's events (:mod:`recruiter.processes.events`; by default, the logs alone).
        """
        self.bus = bus or Bus.logging()
        self.c = Collections.of(db)
        self.sync = SyncCollections.of(heartbeat_db)
        self.clock = clock
        self.config = config
        self.pid = os.getpid()
        self.hostname = socket.gethostname()
        # One runner per slot; each runs the jobs of its lanes (max(prefetch, batch) + 1 roster entries).
        self.runners = {i: Runner(i, config.ahead + 1) for i in config.slot_ids()}
        self.slots = [Slot(entry_id, runner=self.runners[slot_id], lane=k)
                      for slot_id, k, entry_id in config.lanes(list(self.runners))]
        self.shutdown = Shutdown()
        self.exit_code = 0
        self.exit_now = exit_now
        # Halts, interrupts and abandons running jobs; ends the process where one may run on.
        self.job_stops = JobStops(self.slots, exit_now)
        self.inboxes = Inboxes((s.id, s.inbox) for s in self.slots)
        self.watch: RosterWatch | None = None
        self.poller: Poller | None = None
        allowed = None if config.allowed_modules is None else AllowedModules(config.allowed_modules)
        # This process's registration: a job it cannot run is never handed to it again
        # (recruiter.domain.refusals); a restarted process (a new release) gets a new one. It is
        # also the _id of the process's one heartbeat document (recruiter.domain.liveness).
        self.process_token = str(ObjectId())
        self.heartbeats = HeartbeatThread(self.sync, clock, config.heartbeat_interval_s,
                                          lambda: slot_views(self.slots), self.job_stops.lost_from_thread,
                                          key=ObjectId(self.process_token))
        self.entries = RosterEntries(self.c, clock, config, self.shutdown, pid=self.pid, hostname=self.hostname,
                                     process=self.process_token, bus=self.bus)
        if config.batch:  # outcomes of several slots in one command: with --batch only, for now
            self.entries.completer = Completer(self.c.roster, lambda: sum(s.running is not None for s in self.slots))
        self.executor = Executor(clock, max_crashes=config.max_crashes, allowed=allowed, pid=self.pid,
                                 hostname=self.hostname, abandon_thread=self.job_stops.abandon_thread,
                                 process=self.process_token, give_back_for_s=config.give_back_for_s,
                                 isolation=config.isolation, max_result_bytes=config.max_result_bytes)
        self.slot_loop = SlotLoop(self.c, clock, config, self.shutdown, entries=self.entries,
                                  executor=self.executor, inboxes=self.inboxes, streaming=self._streaming,
                                  stop_process=self.stop, started=self.heartbeats.nudge,
                                  after_job=self._check_memory, bus=self.bus)

    @property
    def stopping(self) -> asyncio.Event:
        return self.shutdown.stopping

    @property
    def forced(self) -> bool:
        return self.shutdown.forced

    # -- the process ------------------------------------------------------------------

    async def run(self) -> None:
        self.job_stops.loop = asyncio.get_running_loop()
        # Before any thread logs: the structlog processor goes into the chain in place.
        capture.install()
        if self.executor.allowed is not None:
            log.info("worker.allowed_modules", modules=list(self.executor.allowed.prefixes),
                     detail="a job naming any other module is given back unimported for another worker, and "
                            "archived unrunnable once refused for --give-back-for")
        await warn_unrunnable(self.c.scheduled, self.config.groups, self.executor.allowed, log)
        await self.entries.register_all(self.slots)
        self.heartbeats.start()
        side = await self._side_tasks()
        slot_tasks = [asyncio.create_task(self.slot_loop.run(s), name=f"worker.slot.{s.id}") for s in self.slots]
        burst = asyncio.create_task(self._burst(), name="worker.burst") if self.config.burst else None
        try:
            await self._supervise(slot_tasks, side)
        finally:
            if burst is not None:
                burst.cancel()
                await asyncio.gather(burst, return_exceptions=True)
            self.stopping.set()
            self.inboxes.wake_all()
            await asyncio.gather(*slot_tasks, return_exceptions=True)
            for task in side:
                task.cancel()
            await asyncio.gather(*side, return_exceptions=True)
            self.heartbeats.stop()
            await self._forget_beat()
        self.job_stops.exit_if_abandoned(self.exit_code)

    async def _forget_beat(self) -> None:
        """Every slot left the roster: delete the process's heartbeat document. Otherwise it stays,
        and goes stale: the cleaner removes the entries left behind, and it with the last."""
        if not all(s.phase is SlotPhase.LEFT for s in self.slots):
            return
        try:
            await heartbeat_docs.delete_process_beat(self.c.heartbeats, ObjectId(self.process_token))
        except StoreError as exc:
            log.warning("worker.heartbeat_not_deleted", error=first_line(exc),
                        detail="the cleaner removes it once it is stale")

    async def _side_tasks(self) -> list[asyncio.Task[None]]:
        """The poller's task (``auto`` and ``poll``), or the change stream's and its safety reads'
        (``change-stream``; where the server has none, the poller's)."""
        if self.config.wake is not Wake.CHANGE_STREAM:
            return [self._start_poller()]
        watch = RosterWatch(self.c.roster, [s.id for s in self.slots], self.inboxes.delivered,
                            self.inboxes.stream_opened, self.inboxes.idle, max_await_s=self.config.stream_await_s,
                            eager=lambda: any(not r.queue for r in self.runners.values()))
        if not await watch.supported():
            return [self._start_poller()]
        self.watch = watch
        return [asyncio.create_task(watch.run(), name="worker.watch"),
                asyncio.create_task(self._safety_reads(), name="worker.safety_reads")]

    def _start_poller(self) -> asyncio.Task[None]:
        self.poller = Poller(self.c.roster, self.slots, self.inboxes, self.clock, poll_from_s=self.config.poll_from_s,
                             poll_to_s=self.config.poll_to_s)
        return asyncio.create_task(self.poller.run(), name="worker.poller")

    async def _safety_reads(self) -> None:
        """While the stream runs, every ``safety_poll_s``: one read of all this process's entries,
        not one per slot (800 slots polling every 30 s were 27 reads a second). A waiting slot
        whose entry shows something for it that no event brought (work, a stop, another session,
        no entry) reads its entry; after a failed read, every waiting slot reads its own."""
        ids = [s.id for s in self.slots]
        while True:
            await asyncio.sleep(self.config.safety_poll_s)
            if not self._streaming():
                continue  # the slots poll by themselves
            try:
                entries = {d.get("_id"): d for d in await roster.read_slot_entries(self.c.roster, ids)}
            except StoreError as exc:
                log.warning("worker.safety_read_failed", error=first_line(exc))
                self.inboxes.swept(ids)
                continue
            self.inboxes.swept(s.id for s in self.slots if needs_read(entries.get(s.id), s))

    async def _supervise(self, slot_tasks: list[asyncio.Task[None]], side: list[asyncio.Task[None]]) -> None:
        """Until every slot has stopped: fail if a task fails or a side task ends, keep the
        heartbeat thread alive, and force the stop once the grace period is over."""
        check_s = min(0.25, self.config.heartbeat_interval_s)
        pending: set[asyncio.Task[None]] = {*slot_tasks, *side}
        while any(t in pending for t in slot_tasks):
            done, pending = await asyncio.wait(pending, timeout=check_s)
            for task in done:
                error = task.exception()
                if error is not None:
                    raise error
                if task in side:
                    raise RuntimeError(f"the {task.get_name()} task stopped")
            # The heartbeat thread is supervised: a new one replaces it if it died.
            self.heartbeats.ensure_alive()
            requested_at = self.shutdown.requested_at
            if (requested_at is not None and not self.forced
                    and asyncio.get_running_loop().time() >= requested_at + self.config.grace_period_s):
                log.warning("worker.grace_period_over", grace_period_s=self.config.grace_period_s)
                self.force()

    async def _burst(self) -> None:
        """``--burst``: stop gracefully once no slot runs a job and nothing is left for this worker
        (:func:`recruiter.store.scheduled.work_left_for`), looked at every ``poll_to_s``. A job
        assigned after the last look is still run: a stopping slot does what it was given."""
        groups = None if ANY_GROUP in self.config.groups else list(self.config.groups)
        ids = [s.id for s in self.slots]
        while not self.stopping.is_set():
            await asyncio.sleep(self.config.poll_to_s)
            if self.busy() or any(s.inbox.delivered is not None for s in self.slots):
                continue
            try:
                paused = read_switches(await metadata.read_switches(self.c.metadata), None, None)
                if await scheduled.work_left_for(self.c.scheduled, groups, ids, self.clock.now(),
                                                 paused.groups, paused.tenants):
                    continue
            except StoreError as exc:
                log.warning("worker.burst_check_failed", error=first_line(exc))
                continue
            log.info("worker.burst_done", workers=ids, detail="nothing left for this worker's groups; stopping")
            self.stop()

    def _streaming(self) -> bool:
        """Whether the process's poller or its open stream fills the inboxes (else each slot reads its own)."""
        return self.poller is not None or (self.watch is not None and self.watch.streaming.is_set())

    def busy(self) -> bool:
        """Whether a job is running here (a graceful stop waits for it)."""
        return any(s.running is not None for s in self.slots)

    def stop(self) -> None:
        """Graceful stop: take no new work, let running jobs finish, leave the roster."""
        if not self.stopping.is_set():
            log.info("worker.stopping", workers=[s.id for s in self.slots],
                     grace_period_s=self.config.grace_period_s)
            self.shutdown.requested_at = asyncio.get_running_loop().time()
        self.stopping.set()
        self.inboxes.wake_all()

    def force(self) -> None:
        """Forced stop: interrupt running jobs; each is given back without counting the attempt."""
        self.stop()
        if self.forced:
            return
        self.shutdown.forced = True
        self.job_stops.interrupt_all()

    def _check_memory(self, bound: FilteringBoundLogger) -> None:
        limit = self.config.memory_limit_bytes
        if limit is None or self.stopping.is_set():
            return
        rss = resident_bytes()
        if rss > limit:
            bound.warning("worker.memory_limit", rss_bytes=rss, limit_bytes=limit,
                          detail=f"stopping; exit status {EXIT_MEMORY} asks the supervisor for a fresh worker")
            self.exit_code = EXIT_MEMORY
            self.stop()

    async def heartbeat(self) -> None:
        """One heartbeat now, as the thread does it (for tests and tools)."""
        for view, reason in await asyncio.to_thread(beat, self.sync, self.clock, self.config.heartbeat_interval_s,
                                                    slot_views(self.slots), self.heartbeats.key):
            self.job_stops.on_lost(view, reason)

    # -- one slot's steps, as its loop takes them (for tests and tools) -----------------

    async def register(self, slot: Slot) -> None:
        await self.entries.register(slot)

    async def poll(self, slot: Slot) -> object:
        """Read the slot's roster entry; the id of the job assigned to it, if any."""
        return await self.slot_loop.poll(slot)

    async def work(self, slot: Slot, job_id: object, job: Raw | None = None) -> None:
        await self.slot_loop.work(slot, job_id, job)

    async def record(self, slot: Slot, outcome: Outcome, bound: FilteringBoundLogger) -> None:
        await self.slot_loop.record(slot, outcome, bound)
