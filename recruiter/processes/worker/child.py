"""Running one attempt in a child process, so that it can be stopped.

A synchronous job cannot be interrupted inside a thread. Jobs that have a
timeout therefore run in a child process started from a ``forkserver`` (cheap
forks of a clean, already-imported interpreter, no inherited event loop or
sockets). The parent waits on a pipe; when the timeout passes, or the attempt
is halted or interrupted, it kills the child. Jobs without a timeout never pay
for this: they run in a thread of the worker.

The child sends back ``("ok", result)`` or ``("error", (lineage, message,
trace))``: exceptions travel as their description, since not every exception
can be pickled, and the retry policy only needs the class names.

Invariant: when :meth:`ChildAttempt.run` returns or raises (cancellation
included), its child process has been killed and joined: no attempt outlives
the wait for it.
"""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing
import sys
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, ForkServerProcess
from typing import cast

from recruiter.domain.attempt import RemoteFailure, describe_exception
from recruiter.domain.naming import exception_lineage
from recruiter.domain.workable import JobContext, accepts_context, workable_from_document


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


def _child_main(workable_doc: dict[str, object], ctx: JobContext, sys_path: list[str], out: Connection) -> None:
    sys.path[:] = sys_path
    try:
        workable = workable_from_document(workable_doc)
        method = getattr(workable, cast("str", workable_doc.get("method") or "execute"))
        args = (ctx,) if accepts_context(method) else ()
        value = asyncio.run(method(*args)) if inspect.iscoroutinefunction(method) else method(*args)
        out.send(("ok", value))
    except BaseException as exc:  # noqa: BLE001 - every failure is reported to the parent
        _, message, trace = describe_exception(exc)
        out.send(("error", (exception_lineage(type(exc)), message, trace)))
    finally:
        out.close()


class ChildAttempt:
    """One attempt in a child process; :meth:`kill` may be called from the event loop at any time."""

    def __init__(self) -> None:
        self.process: ForkServerProcess | None = None

    def kill(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.kill()

    async def run(self, workable_doc: dict[str, object], ctx: JobContext, timeout_s: float) -> object:
        mp = _mp_context()
        receiver, sender = mp.Pipe(duplex=False)
        self.process = mp.Process(target=_child_main, args=(workable_doc, ctx, list(sys.path), sender),
                                  name=f"recruiter-job-{ctx.job_id}", daemon=True)
        try:
            await asyncio.to_thread(self.process.start)
            sender.close()
            answered = await asyncio.to_thread(receiver.poll, timeout_s)
            if not answered:
                self.kill()
                raise JobTimedOut(f"the attempt ran longer than its timeout of {timeout_s:g}s")
            try:
                kind, payload = receiver.recv()
            except EOFError:
                await asyncio.to_thread(self.process.join, 5)
                raise ChildDied(f"the process running the attempt died (exit code {self.process.exitcode})") from None
        finally:
            self.kill()  # on cancellation (halt, forced stop) too
            receiver.close()
            if self.process is not None:
                await asyncio.shield(asyncio.to_thread(self.process.join, 5))
        if kind == "ok":
            return payload
        lineage, message, trace = payload
        raise RemoteFailure(tuple(lineage), message, trace)
