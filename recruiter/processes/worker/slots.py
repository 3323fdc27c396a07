"""A slot's loop: wait for an assignment, run it, record its outcome, and leave at the end.

Each slot of a process runs :meth:`SlotLoop.run`: it empties its inbox (a job
copy the change stream delivered) or reads its own roster entry, hands the job to
the :class:`~recruiter.processes.worker.executor.Executor` and the outcome to its
:class:`~recruiter.processes.worker.entry.RosterEntries`, and waits again with a
backoff. When the process stops, the slot steps down, does a job assigned
meanwhile, and deletes its entry.

Invariant: a slot's assignment stays in its entry until its outcome is written,
so a slot that failed to reach the database finds it again at its next read;
and a job's outcome is recorded only by a move of its state to ``RECORDING``
(never for a halted job).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

import structlog
from structlog.typing import FilteringBoundLogger

from recruiter.domain.batching import quiet_outcome
from recruiter.domain.clock import Clock
from recruiter.domain.lanes import needs_mark
from recruiter.domain.outcome import Outcome
from recruiter.domain.pacing import START_AT
from recruiter.domain.records import Raw
from recruiter.domain.retry import RetryAt
from recruiter.domain.start_gate import GATE_FIELD
from recruiter.processes.events import Bus
from recruiter.processes.worker.config import WorkerConfig
from recruiter.processes.worker.entry import RosterEntries
from recruiter.processes.worker.executor import Executor, started_event
from recruiter.processes.worker.inbox import Inboxes
from recruiter.processes.worker.start_gate import NotStarted, StartGate
from recruiter.processes.worker.state import JobState, Runner, Running, Shutdown, Slot, SlotPhase, Turn
from recruiter.store import roster, scheduled, start_gates
from recruiter.store.connection import StoreError, first_line
from recruiter.store.dependencies import with_dependency_results
from recruiter.store.layout import Collections, Document
from recruiter.store.wakeup import is_copy

log = structlog.get_logger("recruiter.worker")


class SlotLoop:
    """The loop every slot of one process runs (the slot is an argument: the loop holds no slot's state)."""

    def __init__(self, c: Collections, clock: Clock, config: WorkerConfig, shutdown: Shutdown, *,
                 entries: RosterEntries, executor: Executor, inboxes: Inboxes, streaming: Callable[[], bool],
                 stop_process: Callable[[], None], started: Callable[[], None],
                 after_job: Callable[[FilteringBoundLogger], None], bus: Bus | None = None) -> None:
        """``streaming`` tells whether a change stream is open; ``stop_process`` is the graceful
        stop (a stop request read in the entry); ``started`` is told when a job starts (the
        heartbeat shows it soon); ``after_job`` runs before an outcome is written (memory check)."""
        self.c = c
        self.clock = clock
        self.config = config
        self.shutdown = shutdown
        self.entries = entries
        self.executor = executor
        self.inboxes = inboxes
        self.streaming = streaming
        self.stop_process = stop_process
        self.started = started
        self.after_job = after_job
        self.bus = bus or Bus.logging()
        self.gate = StartGate(start_gates.gates_of(c), clock, shutdown.stopping)

    def _ended(self, slot: Slot) -> bool:
        return self.shutdown.stopping.is_set() or slot.replaced

    async def run(self, slot: Slot) -> None:
        """Take work until the process stops (or the slot is replaced), then leave the roster."""
        backoff = self.config.poll_from_s
        while not self._ended(slot):
            streaming = self.streaming()
            try:
                job_id, job, ahead = await self._next(slot, streaming)
                if job_id is not None:
                    # Until the outcome is written the assignment stays in our entry,
                    # so after a database error the next poll finds it again.
                    await self.work(slot, job_id, job, ahead=ahead)
                    backoff = self.config.poll_from_s
                    continue
            except StoreError as exc:
                log.warning("poll.failed", worker_id=slot.id, error=first_line(exc))
                slot.inbox.must_poll = True
                backoff = self.config.poll_to_s
            else:
                if slot.inbox.pending(streaming):
                    continue
            slot.inbox.wake.clear()
            if self._ended(slot):
                continue  # stop() ran during this pass (e.g. from fetch): its wake-up was just cleared
            await self.inboxes.wait(slot.inbox, self.config.safety_poll_s if streaming else backoff)
            backoff = min(backoff * 2, self.config.poll_to_s)
        await self.deregister(slot)

    async def _next(self, slot: Slot, streaming: bool) -> tuple[object, Raw | None, bool]:
        """The job to run next (id, copy, handed out ahead): one an event delivered, or one our entry names."""
        if slot.inbox.delivered is not None:
            return slot.inbox.take()
        if slot.inbox.must_poll or not streaming:
            slot.inbox.must_poll = False
            return await self.fetch(slot)
        return None, None, False

    async def register(self, slot: Slot) -> None:
        await self.entries.register(slot)

    async def poll(self, slot: Slot) -> object:
        """Read our own roster entry; return the id of the job assigned to us, if any."""
        return (await self.fetch(slot))[0]

    async def fetch(self, slot: Slot) -> tuple[object, Raw | None, bool]:
        """Read our own roster entry; return the job assigned to us (id, copy, and whether it
        was handed out ahead and not marked started yet), if any."""
        doc = await roster.read_assignment(self.c.roster, slot.id)
        if doc is None:
            log.warning("worker.lost_registration", worker_id=slot.id,
                        detail="the cleaner removed this worker (missed heartbeats); registering again")
            await self.register(slot)
            return None, None, False
        if doc.get("session") != slot.session:
            log.error("worker.replaced", worker_id=slot.id,
                      detail="another process took over this worker id (this one was taken for dead); "
                             "this slot stops")
            slot.phase = SlotPhase.REPLACED
            return None, None, False
        if doc.get("stop_requested") and not self.shutdown.stopping.is_set():
            log.info("worker.stop_requested", worker_id=slot.id)
            self.stop_process()
        if doc.get("available"):
            return None, None, False
        assigned = doc.get("assigned_to")
        job_id = assigned.get(slot.id) if isinstance(assigned, dict) else None
        if job_id is None and not self.shutdown.stopping.is_set():
            # Not available and nothing assigned: the job was cancelled before this
            # slot started it (recruiter.cancel).
            await self.entries.release(slot)
        job = doc.get("job")
        return job_id, job, needs_mark(doc, job)

    async def work(self, slot: Slot, job_id: object, job: Raw | None = None, *, ahead: bool = False) -> None:
        """Run the job assigned to ``slot``: from the copy the assignment carried, or read
        by ``_id`` (no copy, or only a reference to a job too big to copy).

        The slot's lanes take turns (:class:`~recruiter.processes.worker.state.Runner`): the
        job waits for the one before it. A job handed out ``ahead`` starts only once its
        ``started`` mark is written (by the outcome write of the job before it, or now); a
        stop that comes first gives it back unstarted, its attempt not counted, as it does a job that
        waits behind another of its slot."""
        found: Document | None = job if isinstance(job, dict) and is_copy(job) and job.get("_id") == job_id else None
        if found is None:
            found = await scheduled.read_job(self.c.scheduled, job_id)
            if found and isinstance(job, dict):  # a reference carries the pacing of a job too big to copy
                found.update({k: job[k] for k in (START_AT, GATE_FIELD) if k in job})
        if not found or found.get("locked") is not True or found.get("locked_by") != slot.id:
            await self.entries.drop_stale(slot, job_id)
            return
        found = await with_dependency_results(self.c, found)  # what it waited for: ctx.dependency_results()
        runner = slot.runner or Runner(slot.id)
        turn = Turn(slot, job_id, found.get("lock_token"), ahead)
        runner.enter(turn)
        try:
            if not await self._await_turn(turn):
                await self.give_back(slot, found)
            elif not turn.ahead or turn.marked or await self._mark_alone(slot, turn):
                await self._run(slot, runner, turn, found)
            else:
                log.info("job.not_started", worker_id=slot.id, job_id=str(job_id),
                         detail="handed out ahead, and taken away before it started")
                await self.entries.release(slot)
        finally:
            runner.leave(turn)

    async def _mark_alone(self, slot: Slot, turn: Turn) -> bool:
        """Write the ``started`` mark of a job held ahead in a command of its own: the job reached
        the slot after the outcome of the one before it was written (or that write's mark is not
        known to have landed)."""
        log.debug("job.mark_alone", worker_id=slot.id, job_id=str(turn.job_id))
        return await self.entries.mark_started(slot, turn.job_id, turn.token)

    async def _await_turn(self, turn: Turn) -> bool:
        """Wait for the runner; False when a stop came first for a job not marked started that
        the slot would not start at once: one held ahead, or one that had to wait behind
        another job of its slot (handed out as the slot looked idle, it reached the slot after
        a job held ahead had started). It is then given back rather than run: a stopping worker
        starts nothing it was not about to start (a process over its memory limit runs no
        further job)."""
        stopping = self.shutdown.stopping
        waited = False
        while not turn.go.is_set():
            if stopping.is_set() and not turn.marked:
                return False
            waited = True
            waits = [asyncio.ensure_future(turn.go.wait()), asyncio.ensure_future(stopping.wait())]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
        return not (stopping.is_set() and not turn.marked and (turn.ahead or waited))

    async def give_back(self, slot: Slot, job: Document, why: str = "the worker is stopping") -> None:
        """Give back a job this slot never started (the worker stops; :meth:`_await_turn`; its start
        gate said no): back in the queue at once, its attempt not counted, no execution recorded."""
        bound = log.bind(worker_id=slot.id, job_id=str(job["_id"]), group=str(job.get("group"))[:100])
        bound.info("job.given_back", detail=f"not started; {why}")
        attempt = job.get("attempts")
        outcome = Outcome(job["_id"], job["lock_token"], attempt if isinstance(attempt, int) else 0,
                          executed=False, decision=RetryAt(self.clock.now()))
        await self.entries.record(slot, outcome, bound)

    async def _run(self, slot: Slot, runner: Runner, turn: Turn, found: Document) -> None:
        """Run the job of ``turn`` (the runner is its), and record its outcome."""
        job_id = turn.job_id
        bound = log.bind(worker_id=slot.id, job_id=str(job_id), group=str(found.get("group"))[:100],
                         attempt=found.get("attempts"))
        # A paced job starts at its start time, with a start token when its copy names gates.
        started = await self.gate.start(found)
        if isinstance(started, NotStarted):
            await self.give_back(slot, found, started.reason)
            return
        slot.running = Running(job_id, started, token=found.get("lock_token"))
        slot.inbox.last_token = found.get("lock_token")
        self.started()
        self.bus.emit(started_event(found, slot.id, slot.running.started_at))
        try:
            # The job sees its slot's id (a look-ahead lane is not a worker of its own).
            outcome = await self.executor.outcome(slot.runner_id, slot.running, found, bound,
                                                  forced=self.shutdown.forced)
            # Checked before the outcome is written, so that write already says "stopping"
            # and the recruiter hands this worker nothing more.
            self.after_job(bound)
            if outcome is not None:
                await self.record(slot, outcome, bound, then=runner.after(turn))
            else:
                await self.entries.release(slot)
        finally:
            slot.running = None

    async def record(self, slot: Slot, outcome: Outcome, bound: FilteringBoundLogger,
                     then: Turn | None = None) -> None:
        """Record the outcome of the slot's job, unless the job was halted (then only be available again).

        ``then`` is the turn that runs next on this slot: if it was handed out ahead, its
        ``started`` mark rides in the same command."""
        if slot.running is not None and not slot.running.move(JobState.RECORDING):
            bound.warning("job.outcome_discarded", reason="halted")
            await self.entries.release(slot)
            return
        mark = then if then is not None and then.ahead and not then.marked and not self.shutdown.stopping.is_set() \
            else None
        finished = slot.running.finished if slot.running is not None else None
        ran_s = (self.clock.now() - slot.running.started_at).total_seconds() if slot.running is not None else None
        quiet = quiet_outcome(self.config.batch > 0, then is not None, ran_s)
        marked = await self.entries.record(slot, outcome, bound, mark=mark,
                                           finished=replace(finished, worker_id=slot.id) if finished else None,
                                           quiet=quiet)
        if not quiet:
            # A quiet outcome's slot goes on with a job it holds and rings no round: nothing is
            # handed out before the batch's last outcome, so reading fast now would find nothing.
            self.inboxes.expect()
        if mark is not None:
            mark.marked = marked

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
        try:
            held = await self.entries.step_down(slot)
            if held is not None:
                # Assigned while we were deciding to stop: do it (or, forced or held ahead,
                # give it back), then leave.
                await self.work(slot, held[0], held[1], ahead=held[2])
                deadline = loop.time() + self.config.deregister_wait_s
            await self.entries.leave(slot, deadline)
        except StoreError as exc:
            log.warning("worker.deregister_failed", worker_id=slot.id, error=first_line(exc),
                        detail="the cleaner removes this entry once it stops heartbeating")


def needs_read(entry: Raw | None, slot: Slot) -> bool:
    """Whether a waiting slot must read its entry (:meth:`SlotLoop.fetch`), as the process's safety
    read saw it: gone, of another session, asked to stop, or not available (it holds work, or a
    cancelled assignment). Each is a case ``fetch`` acts on; a free entry of ours needs nothing."""
    return (entry is None or entry.get("session") != slot.session or bool(entry.get("stop_requested"))
            or entry.get("available") is not True)
