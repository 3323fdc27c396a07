"""Running one attempt in a child process, so that it can be stopped.

A synchronous job cannot be interrupted inside a thread. Jobs that have a
timeout therefore run in a child process started from a ``forkserver`` (cheap
forks of a clean, already-imported interpreter, no inherited event loop or
sockets). The parent waits on a pipe; when the timeout passes, or the attempt
is halted or interrupted, it kills the child. Jobs without a timeout never pay
for this: they run in a thread of the worker.

The child sends back ``("ok", result, news)`` or ``("error", (lineage, message,
trace), news)``: exceptions travel as their description, since not every exception
can be pickled, and the retry policy only needs the class names. The result is
checked in the child (:func:`~recruiter.domain.handback.checked_result`) and travels
as a :class:`~recruiter.domain.handback.CheckedResult`: plain BSON values, or why it
was dropped, so the parent never unpickles an object of the job's; a snooze travels
as the plain :class:`~recruiter.domain.snooze.Asked` read from it. While the job
runs, a thread of the child sends ``("news", news)`` every ``NEWS_EVERY_S`` when
there is something new: ``news`` is the lines the job logged since the last
news (captured in the child as in the worker: :mod:`recruiter.processes.worker.capture`),
the bytes dropped before them, and the job's latest ``ctx.progress``. So a job
killed at its timeout still has what it logged until shortly before, and its
progress reaches the heartbeat with a delay of at most ``NEWS_EVERY_S``.

Invariant: when :meth:`ChildAttempt.run` returns or raises (cancellation
included), its child process has been killed and joined: no attempt outlives
the wait for it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import multiprocessing
import sys
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, ForkServerProcess
from typing import cast

from recruiter import tracing
from recruiter.domain.adding import plain_steps
from recruiter.domain.attempt import RemoteFailure
from recruiter.domain.handback import DEFAULT_MAX_RESULT_BYTES, CheckedResult, checked_result, describe
from recruiter.domain.snooze import Asked, SnoozeRefused, asked_of, is_snooze
from recruiter.domain.workable import JobContext, ProgressSink, accepts_context, workable_from_document
from recruiter.processes.worker.capture import LogBuffer, capturing, ensure_installed

NEWS_EVERY_S = 0.1
# (lines, bytes cut before them, the latest (value, message) the job said, or None)
News = tuple[list[str], int, tuple[float | None, str | None] | None]


class JobTimedOut(Exception):
    """The attempt ran longer than the job's timeout."""


class ChildDied(Exception):
    """The child process running the attempt died without an answer (e.g. ``os._exit``)."""


_context: ForkServerContext | None = None


def _mp_context() -> ForkServerContext:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(["recruiter.processes.worker.child"])
    return _context


class _Reporter:
    """The child's side: what the job logged and said since the last news, sent by :meth:`run`
    (the news thread) and once more by :meth:`answer`."""

    def __init__(self, out: Connection) -> None:
        self.out = out
        self.logs = LogBuffer()
        self.said: tuple[float | None, str | None] | None = None
        self._sent_said: object = None
        self._lock = threading.Lock()  # one message on the pipe at a time
        self.done = threading.Event()

    def progress(self, value: float | None, message: str | None) -> None:
        self.said = (value, message)  # one reference replaced: the news thread reads it

    def news(self) -> News:
        lines, cut = self.logs.drain()
        said = self.said
        news: News = (lines, cut, said if said is not self._sent_said else None)  # progress: only a new one
        self._sent_said = said
        return news

    def run(self) -> None:
        """The news thread: what is new, every ``NEWS_EVERY_S``, until the job ends."""
        while not self.done.wait(NEWS_EVERY_S):
            if self.logs.cut or self.logs.has_lines() or self.said is not self._sent_said:
                with self._lock:
                    self.out.send(("news", None, self.news()))

    def answer(self, kind: str, payload: object) -> None:
        """The last message: the answer, with the last news (an unpicklable result is an error)."""
        news = self.news()
        with self._lock:
            try:
                self.out.send((kind, payload, news))
            except Exception as exc:  # noqa: BLE001 - e.g. news that cannot be pickled
                self.out.send(("error", describe(exc), news))


def _unwritten(stream: str, line: str) -> None:
    """A child's printed lines are only kept, and sent to the parent (which logs them)."""


