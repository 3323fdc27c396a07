"""Running a workable inline, in the test's own process, without a server.

:func:`run_inline` (and :func:`run_inline_async`) builds the job's document as
``enqueue`` would (so a job that could not be enqueued is refused the same way,
with :class:`~recruiter.JobRefused`), sends it through BSON and back (the
workable is rebuilt from what would be stored, as a worker rebuilds it), and runs
it with a real :class:`~recruiter.JobContext` (worker id ``"inline"``). A failed
attempt is judged by the job's retry policy exactly as a worker judges it
(:func:`recruiter.domain.attempt.judge`), and retried inline as it decides.

Waits are not slept by default: the runner keeps its own clock, which jumps to
the time a retry is due, so time-based policies (``TimeTable``, a job's age) see
the time pass. ``sleep=True`` waits for real.

What it does not cover: crashes and ``--max-crashes`` (there is no worker to
die), stopping a synchronous job at its timeout (an ``async`` one is stopped; a
synchronous one runs to its end: a worker runs it in a child process), and the
recruiter's scheduling (groups, tenants, priorities, pauses). For those, drain a
real queue (:mod:`recruiter.testing.drain`).

Invariant: nothing is written anywhere, and the process's logging, structlog and
standard streams are as before once the run ends (:mod:`recruiter.testing.capture`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import bson
from bson import CodecOptions, ObjectId

from recruiter.domain.adding import WorkflowSteps
from recruiter.domain.attempt import describe_exception, failure_of, judge, storable_result
from recruiter.domain.builder import JobBuilder
from recruiter.domain.clock import utc
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.domain.outcome import DONE, describe_decision
from recruiter.domain.retry import Archive, Decision, MoveToGroup
from recruiter.domain.snooze import Snoozed, SnoozeRefused, asked_of, decide_snooze, is_snooze
from recruiter.domain.workable import JobContext, Workable, accepts_context, workable_from_document
from recruiter.processes.worker.capture import LogBuffer, capturing
from recruiter.processes.worker.child import JobTimedOut
from recruiter.testing.capture import installed_for_now

INLINE_WORKER = "inline"
INLINE_STEP = "inline"  # the workflow step a job run inline is (ctx.workflow works, nothing is added)
# Why a run that the policy would still retry ends, after ``max_attempts`` attempts (inline only).
STILL_RETRYING = "still-retrying"
_CODEC: CodecOptions[dict[str, Any]] = CodecOptions(tz_aware=True)


@dataclass(frozen=True)
class ProgressCall:
    """One ``ctx.progress`` call, as the worker would have kept it."""

    value: float | None
    message: str | None
    at: datetime


@dataclass(frozen=True)
class InlineAttempt:
    """One attempt: how it ended, its error, what it logged and reported, what the policy decided."""

    attempt: int
    outcome: str  # "done", "failed", "timed-out" or "snoozed", as in a job's ``executions``
    started_at: datetime
    ended_at: datetime
    error: BaseException | None = None
    error_class: str | None = None  # "module:Qualname", as stored
    message: str | None = None
    trace: str | None = None
    logs: str = ""
    logs_cut: int = 0
    progress: tuple[ProgressCall, ...] = ()
    decision: str = ""  # "archive: done", "retry at …", as a worker logs it


@dataclass(frozen=True)
class InlineResult:
    """How an inline run ended: ``why`` (as ``archived.why``), ``result`` and every attempt."""

    why: str
    result: object
    attempts: tuple[InlineAttempt, ...]
    group: str
    reason: str | None = None
    result_dropped: str | None = None  # why a done job's value would not be stored, if it would not
    waits: tuple[timedelta, ...] = ()  # between an attempt's end and the next one's due time
    # The names of the workflow steps the done attempt added (ctx.workflow; run as step "inline").
    added_steps: tuple[str, ...] = ()

    @property
    def done(self) -> bool:
        return self.why == DONE

    @property
    def last(self) -> InlineAttempt:
        return self.attempts[-1]

    @property
    def progress(self) -> list[ProgressCall]:
        return [call for attempt in self.attempts for call in attempt.progress]

    @property
    def logs(self) -> str:
        return "".join(attempt.logs for attempt in self.attempts)

    def unwrap(self) -> object:
        """The result of a done run; else the last attempt's error raised again (or RuntimeError)."""
        if self.done:
            return self.result
        if self.last.error is not None:
            raise self.last.error
        raise RuntimeError(f"the job ended {self.why}")


class _Clock:
    """Real time, plus the waits skipped so far."""

    def __init__(self) -> None:
        self.skipped = timedelta()

    def now(self) -> datetime:
        return utc(datetime.now(UTC) + self.skipped)


