"""Job classes used by the tests; workers import them as ``tests.workables``.

Each body appends to a ``ledger`` collection in the test's database, so a test
can check what ran, where, when and how often.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from datetime import UTC, datetime
from typing import Any

from pymongo import MongoClient

from recruiter import JobContext, Workable
from recruiter.store import strict

_clients: dict[str, MongoClient[Any]] = {}
_lock = threading.Lock()


def ledger(uri: str) -> Any:
    with _lock:
        if uri not in _clients:
            _clients[uri] = MongoClient(uri, tz_aware=True, event_listeners=strict.listeners())
        client = _clients[uri]
    return client.get_default_database()["ledger"]


def note(uri: str, ctx: JobContext, event: str, **extra: Any) -> None:
    ledger(uri).insert_one({
        "job": ctx.job_id, "attempt": ctx.attempt, "worker": ctx.worker_id, "group": ctx.group,
        "event": event, "pid": os.getpid(), "at": datetime.now(UTC), "assigned_at": ctx.assigned_at,
        **extra,
    })


class Record(Workable):
    """Notes that it ran, optionally after sleeping."""

    def __init__(self, ledger_uri: str, n: int = 0, sleep_s: float = 0.0) -> None:
        self.ledger_uri = ledger_uri
        self.n = n
        self.sleep_s = sleep_s

    def execute(self, ctx: JobContext) -> int:
        note(self.ledger_uri, ctx, "start", n=self.n)
        if self.sleep_s:
            time.sleep(self.sleep_s)
        note(self.ledger_uri, ctx, "end", n=self.n)
        return self.n


class UniqueRecord(Record):
    """A Record whose class gives its jobs a unique key: ``record-<n>`` (a number for ``n == -1``)."""

    def unique_key(self) -> Any:
        return 42 if self.n == -1 else f"record-{self.n}"


class AsyncRecord(Workable):
    def __init__(self, ledger_uri: str, n: int = 0, sleep_s: float = 0.0) -> None:
        self.ledger_uri = ledger_uri
        self.n = n
        self.sleep_s = sleep_s

    async def execute(self, ctx: JobContext) -> dict[str, int]:
        await asyncio.to_thread(note, self.ledger_uri, ctx, "start", n=self.n)
        await asyncio.sleep(self.sleep_s)
        await asyncio.to_thread(note, self.ledger_uri, ctx, "end", n=self.n)
        return {"n": self.n}


class AlwaysFails(Workable):
    def __init__(self, ledger_uri: str, message: str = "boom") -> None:
        self.ledger_uri = ledger_uri
        self.message = message

    def execute(self, ctx: JobContext) -> None:
        note(self.ledger_uri, ctx, "start")
        raise ValueError(self.message)


class SlowUntilKilled(Workable):
    """Runs long on its first attempt (so the test can kill the worker), quickly afterwards."""

    def __init__(self, ledger_uri: str, first_attempt_s: float = 60.0) -> None:
        self.ledger_uri = ledger_uri
        self.first_attempt_s = first_attempt_s

    def execute(self, ctx: JobContext) -> None:
        note(self.ledger_uri, ctx, "start")
        if ctx.attempt == 1:
            time.sleep(self.first_attempt_s)
        note(self.ledger_uri, ctx, "end")


class BrokenConstructor(Workable):
    """Its constructor refuses negative values (tests store one behind its back)."""

    def __init__(self, value: int) -> None:
        if value < 0:
            raise RuntimeError(f"cannot build with {value}")
        self.value = value

    def execute(self) -> None:  # pragma: no cover - never reached
        pass


def released(uri: str, key: str) -> bool:
    return ledger(uri).find_one({"event": "release", "key": key}) is not None


def release(uri: str, key: str) -> None:
    ledger(uri).insert_one({"event": "release", "key": key, "at": datetime.now(UTC)})


class WaitForRelease(Workable):
    """Runs until the test writes a ``release`` entry with its key to the ledger (real time, no clock)."""

    def __init__(self, ledger_uri: str, key: str) -> None:
        self.ledger_uri = ledger_uri
        self.key = key

    def execute(self, ctx: JobContext) -> str:
        note(self.ledger_uri, ctx, "start", key=self.key)
        while not released(self.ledger_uri, self.key):
            time.sleep(0.02)
        note(self.ledger_uri, ctx, "end", key=self.key)
        return self.key


class AsyncWaitForRelease(WaitForRelease):
    async def execute(self, ctx: JobContext) -> str:  # type: ignore[override]
        await asyncio.to_thread(note, self.ledger_uri, ctx, "start", key=self.key)
        # Polls the ledger, which the test writes from another process: no event to wait on.
        while not await asyncio.to_thread(released, self.ledger_uri, self.key):  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        await asyncio.to_thread(note, self.ledger_uri, ctx, "end", key=self.key)
        return self.key


class RunsOnAfterRelease(Workable):
    """A synchronous job (it runs in a thread) that runs until the test releases it, then ``then_s``
    more: however long the cancel takes, the queued jobs have had rounds to start beside it."""

    def __init__(self, ledger_uri: str, key: str, then_s: float) -> None:
        self.ledger_uri = ledger_uri
        self.key = key
        self.then_s = then_s

    def execute(self, ctx: JobContext) -> None:
        note(self.ledger_uri, ctx, "start", key=self.key)
        while not released(self.ledger_uri, self.key):
            time.sleep(0.02)
        time.sleep(self.then_s)
        note(self.ledger_uri, ctx, "end", key=self.key)


class BlocksTheLoop(Workable):
    """An ``async`` job that blocks its event loop (the worker's) with a synchronous sleep."""

    def __init__(self, ledger_uri: str, seconds: float) -> None:
        self.ledger_uri = ledger_uri
        self.seconds = seconds

    async def execute(self, ctx: JobContext) -> None:
        note(self.ledger_uri, ctx, "start")
        time.sleep(self.seconds)  # noqa: ASYNC251 - deliberately blocks: nothing else on the loop runs meanwhile
        note(self.ledger_uri, ctx, "end")


class NeverReturns(Workable):
    """Synchronous code that never returns; only a timeout (a killed child process) stops it."""

    timeout_s = 0.5

    def __init__(self, ledger_uri: str) -> None:
        self.ledger_uri = ledger_uri

    def execute(self, ctx: JobContext) -> None:
        note(self.ledger_uri, ctx, "start", child_pid=os.getpid())
        while True:
            time.sleep(0.05)


class ExitsTheProcess(Workable):
    """Ends the process running it without a word, as a segfault or an OOM kill would."""

    def __init__(self, ledger_uri: str) -> None:
        self.ledger_uri = ledger_uri

    def execute(self, ctx: JobContext) -> None:
        note(self.ledger_uri, ctx, "start")
        os._exit(17)


class Carry(Workable):
    """Carries a parameter of any size, and notes that it ran and what size it got."""

    def __init__(self, ledger_uri: str, payload: str) -> None:
        self.ledger_uri = ledger_uri
        self.payload = payload

    def execute(self, ctx: JobContext) -> int:
        note(self.ledger_uri, ctx, "start", size=len(self.payload))
        return len(self.payload)


class Progressing(Workable):
    """Says its progress ``steps`` times over about ``steps * step_s`` seconds (or, without
    ``report``, only takes the same time)."""

    def __init__(self, steps: int, step_s: float, report: bool = True) -> None:
        self.steps = steps
        self.step_s = step_s
        self.report = report

    def execute(self, ctx: JobContext) -> int:
        for i in range(1, self.steps + 1):
            time.sleep(self.step_s)
            if self.report:
                ctx.progress(i / self.steps, f"step {i} of {self.steps}")
        return self.steps


class Chatty(Workable):
    """Logs through ``logging``, structlog and ``print`` on every attempt (and ``lines`` more
    printed lines of ``width`` characters), and fails until attempt ``succeed_on``."""

    def __init__(self, succeed_on: int = 3, lines: int = 0, width: int = 0) -> None:
        self.succeed_on = succeed_on
        self.lines = lines
        self.width = width

    def execute(self, ctx: JobContext) -> int:
        import logging
        import sys

        import structlog

        logging.getLogger("tests.chatty").info("logging says attempt %d", ctx.attempt)
        structlog.get_logger().warning("structlog says", attempt=ctx.attempt)
        print(f"print says attempt {ctx.attempt}")
        print(f"stderr says attempt {ctx.attempt}", file=sys.stderr)
        for i in range(self.lines):
            print(f"{i:06d} " + "x" * self.width)
        if ctx.attempt < self.succeed_on:
            raise RuntimeError(f"attempt {ctx.attempt} fails")
        return ctx.attempt


class AsyncChatty(Chatty):
    """:class:`Chatty` as an ``async def``: its print is made from a thread it starts (``asyncio.to_thread``)."""

    async def execute(self, ctx: JobContext) -> int:  # type: ignore[override]
        import logging
        import sys

        import structlog

        logging.getLogger("tests.chatty").info("logging says attempt %d", ctx.attempt)
        await asyncio.sleep(0)
        structlog.get_logger().warning("structlog says", attempt=ctx.attempt)
        await asyncio.to_thread(print, f"print says attempt {ctx.attempt}")
        print(f"stderr says attempt {ctx.attempt}", file=sys.stderr)
        if ctx.attempt < self.succeed_on:
            raise RuntimeError(f"attempt {ctx.attempt} fails")
        return ctx.attempt


class LogsThenHangs(Workable):
    """Logs a line and prints one, then sleeps far past any short timeout."""

    def execute(self, ctx: JobContext) -> None:
        import logging

        logging.getLogger("tests.hangs").warning("about to hang, attempt %d", ctx.attempt)
        print("printed before hanging", flush=True)
        time.sleep(300)


class KillsItsWorker(Workable):
    """SIGKILLs the worker running it, once its heartbeat had time to show it running (a crash,
    not an unproven return): a poison job."""

    def __init__(self, ledger_uri: str, after_s: float = 1.0) -> None:
        self.ledger_uri = ledger_uri
        self.after_s = after_s

    def execute(self, ctx: JobContext) -> None:
        note(self.ledger_uri, ctx, "start")
        time.sleep(self.after_s)
        os.kill(os.getpid(), signal.SIGKILL)


class Ticks(Workable):
    """Synchronous code without a timeout that never returns: it appends a tick to ``path`` every
    50 ms, so a test sees when it stops (a thread cannot be stopped; a child process can)."""

    def __init__(self, ledger_uri: str, path: str) -> None:
        self.ledger_uri = ledger_uri
        self.path = path

    def execute(self, ctx: JobContext) -> None:
        note(self.ledger_uri, ctx, "start", pid=os.getpid())
        while True:
            with open(self.path, "a") as out:
                out.write(f"{time.time()}\n")
            time.sleep(0.05)


class Quick(Workable):
    """A no-op job that notes nothing: its run time is as short as a job's can be (batches size on it)."""

    def execute(self, ctx: JobContext) -> None:
        return None
