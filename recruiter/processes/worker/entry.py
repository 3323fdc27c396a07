"""A slot's roster entry: register, record an outcome, make it available again, leave.

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
import os
from datetime import datetime, timedelta

import structlog
from structlog.typing import FilteringBoundLogger

from recruiter.domain import versions
from recruiter.domain.cancel import HALTING
from recruiter.domain.clock import Clock
from recruiter.domain.events import JobFinished, WorkerGone, WorkerRegistered
from recruiter.domain.lanes import needs_mark
from recruiter.domain.liveness import (
    date_or_none,
    heartbeat_document,
    process_document,
    rescue_update,
    slot_document,
)
from recruiter.domain.outcome import Outcome, jobs_referenced_by
from recruiter.domain.placement import worker_group
from recruiter.domain.records import Query, Raw
from recruiter.processes.events import Bus
from recruiter.processes.worker.config import MISSED_BEATS_FOR_RESTART, WorkerConfig
from recruiter.processes.worker.state import Shutdown, Slot, SlotPhase, Turn
from recruiter.store import archived, halting, heartbeats, roster, scheduled
from recruiter.store.connection import StoreError, first_line
from recruiter.store.layout import Collections, Document
from recruiter.store.roster import OutcomeRefused

log = structlog.get_logger("recruiter.worker")


class WorkerIdTaken(RuntimeError):
    def __init__(self, worker_id: str, entry: Raw, silent: timedelta) -> None:
        super().__init__(
            f"worker id {worker_id!r} is in use by pid {entry.get('pid')} on {entry.get('hostname')} "
            f"(last heartbeat {silent.total_seconds():.1f}s ago); stop it first "
            f"(recruiter workers stop {worker_id}) or choose another --id"
        )


def process_exists(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RosterEntries:
    """The roster entries of one process's slots (``pid`` on ``hostname``)."""

    def __init__(self, c: Collections, clock: Clock, config: WorkerConfig, shutdown: Shutdown, *,
                 pid: int, hostname: str, process: str = "", bus: Bus | None = None) -> None:
        """``shutdown`` is read at each write: an entry written while stopping is not available."""
        self.process = process
        self.c = c
        self.bus = bus or Bus.logging()
        self.shutdown = shutdown
        self.clock = clock
        self.config = config
        self.pid = pid
        self.hostname = hostname
        # The process's heartbeat document (recruiter.domain.liveness); None: one per entry.
        self.beat_key = heartbeats.process_key(process)

    def process_id(self, slot: Slot) -> str:
        """The id the process was started with (``--id``): its slots are ``ID`` or ``ID-0``, ``ID-1``...
        (and their look-ahead lanes ``ID~1``, ``ID-0~1``..., :mod:`recruiter.domain.lanes`)."""
        return slot.runner_id if self.config.concurrency == 1 else slot.runner_id.rsplit("-", 1)[0]

    def document(self, slot: Slot, now: datetime) -> Query:
        """A fresh entry for ``slot``, available from ``now``. It also takes the reserved group
        of the jobs aimed at its process (``@worker:ID``, :mod:`recruiter.domain.placement`)."""
        return {
            "_id": slot.id,
            "work_on": [*self.config.groups, worker_group(self.process_id(slot))],
            "available": True,
            "available_since": now,
            "created_at": now,
            "pid": self.pid,
            "hostname": self.hostname,
            "session": slot.session,
            "heartbeat_interval_s": self.config.heartbeat_interval_s,
            "runner": slot.runner_id,
            "lane": slot.lane,
            "lanes": slot.lanes,
            "process": self.process or slot.runner_id,
            versions.FIELD: versions.record(),  # read by status and by a leader of a later release
            roster.FREED: roster.freed_mark(),  # the leader reads it (recruiter.store.roster.FREED)
        }

    # -- register -------------------------------------------------------------------

    async def register(self, slot: Slot) -> None:
        """Enter the roster; if the id is still there from a dead process, recover it first."""
        slot.session = roster.new_session()
        while True:
            now = self.clock.now()
            if await roster.insert_entry(self.c.roster, self.document(slot, now)):
                break
            old = await roster.read_entry(self.c.roster, slot.id)
            if old is not None and await self.recover(slot, old, now):
                break
        # The entry is not given work until its process's heartbeat names it with its session
        # (recruiter.domain.liveness). The reserved group of the jobs aimed at this process:
        # the cleaner reads it if it removes the slot as dead.
        group = worker_group(self.process_id(slot))
        if self.beat_key is not None:
            process = process_document(self.process, self.clock.now(), self.config.heartbeat_interval_s,
                                       self.pid, self.hostname, group)
            await heartbeats.register_slot(self.c.heartbeats, self.beat_key, process,
                                           slot_document(slot.id, slot.session))
        else:
            beat = heartbeat_document(slot.id, slot.session, self.clock.now(), self.config.heartbeat_interval_s,
                                      self.pid, self.hostname)
            beat["worker_group"] = group
            await heartbeats.write_first_beat(self.c.heartbeats, beat)
        self.bus.emit(WorkerRegistered(slot.id, tuple(self.config.groups), self.pid))  # logs worker.registered

    async def recover(self, slot: Slot, old: Document, now: datetime) -> bool:
        """Take over the entry a previous process with our id left, and release its jobs.

        Refused (:class:`WorkerIdTaken`) while that process still heartbeats. Its
        unapplied outcome is kept for the recruiter; the jobs it was given or was
        running are returned or unlocked as crashed attempts, as its heartbeats
        tell (:func:`recruiter.domain.liveness.rescue_update`). The takeover changes
        ``session``, so if the old process was only paused, its writes are
        refused from now on. Returns False when the entry changed under us (read
        it again).
        """
        beat = await heartbeats.read_entry_beat(self.c.heartbeats, old)  # None: not that entry's
        seen = date_or_none((beat or old).get("last_seen_at"))
        self._refuse_if_alive(slot, old, beat, now - seen if seen is not None else None)
        entry = self.document(slot, now)
        entry.update(available=False, recovering=True)
        if old.get("outcome"):
            entry["outcome"] = old["outcome"]
        if not await roster.take_over_entry(self.c.roster, old, entry):
            return False
        held = jobs_referenced_by(old) - {(old.get("outcome") or {}).get("job")}
        jobs = await scheduled.read_held_jobs(self.c.scheduled, held, slot.id)
        reason = (f"worker {slot.id} (pid {old.get('pid')} on {old.get('hostname')}) was restarted; "
                  f"last seen {seen.isoformat() if seen else 'never'}")
        await scheduled.rescue_jobs(self.c.scheduled, [rescue_update(j, old, beat, now, reason)[1] for j in jobs])
        await roster.release_entry(self.c.roster, slot.id, slot.session, self.clock.now(), stopping=False,
                                   recovered=True)
        log.warning("worker.recovered", worker_id=slot.id, previous_pid=old.get("pid"),
                    previous_hostname=old.get("hostname"), released=[str(j["_id"]) for j in jobs],
                    kept_outcome=bool(old.get("outcome")))
        return True

    def _refuse_if_alive(self, slot: Slot, old: Document, beat: Document | None, silent: timedelta | None) -> None:
        """Raise :class:`WorkerIdTaken` if the process that left ``old`` may still live."""
        interval = float((beat or old).get("heartbeat_interval_s") or self.config.heartbeat_interval_s)
        # On this machine we can see whether its process is gone; elsewhere, its heartbeat tells.
        gone_here = old.get("hostname") == self.hostname and not process_exists(old.get("pid"))
        if not gone_here and silent is not None and silent < timedelta(seconds=MISSED_BEATS_FOR_RESTART * interval):
            raise WorkerIdTaken(slot.id, old, silent)

    # -- record an outcome ------------------------------------------------------------

    async def record(self, slot: Slot, outcome: Outcome, bound: FilteringBoundLogger,
                     mark: Turn | None = None, finished: JobFinished | None = None) -> bool:
        """Write the outcome into our roster entry and become available (unless stopping), in one write.

        With ``mark`` (the next job of this slot, handed out ahead), the same command
        writes that job's ``started`` mark; whether the mark is known to be written.
        ``finished`` (the attempt's event) is emitted once the outcome is known to be recorded.
        Fenced by our session and the assignment; retries on connection errors:
        a lost outcome would leave the job locked.
        """
        stopping = self.shutdown.stopping.is_set()
        backoff = self.config.poll_from_s
        stripped = False
        while True:
            try:
                written, marked = await self._write_outcome(slot, outcome, stopping, mark)
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
                             mark: Turn | None) -> tuple[bool, bool]:
        """One try of :meth:`record`'s write: (written, marked)."""
        if mark is None:
            written = await roster.record_outcome(self.c.roster, slot.id, slot.session, outcome.job_id,
                                                  outcome.to_document(), stopping=stopping, now=self.clock.now())
            return written, False
        return await roster.record_outcome_and_mark(
            self.c.roster, slot.id, slot.session, outcome.job_id, outcome.to_document(),
            stopping=stopping, now=self.clock.now(), mark=(mark.lane.id, mark.lane.session, mark.job_id, mark.token))

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
