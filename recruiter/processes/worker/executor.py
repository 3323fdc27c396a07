"""The executor: one assigned job in, its :class:`~recruiter.domain.outcome.Outcome` out.

It rebuilds the workable from the job document, runs the attempt (on the event
loop, in a thread, or in a child process when the job has a timeout: see
:mod:`recruiter.processes.worker.child`), and judges the result by the job's
retry policy. Jobs it must not run get their outcome without running: a
malformed document, a class outside the allowed modules (refused), a crash the
poison limit judges, or a forced stop (given back).

What the job logs during the attempt is captured in ``running.logs``
(:mod:`recruiter.processes.worker.capture`) and stored with its execution; what
it says of its progress is kept in ``running.progress`` for the heartbeat.

Invariant: the executor writes nothing. It returns the outcome as a value (or
``None`` when the job was halted while it ran: nothing may be recorded), and
the slot's roster entry (:mod:`recruiter.processes.worker.entry`) writes it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

from structlog.typing import FilteringBoundLogger

from recruiter import tracing
from recruiter.domain.attempt import (
    RemoteFailure,
    describe_exception,
    failure_of,
    judge,
    judge_crash,
    storable_result,
)
from recruiter.domain.clock import Clock
from recruiter.domain.dependencies import waited_for
from recruiter.domain.dependency_results import KEY as DEPENDENCY_RESULTS
from recruiter.domain.documents import job_problem
from recruiter.domain.events import JobFinished, JobStarted
from recruiter.domain.handback import DEFAULT_MAX_RESULT_BYTES, CheckedResult, Dropped
from recruiter.domain.job import result_room_bytes
from recruiter.domain.naming import AllowedModules
from recruiter.domain.outcome import DONE, INTERRUPTED, Execution, Kind, Outcome, describe_decision
from recruiter.domain.placement import declared_group
from recruiter.domain.quarantine import malformed_outcome
from recruiter.domain.refusals import DEFAULT_GIVE_BACK_FOR, decide_refusal, refusal_document
from recruiter.domain.retry import Archive, Decision, RetryAt
from recruiter.domain.workable import JobContext, ProgressSink, accepts_context, workable_from_document
from recruiter.processes.worker.adding import steps_for, with_steps
from recruiter.processes.worker.capture import LogBuffer, capturing, ensure_installed
from recruiter.processes.worker.child import ChildAttempt, JobTimedOut
from recruiter.processes.worker.config import THREAD_EXIT_MARGIN_S
from recruiter.processes.worker.output import watch
from recruiter.processes.worker.refusing import cannot_run
from recruiter.processes.worker.snoozing import snooze_of
from recruiter.processes.worker.state import JobState, Running, Said
from recruiter.store.layout import Document

INTERRUPTED_REASON = "interrupted by a forced stop of the worker"
AT_MOST_ONCE_INTERRUPTED = "an at_most_once job interrupted by a forced stop of its worker is not run again"


@dataclass(frozen=True)
class Ran:
    """What running the attempt gave: a value, or the error that ended it (and its kind)."""

    value: object
    error: BaseException | None
    kind: Kind
    started_at: datetime
    ended_at: datetime


class Executor:
    """Turns jobs into outcomes for the slots of one process (``pid`` on ``hostname``)."""

    def __init__(self, clock: Clock, *, max_crashes: int, allowed: AllowedModules | None, pid: int,
                 hostname: str, abandon_thread: Callable[[], None], process: str = "",
                 give_back_for_s: float = DEFAULT_GIVE_BACK_FOR.total_seconds(), isolation: str = "thread",
                 max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES) -> None:
        """``abandon_thread`` is called for an interrupted job left running in its thread;
        ``process`` is this process's registration token (recruiter.domain.refusals);
        ``max_result_bytes`` the largest result kept (recruiter.domain.handback)."""
        self.process = process
        self.max_result_bytes = max_result_bytes
        self.give_back_for = timedelta(seconds=give_back_for_s)
        self.isolated = isolation == "process"  # every job in a child process (worker --isolation)
        self.clock = clock
        self.max_crashes = max_crashes
        self.allowed = allowed
        self.pid = pid
        self.hostname = hostname
        self.abandon_thread = abandon_thread

    async def outcome(self, slot_id: str, running: Running, job: Document, bound: FilteringBoundLogger, *,
                      forced: bool) -> Outcome | None:
        """The outcome of the job ``running`` stands for: malformed, given back (``forced``), or attempted."""
        problem = job_problem(job)
        if problem is not None:
            bound.warning("job.malformed", reason=problem, detail="not run; the recruiter archives it as malformed")
            return malformed_outcome(job, problem)
        if forced:
            return self.given_back(job, running, "the worker was stopping (forced)")
        return await self.attempt(slot_id, running, job, bound)

    def given_back(self, job: Document, running: Running, reason: str) -> Outcome:
        """The outcome of an attempt cut short by a forced stop: back in the queue, attempt not counted.

        Due at once, except when the attempt still runs in a thread: then only after
        ``THREAD_EXIT_MARGIN_S``, by when this process (which ends itself to stop
        that thread) is gone, so the rerun cannot overlap it.
        """
        now = self.clock.now()
        due = now + timedelta(seconds=THREAD_EXIT_MARGIN_S) if running.in_thread else now
        execution = self._execution(job, "interrupted", running.started_at, now, message=reason, logs=running.logs)
        return Outcome(job["_id"], job["lock_token"], execution.attempt, executed=False, decision=RetryAt(due),
                       execution=execution)

    def interrupted(self, job: Document, running: Running) -> Outcome:
        """The outcome of an attempt a forced stop cut short while it ran: given back
        (:meth:`given_back`), except an ``at_most_once`` job, which had started and so
        is archived ``interrupted`` rather than run a second time (its attempt counts)."""
        if not job.get("at_most_once"):
            return self.given_back(job, running, INTERRUPTED_REASON)
        now = self.clock.now()
        execution = self._execution(job, "interrupted", running.started_at, now, message=INTERRUPTED_REASON,
                                    logs=running.logs)
        return Outcome(job["_id"], job["lock_token"], execution.attempt, executed=True,
                       decision=Archive(INTERRUPTED, AT_MOST_ONCE_INTERRUPTED), execution=execution)

    async def attempt(self, slot_id: str, running: Running, job: Document,
                      bound: FilteringBoundLogger) -> Outcome | None:
        """Run (or, after a crash, judge) one attempt and return its outcome.

        ``None`` when the attempt was halted: the assignment was taken away while
        it ran, so there is nothing this worker may record.
        """
        now = self.clock.now()
        settled = self._cannot_run(slot_id, job, now, bound) or self._crash_judged(job, now, bound)
        if settled is not None:
            return settled
        try:
            # Recorded from the slot's start time: a paced job's is its start token's (recruiter.domain.start_gate).
            ran = await self._run(slot_id, running, job, running.started_at)
        except asyncio.CancelledError:
            if running.state is JobState.HALTED:
                bound.warning("job.outcome_discarded", reason="halted while running")
                return None
            if running.state is JobState.INTERRUPTED:
                if running.in_thread:
                    self.abandon_thread()
                bound.warning("job.interrupted", detail="given back to the queue; the attempt does not count"
                              if not job.get("at_most_once") else "archived: an at_most_once job never runs twice")
                return self.interrupted(job, running)
            raise
        if running.state is JobState.HALTED:
            bound.warning("job.outcome_discarded", reason="halted while running")
            return None
        if running.state is JobState.INTERRUPTED:
            return self.interrupted(job, running)
        ran, snoozed = snooze_of(job, ran, running, bound, self._execution)  # no attempt: recruiter.domain.snooze
        return snoozed or with_steps(self._judged(job, ran, running, bound), ran.value, running)

    async def _run(self, slot_id: str, running: Running, job: Document, started_at: datetime) -> Ran:
        """Run the job's method (:meth:`_ran`) inside its spans, when the process traces (:mod:`recruiter.tracing`)."""
        with tracing.attempt_spans(job, slot_id, _waited_s(job, started_at)) as span:
            try:
                ran = await self._ran(slot_id, running, job, started_at)
            except asyncio.CancelledError:
                span.ended(running.state.value, None)  # halted or interrupted while it ran
                raise
            # A job running in a thread is not stopped by a halt: it ends, and its outcome is discarded.
            span.ended(ran.kind if running.state is JobState.RUNNING else running.state.value, ran.error)
        return ran

    async def _ran(self, slot_id: str, running: Running, job: Document, started_at: datetime) -> Ran:
        """Run the job's method; a failure of the job's own code is a result, not an exception:
        any ``BaseException`` it raises (``SystemExit``, ``KeyboardInterrupt``, even a
        ``CancelledError`` when nothing cancelled the attempt) ends the attempt, never the worker."""
        error: BaseException | None = None
        value: object = None
        kind: Kind = "done"
        try:
            value = await self._execute(slot_id, running, job)
        except JobTimedOut as exc:
            error, kind = exc, "timed-out"
        except asyncio.CancelledError as exc:
            if _cancelled_by_us(running):
                raise
            error, kind = RemoteFailure.of(exc), "failed"
        except Exception as exc:  # noqa: BLE001 - any failure of user code is an attempt outcome
            error, kind = exc, "failed"
        except BaseException as exc:  # noqa: BLE001 - a SystemExit or KeyboardInterrupt of the job's
            error, kind = RemoteFailure.of(exc), "failed"
        return Ran(value, error, kind, started_at, self.clock.now())

    def _judged(self, job: Document, ran: Ran, running: Running, bound: FilteringBoundLogger) -> Outcome:
        """The outcome of an attempt that ran: done, or what the retry policy says of its failure.

        The :class:`~recruiter.domain.events.JobFinished` it makes is kept in ``running``: it is
        emitted (and logged, ``job.done`` or ``job.failed``) once the outcome is recorded."""
        decision: Decision
        attempt = int(job.get("attempts", 1))
        logs = running.logs
        dropped: Dropped | None = None
        if ran.error is None:
            result, dropped = self._stored_result(job, ran.value)
            if dropped:
                bound.warning("job.result_dropped", reason=dropped.reason, size_bytes=dropped.size_bytes,
                              detail="archived done with result_dropped; wait() raises ResultDropped")
            decision = Archive(DONE)
            execution = self._execution(job, ran.kind, ran.started_at, ran.ended_at, logs=logs)
            running.finished = finished_event(job, ran, decision)
        else:
            result = None
            cls, message, trace = describe_exception(ran.error)
            decision = judge(job, failure_of(job, ran.error, ran.ended_at), ran.ended_at)
            execution = self._execution(job, ran.kind, ran.started_at, ran.ended_at, cls, message, trace, logs)
            running.finished = finished_event(job, ran, decision, cls, message, trace)
        return Outcome(job["_id"], job["lock_token"], attempt, executed=True, decision=decision,
                       execution=execution, result=result, result_dropped=dropped)

    def result_limit(self, job: Document) -> int:
        """The largest result this job may keep: the worker's limit, or less when the job's own
        document leaves less room under the server's document limit (only a limit above the
        default can meet that: the enqueue check keeps the default's room in every job)."""
        if self.max_result_bytes <= DEFAULT_MAX_RESULT_BYTES:
            return self.max_result_bytes
        return max(DEFAULT_MAX_RESULT_BYTES, min(self.max_result_bytes, result_room_bytes(job)))

    def _stored_result(self, job: Document, value: object) -> tuple[object, Dropped | None]:
        if isinstance(value, CheckedResult):  # checked in the child process that ran the attempt
            return value.value, value.dropped
        return storable_result(value, self.result_limit(job))

    def _crash_judged(self, job: Document, now: datetime, bound: FilteringBoundLogger) -> Outcome | None:
        """After a crash, the outcome the poison limit (or at_most_once) gives without running; None: run it."""
        if not job.get("crash_pending"):
            return None
        verdict = judge_crash(job, now, self.max_crashes)
        if verdict is None:
            return None
        bound.info("job.crash_judged", decision=describe_decision(verdict))
        return Outcome(job["_id"], job["lock_token"], int(job.get("attempts", 1)), executed=False, decision=verdict)

    def _cannot_run(self, slot_id: str, job: Document, now: datetime, bound: FilteringBoundLogger) -> Outcome | None:
        """The outcome of a job whose classes this process may not import (outside the allowed
        modules: decided on the names, never imported) or cannot (not in this release): given
        back unattempted for another worker, or archived ``unrunnable`` once refused for
        ``give_back_for`` (:mod:`recruiter.domain.refusals`). None: it can run here."""
        why = cannot_run(job, self.allowed)
        if why is None:
            return None
        decision, until = decide_refusal(job, why.reason, now, self.give_back_for)
        bound.warning("job.given_back", reason=why.reason, decision=describe_decision(decision), fix=why.fix,
                      detail="this worker cannot run it; no attempt is counted")
        refusal = {**refusal_document(self.process or slot_id, slot_id, why.reason, now, kind=why.kind,
                                      name=why.name, fix=why.fix), "until": until}
        return Outcome(job["_id"], job["lock_token"], int(job.get("attempts", 1)), executed=False,
                       decision=decision, refusal=refusal)

    def _execution(self, job: Document, kind: Kind, started_at: datetime, ended_at: datetime,
                   cls: str | None = None, message: str | None = None, trace: str | None = None,
                   logs: LogBuffer | None = None) -> Execution:
        text, cut = logs.text() if logs is not None else ("", 0)
        return Execution.of(job, kind, pid=self.pid, hostname=self.hostname, started_at=started_at,
                            ended_at=ended_at, error_class=cls, message=message, trace=trace, logs=text, logs_cut=cut)

    async def _execute(self, slot_id: str, running: Running, job: Document) -> object:
        """Run the job's method.

        With a timeout, a synchronous method runs in a child process that is
        killed when the timeout passes (a thread could not be stopped); an
        ``async`` one is cancelled. Without a timeout, synchronous code runs in
        a thread (no process to start) and ``async`` code on the event loop.
        """
        timeout_s = job.get("timeout_s")
        attempt, is_async = self._start(slot_id, running, job)
        task = asyncio.ensure_future(attempt)
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

    def _start(self, slot_id: str, running: Running, job: Document) -> tuple[Awaitable[object], bool]:
        """The attempt as an awaitable, and whether the job's method is ``async``: in a child
        process (synchronous, with a timeout), in a thread (synchronous), or a coroutine."""
        clock = self.clock

        def report(value: float | None, message: str | None) -> None:
            running.progress = Said(value, message, clock.now())  # one reference replaced: no lock needed

        ctx = context_of(slot_id, job, report)
        running.steps = ctx.workflow
        watch(running.logs, ctx.job_id, ctx.attempt)  # its output, in the process's log format
        timeout_s = job.get("timeout_s")
        workable = workable_from_document(job["workable"])
        ensure_installed()  # after the job's module is imported: it may have configured logging
        method = getattr(workable, job["workable"].get("method") or "execute")
        is_async = inspect.iscoroutinefunction(method)
        if self.isolated or (timeout_s and not is_async):
            running.child = ChildAttempt()
            limit = float(timeout_s) if timeout_s else None
            return _guarded(running.child.run(job["workable"], ctx, limit, running.logs, report,
                                              max_result_bytes=self.result_limit(job),
                                              trace_carrier=tracing.current_carrier())), False
        args = (ctx,) if accepts_context(method) else ()
        running.in_thread = not is_async
        run = cast("Awaitable[object]", method(*args) if is_async else asyncio.to_thread(method, *args))
        return _guarded(_captured(running.logs, run)), is_async


