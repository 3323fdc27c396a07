"""Stopping a worker process's running jobs that must not run on: halted, interrupted, abandoned.

Three things stop a running job from outside its slot's loop: the heartbeat thread finds that
the slot lost its entry or its job (:meth:`JobStops.lost_from_thread`, then :meth:`JobStops.on_lost`
on the event loop: the job is halted), a forced stop interrupts every running job
(:meth:`JobStops.interrupt_all`), and a job interrupted while it runs in a thread, which cannot be
stopped there, is abandoned (:meth:`JobStops.abandon_thread`).

Invariant: a running job's state changes here only through
:meth:`~recruiter.processes.worker.state.Running.move`; and a job that may still run in a thread
after it was given back or taken from a lost worker ends the process (``exit_now``: at once for a
lost worker, at the end of :meth:`~recruiter.processes.worker.runtime.WorkerProcess.run` for an
abandoned thread, :meth:`JobStops.exit_if_abandoned`), so it never runs beside its rerun.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from recruiter.processes.worker.config import EXIT_FENCED
from recruiter.processes.worker.heartbeat import JOB_TAKEN_AWAY, SlotView
from recruiter.processes.worker.state import JobState, Running, Slot, SlotPhase

log = structlog.get_logger("recruiter.worker")


class JobStops:
    """Halts, interrupts and abandons the running jobs of ``slots``; ``exit_now`` ends the process."""

    def __init__(self, slots: list[Slot], exit_now: Callable[[int], None]) -> None:
        self.slots = slots
        self.exit_now = exit_now
        self.abandoned_threads = 0
        self.loop: asyncio.AbstractEventLoop | None = None  # the process's, once it runs

    def abandon_thread(self) -> None:
        self.abandoned_threads += 1

    def exit_if_abandoned(self, exit_code: int) -> None:
        """End the process now if an interrupted job was left running in its thread."""
        if self.abandoned_threads:
            # A synchronous job cannot be stopped inside its thread, and it was given
            # back to the queue: end the process now so it cannot run on beside its rerun.
            log.warning("worker.exit_now", reason="interrupted jobs were running in threads",
                        threads=self.abandoned_threads)
            self.exit_now(exit_code)

    def interrupt_all(self) -> None:
        """A forced stop: interrupt every running job; each is given back without counting the attempt."""
        log.warning("worker.forced_stop", running=[str(s.running.job_id) for s in self.slots if s.running])
        for s in self.slots:
            r = s.running
            if r is None:
                continue
            if r.move(JobState.INTERRUPTED):
                r.interrupt()
            elif r.state is JobState.HALTED and r.in_thread and r.task is not None:
                # A cancelled job still running in its thread: stop waiting for it, and
                # end the process (run() does, seeing an abandoned thread).
                self.abandon_thread()
                r.task.cancel()

    # -- heartbeats: a slot that lost its entry or its job halts the job ----------------

    def lost_from_thread(self, view: SlotView, reason: str) -> None:
        if self.loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed: the process is ending
                self.loop.call_soon_threadsafe(self.on_lost, view, reason)

    def on_lost(self, view: SlotView, reason: str) -> None:
        slot = next((s for s in self.slots if s.id == view.id), None)
        if slot is None or (slot.phase in (SlotPhase.LEAVING, SlotPhase.LEFT) and slot.running is None):
            return  # a slot deleting its own entry finds it gone: that is no fence
        r = slot.running
        if r is not None and r.job_id == view.job_id and r.move(JobState.HALTED):
            self.halted(slot, r, reason, worker_lost=reason != JOB_TAKEN_AWAY)
        elif view.halting and r is not None and r.state is JobState.HALTED and r.in_thread:
            # A cancelled job runs on in its thread, and the entry that kept it counted (its
            # max_running slot) is gone or another process's: it must not run on uncounted.
            log.error("worker.exit_now", worker_id=slot.id, exit_status=EXIT_FENCED, reason=reason,
                      detail="a cancelled job still runs in a thread, and this worker lost its entry")
            self.exit_now(EXIT_FENCED)
        elif view.job_id is None:
            log.warning("heartbeat.fenced", worker_id=slot.id, reason=reason)

    def halted(self, slot: Slot, running: Running, reason: str, *, worker_lost: bool) -> None:
        """Stop a job that was just halted (taken away); its outcome will be discarded.

        An ``async`` job is cancelled and a child process killed. A thread cannot
        be stopped: when the whole worker was declared dead or replaced (its job
        may already run elsewhere), the process ends at once so that it does not
        run beside its rerun; when only the job was taken away, the thread runs
        to its end and its outcome is discarded.
        """
        log.warning("job.halted", worker_id=slot.id, job_id=str(running.job_id), reason=reason)
        if not running.in_thread:
            running.interrupt()
        elif worker_lost:
            log.error("worker.exit_now", worker_id=slot.id, exit_status=EXIT_FENCED,
                      reason="a job that may now run elsewhere cannot be stopped inside its thread")
            self.exit_now(EXIT_FENCED)