@dataclass
class _Run:
    """The job document as a worker would see it, and the attempts so far."""

    job: dict[str, Any]
    sleep: bool
    max_attempts: int
    clock: _Clock = field(default_factory=_Clock)
    attempts: list[InlineAttempt] = field(default_factory=list)
    waits: list[timedelta] = field(default_factory=list)
    steps: WorkflowSteps | None = None  # the attempt's ctx.workflow
    snoozes: int = 0  # runs that snoozed (recruiter.domain.snooze): not counted as attempts

    def start(self) -> tuple[Callable[..., Any], tuple[JobContext, ...], LogBuffer, list[ProgressCall]]:
        """The next attempt's bound method and arguments, its log buffer and progress list."""
        self.job["attempts"] = len(self.attempts) - self.snoozes + 1
        now = self.clock.now()
        calls: list[ProgressCall] = []
        ctx = JobContext(job_id=str(self.job["_id"]), attempt=self.job["attempts"], worker_id=INLINE_WORKER,
                         group=self.job["group"], tags=tuple(self.job.get("tags") or ()),
                         tenant=self.job.get("tenant"), scheduled_at=self.job["scheduled_at"], assigned_at=now,
                         reporter=lambda value, message: calls.append(ProgressCall(value, message, self.clock.now())),
                         workflow=WorkflowSteps(INLINE_STEP))
        self.steps = ctx.workflow
        workable = workable_from_document(self.job["workable"])
        method = getattr(workable, self.job["workable"].get("method") or "execute")
        return method, ((ctx,) if accepts_context(method) else ()), LogBuffer(), calls

    def finish(self, started_at: datetime, value: object, error: BaseException | None, logs: LogBuffer,
               calls: list[ProgressCall]) -> InlineResult | timedelta:
        """Record the attempt; the result if the job is over, else how long until the next attempt."""
        ended_at = self.clock.now()
        text, cut = logs.text()
        attempt = len(self.attempts) - self.snoozes + 1
        made = functools.partial(InlineAttempt, attempt=attempt, started_at=started_at, ended_at=ended_at,
                                 logs=text, logs_cut=cut, progress=tuple(calls))
        snoozed = None if error is not None or not is_snooze(value) else self._snoozed(value, ended_at)
        if isinstance(snoozed, SnoozeRefused):
            error = snoozed  # judged as the failure it is, as a worker does
        elif snoozed is not None:
            self.attempts.append(made(outcome="snoozed", decision=describe_decision(snoozed.decision)))
            return self._next(snoozed.decision, ended_at, None)  # bounded by the job's max_snoozes
        if error is None:
            result, dropped = storable_result(value)  # as stored: a BSON round trip
            self.attempts.append(made(outcome="done", decision=f"archive: {DONE}"))
            return self._result(DONE, _stored(result), result_dropped=dropped.reason if dropped else None,
                                added_steps=tuple(s["name"] for s in self.steps.added) if self.steps else ())
        cls, message, trace = describe_exception(error)
        decision: Decision = judge(self.job, failure_of(self.job, error, ended_at), ended_at)
        self.attempts.append(made(
            outcome="timed-out" if isinstance(error, JobTimedOut) else "failed", error=error, error_class=cls,
            message=message, trace=trace, decision=describe_decision(decision)))
        return self._next(decision, ended_at, attempt)

    def _snoozed(self, value: object, now: datetime) -> Snoozed | SnoozeRefused:
        """A snooze the job returned, decided as a worker decides it (its cap counts this run's)."""
        asked = asked_of(value)
        decided = asked if isinstance(asked, str) else decide_snooze({**self.job, "snoozes": self.snoozes}, asked, now)
        if isinstance(decided, str):
            return SnoozeRefused(decided)
        self.snoozes += 1
        return decided

    def _next(self, decision: Decision, ended_at: datetime, attempt: int | None) -> InlineResult | timedelta:
        """The result if ``decision`` ends the job (or ``attempt`` reaches ``max_attempts``), else
        how long until its next run."""
        if isinstance(decision, Archive):
            return self._result(decision.why, None, reason=decision.reason)
        if isinstance(decision, MoveToGroup):
            self.job["group"] = decision.group
        self.job["scheduled_at"] = decision.at
        wait = max(decision.at - ended_at, timedelta())
        self.waits.append(wait)
        if attempt is not None and attempt >= self.max_attempts:
            return self._result(STILL_RETRYING, None, reason=f"stopped after {attempt} attempts (max_attempts)")
        if not self.sleep:
            self.clock.skipped += wait
        return wait if self.sleep else timedelta()

    def _result(self, why: str, result: object, **more: Any) -> InlineResult:
        return InlineResult(why=why, result=result, attempts=tuple(self.attempts), group=self.job["group"],
                            waits=tuple(self.waits), **more)