async def _captured(logs: LogBuffer, attempt: Awaitable[object]) -> object:
    """``attempt``, with what it logs kept in ``logs``: set in the attempt's own task (and copied
    into its thread by ``asyncio.to_thread``), so no other slot's lines, nor the worker's, land there."""
    with capturing(logs):
        return await attempt


async def _guarded(attempt: Awaitable[object]) -> object:
    """``attempt``, with a ``SystemExit``, ``KeyboardInterrupt`` or other ``BaseException`` it
    raises turned into a :class:`RemoteFailure` describing it, inside the attempt's own task:
    asyncio would otherwise raise those out of the event loop, ending the worker."""
    try:
        return await attempt
    except (Exception, asyncio.CancelledError):
        raise
    except BaseException as exc:  # noqa: BLE001 - the job's own, never the worker's: see above
        raise RemoteFailure.of(exc) from None


def _cancelled_by_us(running: Running) -> bool:
    """Whether a ``CancelledError`` that ended an attempt came from the worker (a halt, a forced
    stop, this slot's task cancelled), not from the job's own code."""
    task = asyncio.current_task()
    return running.state in (JobState.HALTED, JobState.INTERRUPTED) or (task is not None and task.cancelling() > 0)


def context_of(slot_id: str, job: Document, reporter: ProgressSink | None = None) -> JobContext:
    """What the running job may know about itself, and where its ``ctx.progress`` goes."""
    return JobContext(
        job_id=str(job["_id"]), attempt=int(job.get("attempts", 1)), worker_id=slot_id,
        group=declared_group(job) or job.get("group", ""), tags=tuple(job.get("tags") or ()),
        tenant=job.get("tenant"),
        scheduled_at=job.get("scheduled_at"), assigned_at=job.get("locked_at"), reporter=reporter,
        after=waited_for(job), dependencies=job.get(DEPENDENCY_RESULTS), workflow=steps_for(job),
    )


