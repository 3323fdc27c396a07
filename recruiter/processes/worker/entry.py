"""A slot's roster entry: register, record an outcome, make it available again, leave.

Registering (entering the roster, or taking over the entry a dead process left) is
:mod:`recruiter.processes.worker.registration`; :class:`RosterEntries` hands it on.

Fencing: each registration gets a fresh ``session`` id, stored in the entry.
Every write the slot makes to it is conditional on that session, and those
about a job also on ``assigned_to.<id>`` naming that job (the filters live in
:mod:`recruiter.store.roster`). A worker declared dead, replaced by a restart
with the same ``--id``, or whose job was taken away learns it when such a
write matches nothing, and its outcome is discarded.

Invariant: the slot writes only its own entry (fenced by its session) and its
own part of its process's heartbeat document (named with its session); an outcome is written once
(retried on connection errors, since a lost outcome would leave its job
locked), in the same write that makes the entry available again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime

import structlog
from structlog.typing import FilteringBoundLogger

from recruiter.domain.cancel import HALTING
from recruiter.domain.clock import Clock
from recruiter.domain.events import JobFinished, WorkerGone
from recruiter.domain.lanes import needs_mark
from recruiter.domain.outcome import Outcome
from recruiter.domain.records import Raw
from recruiter.processes.events import Bus
from recruiter.processes.worker.completer import Completer
from recruiter.processes.worker.config import WorkerConfig
from recruiter.processes.worker.registration import Registration
from recruiter.processes.worker.registration import WorkerIdTaken as WorkerIdTaken  # moved; importable from here
from recruiter.processes.worker.registration import process_exists as process_exists
from recruiter.processes.worker.state import Shutdown, Slot, SlotPhase, Turn
from recruiter.store import archived, halting, heartbeats, outcome_batches, roster, scheduled
from recruiter.store.connection import StoreError, first_line
from recruiter.store.layout import Collections, Document
from recruiter.store.roster import OutcomeRefused, Session

log = structlog.get_logger("recruiter.worker")


class RosterEntries:
    """The roster entries of one process's slots (``pid`` on ``hostname``)."""

    def __init__(self, c: Collections, clock: Clock, config: WorkerConfig, shutdown: Shutdown, *,
                 pid: int, hostname: str, process: str = "", bus: Bus | None = None) -> None:
        """``shutdown`` is read at each write: an entry written while stopping is not available."""
        self.c = c
        self.bus = bus or Bus.logging()
        self.shutdown = shutdown
        self.clock = clock
        self.config = config
        # Entering the roster, or taking over the entry a dead process left.
        self.registration = Registration(c, clock, config, pid=pid, hostname=hostname, process=process, bus=self.bus)
        # The process's heartbeat document (recruiter.domain.liveness); None: one per entry.
        self.beat_key = self.registration.beat_key
        # Sends the outcomes the slots finish together in one command (None: each alone).
        self.completer: Completer | None = None

    async def register(self, slot: Slot) -> None:
        """Enter the roster (:meth:`recruiter.processes.worker.registration.Registration.register`)."""
        await self.registration.register(slot)

    async def register_all(self, slots: Sequence[Slot]) -> None:
        """Enter the roster with every slot of the process, named together in its heartbeat
        (:meth:`recruiter.processes.worker.registration.Registration.register_all`)."""
        await self.registration.register_all(slots)

    async def recover(self, slot: Slot, old: Document, now: datetime) -> bool:
        """Take over the entry a previous process with our id left
        (:meth:`recruiter.processes.worker.registration.Registration.recover`)."""
        return await self.registration.recover(slot, old, now)

    # -- record an outcome ------------------------------------------------------------

    async def record(self, slot: Slot, outcome: Outcome, bound: FilteringBoundLogger,
                     mark: Turn | None = None, finished: JobFinished | None = None, quiet: bool = False) -> bool:
        """Write the outcome into our roster entry and become available (unless stopping), in one write.

        With ``mark`` (the next job of this slot, handed out ahead), the same command
        writes that job's ``started`` mark; whether the mark is known to be written.
        ``finished`` (the attempt's event) is emitted once the outcome is known to be recorded.
        Fenced by our session and the assignment; retries on connection errors:
        a lost outcome would leave the job locked. ``quiet``: written so as to wake no leader
        (:func:`recruiter.domain.batching.quiet_outcome`).
        """
        stopping = self.shutdown.stopping.is_set()
        backoff = self.config.poll_from_s
        stripped = False
        while True:
            try:
                written, marked = await self._write_outcome(slot, outcome, stopping, mark, quiet)
                break
            except OutcomeRefused as exc:
                if stripped:
                    bound.error("job.outcome_unwritable", error=str(exc),
                                detail="the job stays locked until the cleaner rescues it")
                    await self.release(slot)
                    return False
                bound.warning("job.outcome_refused", error=str(exc), detail="written again without its details")
                outcome, stripped = outcome.stripped(str(exc)), True
            except StoreError as exc:
                bound.warning("outcome.write_failed", error=first_line(exc))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.config.poll_to_s)
        if written:
            self._emit(finished)
        else:
            try:
                if await self._write_refused(slot, outcome, bound):
                    self._emit(finished)
            except StoreError as exc:
                bound.warning("job.outcome_refused", error=first_line(exc),
                              detail="the outcome write matched nothing, and why could not be read")
                await self.release(slot)
        return marked

    async def _write_outcome(self, slot: Slot, outcome: Outcome, stopping: bool,
                             mark: Turn | None, quiet: bool = False) -> tuple[bool, bool]:
        """One try of :meth:`record`'s write: (written, marked). With a completer, first in one
        command with other slots' outcomes; written again alone when that is not known to have landed."""
        if self.completer is not None and await self.completer.write(outcome_batches.outcome_ops(
                slot.id, slot.session, outcome.job_id, outcome.to_document(), stopping=stopping,
                now=self.clock.now(), mark=None if mark is None else mark_of(mark),
                quiet=outcome.token if quiet and not stopping else None)):
            return True, mark is not None
        if mark is None:
            written = await roster.record_outcome(self.c.roster, slot.id, slot.session, outcome.job_id,
                                                  outcome.to_document(), stopping=stopping, now=self.clock.now())
            return written, False
        return await roster.record_outcome_and_mark(
            self.c.roster, slot.id, slot.session, outcome.job_id, outcome.to_document(),
            stopping=stopping, now=self.clock.now(), mark=mark_of(mark))

    async def mark_started(self, slot: Slot, job_id: object, token: object) -> bool:
        """Write the ``started`` mark of a job handed out ahead, before starting it; False if the
        job was taken away (or this worker declared dead or replaced): it must not start."""
        try:
            return await roster.mark_started(self.c.roster, slot.id, slot.session, job_id, token)
        except StoreError as exc:
            log.warning("job.mark_failed", worker_id=slot.id, job_id=str(job_id), error=first_line(exc),
                        detail="not started; the slot reads its entry again")
            slot.inbox.must_poll = True
            return False

    def _emit(self, event: JobFinished | None) -> None:
        if event is not None:
            self.bus.emit(event)  # logs job.done or job.failed

    async def _write_refused(self, slot: Slot, outcome: Outcome, bound: FilteringBoundLogger) -> bool:
        """The outcome write matched nothing: find out why, and log what truly happened; whether
        it was recorded after all (an earlier try landed).

        An earlier try of the same write may have landed with its reply lost (a
        write-concern or network error, then :meth:`record` tried again), and the
        recruiter may have applied the outcome since: then nothing was discarded.
        Otherwise the job was taken away, or this worker declared dead or replaced.
        """
        entry = await roster.read_recorded_token(self.c.roster, slot.id)
        ours = entry is not None and entry.get("session") == slot.session
        if ours and ((entry or {}).get("outcome") or {}).get("token") == outcome.token:
            bound.info("outcome.recorded", detail="an earlier try of this write had landed")
            return True
        job = (await scheduled.read_lock_and_last_execution(self.c.scheduled, outcome.job_id)
               or await archived.read_last_execution(self.c.archived, outcome.job_id))
        applied, reason = outcome_applied(outcome, job)
        if applied:
            bound.info("outcome.recorded", detail="an earlier try of this write had landed; it is applied already")
            return True
        bound.warning("job.outcome_discarded", reason=reason if ours else "this worker was declared dead or replaced")
        await self.release(slot)
        return False

    # -- available again, and leaving -------------------------------------------------

    async def release(self, slot: Slot) -> None:
        """After a job was taken away from this slot (cancelled), make the entry available again.

        Fenced by our session and by the entry holding no assignment: when the
        whole worker was declared dead or replaced this matches nothing, and
        nothing is written. Called once the slot's job has stopped (a thread
        returned), so it ends the entry's ``halting`` and records that end in the
        archived job (:mod:`recruiter.store.halting`).
        """
        try:
            released = await roster.release_entry(self.c.roster, slot.id, slot.session, self.clock.now(),
                                                  stopping=self.shutdown.stopping.is_set())
            await self._halt_ended(slot, released)
        except StoreError as exc:
            log.warning("worker.release_failed", worker_id=slot.id, error=first_line(exc),
                        detail="the cleaner removes this entry once it stops heartbeating")
            return
        if released is not None:
            log.info("worker.available_again", worker_id=slot.id, detail="its job was taken away")

    async def _halt_ended(self, slot: Slot, released: Document | None) -> None:
        """The entry was halting a cancelled job: record in the archived job when it stopped."""
        held = (released or {}).get(HALTING)
        job_id = held.get("job") if isinstance(held, dict) else None
        if job_id is not None and await halting.halt_ended(self.c.archived, job_id, slot.id, slot.session,
                                                           self.clock.now()):
            log.info("job.halt_ended", worker_id=slot.id, job_id=str(job_id),
                     detail="the cancelled job has stopped; its slot is free")

    async def drop_stale(self, slot: Slot, job_id: object) -> None:
        """Drop an assignment whose job is no longer locked for this slot, and be available again."""
        log.warning("assignment.stale", worker_id=slot.id, job_id=str(job_id))
        if await roster.release_entry(self.c.roster, slot.id, slot.session, self.clock.now(),
                                      stopping=self.shutdown.stopping.is_set(), assignment=job_id) is None:
            await self.release(slot)  # the assignment itself is gone (cancelled)

    async def step_down(self, slot: Slot) -> tuple[object, Raw | None, bool] | None:
        """Take no more work; the job assigned meanwhile, if any, to do (or give back) before
        leaving: its id, its copy, and whether it was handed out ahead and not marked started."""
        held = await roster.step_down(self.c.roster, slot.id, slot.session, self.config.deregister_wait_s)
        assigned = (held or {}).get("assigned_to")
        job_id = assigned.get(slot.id) if isinstance(assigned, dict) else None
        if held is None or job_id is None:
            return None
        job = held.get("job")
        job = job if isinstance(job, dict) else None
        return job_id, job, needs_mark(held, job)

    async def leave(self, slot: Slot, deadline: float) -> None:
        """Delete our entry (and heartbeat) once it holds no outcome the recruiter has yet to apply.

        Waits until ``deadline`` (event loop time) at most; after a forced stop it
        does not wait: an outcome left in the entry is applied all the same, and
        the cleaner removes the entry.
        """
        loop = asyncio.get_running_loop()
        slot.phase = SlotPhase.LEAVING
        while True:
            if await roster.delete_own_entry(self.c.roster, slot.id, slot.session, max(0.1, deadline - loop.time())):
                if self.beat_key is None:  # else the next beat no longer names it (the process's goes at its end)
                    await heartbeats.delete_own_beat(self.c.heartbeats, slot.id, slot.session)
                slot.phase = SlotPhase.LEFT
                self.bus.emit(WorkerGone(slot.id, "deregistered"))  # logs worker.deregistered
                return
            if self.shutdown.forced or loop.time() >= deadline:
                log.warning("worker.left_outcome", worker_id=slot.id,
                            detail="the recruiter has not applied the last outcome yet; the cleaner removes "
                                   "this entry once it has")
                return
            await asyncio.sleep(0.1)


def mark_of(turn: Turn) -> tuple[str, Session, object, object]:
    """The ``started`` mark of ``turn``'s job, as the store writes it: its lane, session, job id, lock token."""
    return turn.lane.id, turn.lane.session, turn.job_id, turn.token


def outcome_applied(outcome: Outcome, job: Raw | None) -> tuple[bool, str]:
    """Whether the job's last execution is the one ``outcome`` reports (the recruiter
    applied it); if not, why the assignment went, as far as the job tells (pure)."""
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