def _stored(value: object) -> object:
    """The value as a reader of ``archived`` gets it back (BSON round trip)."""
    return None if value is None else bson.decode(bson.encode({"r": value}), _CODEC)["r"]


def _prepare(item: Workable | JobBuilder[Any], sleep: bool, max_attempts: int) -> _Run:
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
    clock = _Clock()
    if isinstance(item, JobBuilder):
        doc: Mapping[str, Any] = build_job_document(item.workable, item.options, clock.now(), ObjectId())
    elif isinstance(item, Workable):
        doc = build_job_document(item, JobOptions(), clock.now(), ObjectId())
    else:
        raise TypeError(f"expected a Workable or a job builder, got {type(item).__name__}")
    stored = bson.decode(bson.encode(doc), _CODEC)  # what a worker would read
    return _Run(job=stored, sleep=sleep, max_attempts=max_attempts, clock=clock)


def run_inline(item: Workable | JobBuilder[Any], *, sleep: bool = False, max_attempts: int = 100) -> InlineResult:
    """Run a job here and now, retried as its policy says, and return how it ended.

    ``item`` is a workable or a job builder (``Job(...).as_job_of(Inline()).retry_with(...)``).
    Waits between attempts are skipped unless ``sleep``; a job still retried after
    ``max_attempts`` attempts ends ``still-retrying``. An ``async def execute`` runs on a
    new event loop: from async code, use :func:`run_inline_async`.
    """
    run = _prepare(item, sleep, max_attempts)
    while True:
        method, args, logs, calls = run.start()
        if inspect.iscoroutinefunction(method) and _loop_running():
            raise RuntimeError("run_inline cannot run an async job inside a running event loop: "
                               "await run_inline_async(...) instead")
        started_at = run.clock.now()
        value: object = None
        error: BaseException | None = None
        with installed_for_now(), capturing(logs):
            try:
                value = method(*args)
                if inspect.isawaitable(value):
                    value = asyncio.run(_awaited(value, run.job.get("timeout_s")))
            except Exception as exc:  # noqa: BLE001 - a failure of the job is an attempt's outcome
                error = exc
        ended = run.finish(started_at, value, error, logs, calls)
        if isinstance(ended, InlineResult):
            return ended
        time.sleep(ended.total_seconds())


async def run_inline_async(item: Workable | JobBuilder[Any], *, sleep: bool = False,
                           max_attempts: int = 100) -> InlineResult:
    """:func:`run_inline` for async code: an ``async`` job runs on the running loop; a
    synchronous one runs in a thread, as a worker runs it."""
    run = _prepare(item, sleep, max_attempts)
    while True:
        method, args, logs, calls = run.start()
        started_at = run.clock.now()
        value: object = None
        error: BaseException | None = None
        with installed_for_now(), capturing(logs):
            try:
                if inspect.iscoroutinefunction(method):
                    value = await _awaited(method(*args), run.job.get("timeout_s"))
                else:
                    value = await asyncio.to_thread(method, *args)
            except Exception as exc:  # noqa: BLE001 - a failure of the job is an attempt's outcome
                error = exc
        ended = run.finish(started_at, value, error, logs, calls)
        if isinstance(ended, InlineResult):
            return ended
        await asyncio.sleep(ended.total_seconds())


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _awaited(value: Awaitable[object], timeout_s: object) -> object:
    if not isinstance(timeout_s, int | float) or isinstance(timeout_s, bool):
        return await value
    try:
        return await asyncio.wait_for(value, timeout=timeout_s)
    except TimeoutError:
        raise JobTimedOut(f"the attempt ran longer than its timeout of {timeout_s:g}s") from None


class Inline:
    """Something to build a job for, as ``as_job_of`` needs: ``enqueue()`` runs it inline.

    >>> SendInvoice("42").as_job_of(Inline()).retry_with(RetryManyTimes(2)).enqueue().why
    'done'
    """

    def __init__(self, *, sleep: bool = False, max_attempts: int = 100) -> None:
        self.sleep = sleep
        self.max_attempts = max_attempts

    def enqueue(self, item: JobBuilder[Any] | Workable, *, session: object = None) -> InlineResult:
        """Run ``item`` inline; ``session`` is taken only so that this is an ``Enqueuer`` for the
        type checker (``job.as_job_of(Inline())`` is a ``JobBuilder[InlineResult]``): nothing is
        written, so there is no transaction to run in, and a session given is refused."""
        if session is not None:
            raise TypeError("Inline runs the job here and writes nothing: it takes no session")
        return run_inline(item, sleep=self.sleep, max_attempts=self.max_attempts)