def finished_event(job: Document, ran: Ran, decision: Decision, error: str | None = None,
                   message: str | None = None, trace: str | None = None) -> JobFinished:
    """The event of an attempt that ran (its ``worker_id`` is the slot's, set by the slot loop)."""
    workable = job.get("workable")
    class_name = workable.get("class") if isinstance(workable, dict) else None
    return JobFinished(
        worker_id="", job_id=job["_id"], group=_text(job.get("group")), tenant=_text(job.get("tenant")),
        class_name=_text(class_name), attempt=job.get("attempts"), outcome=ran.kind,
        duration_s=(ran.ended_at - ran.started_at).total_seconds(),
        decision=None if ran.error is None else describe_decision(decision), error=error, message=message,
        trace=trace, exception=ran.error)


def started_event(job: Document, worker_id: str, started_at: datetime) -> JobStarted:
    workable = job.get("workable")
    class_name = workable.get("class") if isinstance(workable, dict) else None
    due = job.get("scheduled_at")
    return JobStarted(
        worker_id=worker_id, job_id=job["_id"], group=_text(job.get("group")), tenant=_text(job.get("tenant")),
        class_name=_text(class_name), attempt=job.get("attempts"), started_at=started_at,
        wait_s=max(0.0, (started_at - due).total_seconds()) if isinstance(due, datetime) else None)


def _waited_s(job: Document, started_at: datetime) -> float | None:
    """How long the job waited before this attempt: from its due time (``scheduled_at``) to ``started_at``."""
    due = job.get("scheduled_at")
    if not isinstance(due, datetime):
        return None
    try:
        return max(0.0, (started_at - due).total_seconds())
    except TypeError:  # a naive date against an aware one
        return None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