def _child_main(workable_doc: dict[str, object], ctx: JobContext, sys_path: list[str], out: Connection,
                max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES, trace_carrier: dict[str, str] | None = None,
                quiet: bool = False) -> None:
    sys.path[:] = sys_path
    reporter = _Reporter(out)
    if quiet:
        reporter.logs.echo = _unwritten
    ctx = dataclasses.replace(ctx, reporter=reporter.progress)
    news = threading.Thread(target=reporter.run, name="recruiter-job-news", daemon=True)
    answer: tuple[str, object]
    try:
        with capturing(reporter.logs):
            workable = workable_from_document(workable_doc)
            ensure_installed()
            news.start()
            method = getattr(workable, cast("str", workable_doc.get("method") or "execute"))
            args = (ctx,) if accepts_context(method) else ()
            with tracing.continued(trace_carrier):  # the attempt span's context (recruiter.tracing)
                value = asyncio.run(method(*args)) if inspect.iscoroutinefunction(method) else method(*args)
        answer = ("ok", _snooze_asked(value) if is_snooze(value) else
                  CheckedResult(*checked_result(value, max_result_bytes), steps=plain_steps(ctx.workflow)))
    except BaseException as exc:  # noqa: BLE001 - every failure is reported to the parent
        answer = ("error", describe(exc))
    reporter.done.set()
    if news.is_alive():
        news.join()
    reporter.logs.finish()
    try:
        reporter.answer(*answer)
    finally:
        out.close()


def _snooze_asked(value: object) -> Asked:
    """A snooze the job returned, read in the child as plain values (the parent never unpickles an
    object of the job's); one that cannot be honoured fails the attempt with its reason."""
    asked = asked_of(value)
    if isinstance(asked, str):
        raise SnoozeRefused(asked)
    return asked


def _receive(receiver: Connection, timeout_s: float | None, logs: LogBuffer,
             on_progress: ProgressSink) -> tuple[str, object]:
    """Read the child's messages until its answer: ``("ok"|"error", payload)``, ``("timeout", None)``
    when ``timeout_s`` (None: no limit) passed first, ``("died", None)`` when the pipe closed without one."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        if not receiver.poll(None if deadline is None else max(0.0, deadline - time.monotonic())):
            return "timeout", None
        try:
            message = receiver.recv()
        except (EOFError, OSError):
            return "died", None
        except BaseException as exc:  # noqa: BLE001 - an answer that cannot be unpickled here
            unreadable = f"the attempt's answer could not be read: {describe(exc)[1]}"
            return "error", (("builtins:RuntimeError",), unreadable, "")
        kind, payload, (lines, cut, said) = message
        logs.extend(lines, cut)
        if said is not None:
            on_progress(*said)
        if kind != "news":
            return kind, payload


class ChildAttempt:
    """One attempt in a child process; :meth:`kill` may be called from the event loop at any time."""

    def __init__(self) -> None:
        self.process: ForkServerProcess | None = None

    def kill(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.kill()

    async def run(self, workable_doc: dict[str, object], ctx: JobContext, timeout_s: float | None,
                  logs: LogBuffer | None = None, report: ProgressSink | None = None, *,
                  max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES, trace_carrier: dict[str, str] | None = None
                  ) -> object:
        """The attempt's value (a :class:`CheckedResult`); what the child logs lands in ``logs``,
        what it says of its progress goes to ``report``; ``trace_carrier``: the W3C trace context
        the job's code runs in (:func:`recruiter.tracing.continued`)."""
        mp = _mp_context()
        logs = logs if logs is not None else LogBuffer()
        receiver, sender = mp.Pipe(duplex=False)
        # In JSON mode the child writes nothing itself: the parent logs its lines as events.
        args = (workable_doc, ctx, list(sys.path), sender, max_result_bytes, trace_carrier, logs.echo is not None)
        self.process = mp.Process(target=_child_main, args=args,
                                  name=f"recruiter-job-{ctx.job_id}", daemon=True)

        def on_progress(value: float | None, message: str | None) -> None:
            if report is not None:
                report(value, message)

        reading: asyncio.Future[tuple[str, object]] | None = None
        try:
            await asyncio.to_thread(self.process.start)
            sender.close()
            reading = asyncio.ensure_future(asyncio.to_thread(_receive, receiver, timeout_s, logs, on_progress))
            kind, payload = await asyncio.shield(reading)
            if kind == "timeout":
                self.kill()
                raise JobTimedOut(f"the attempt ran longer than its timeout of {timeout_s or 0:g}s")
            if kind == "died":
                await asyncio.to_thread(self.process.join, 5)
                raise ChildDied(f"the process running the attempt died (exit code {self.process.exitcode})")
        finally:
            self.kill()  # on cancellation (halt, forced stop) too
            if reading is not None:  # the reader ends once the child is gone (its pipe closes)
                await asyncio.shield(asyncio.wait([reading], timeout=5))
            if reading is None or reading.done():
                receiver.close()
            if self.process is not None:
                await asyncio.shield(asyncio.to_thread(self.process.join, 5))
        if kind == "ok":
            return payload
        lineage, message, trace = cast("tuple[list[str], str, str]", payload)
        raise RemoteFailure(tuple(lineage), message, trace)
