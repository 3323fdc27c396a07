"""Job classes used by the tests; workers import them as ``tests.workables``.

Each body appends to a ``ledger`` collection in the test's database, so a test
can check what ran, where, when and how often.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from datetime import UTC, datetime
from typing import Any

from pymongo import MongoClient

from recruiter import JobContext, Workable

_clients: dict[str, MongoClient[Any]] = {}
_lock = threading.Lock()


def ledger(uri: str) -> Any:
    with _lock:
        if uri not in _clients:
            _clients[uri] = MongoClient(uri, tz_aware=True)
        client = _clients[uri]
    return client.get_default_database()["ledger"]


def note(uri: str, ctx: JobContext, event: str, **extra: Any) -> None:
    ledger(uri).insert_one({
        "job": ctx.job_id, "attempt": ctx.attempt, "worker": ctx.worker_id, "group": ctx.group,
        "event": event, "pid": os.getpid(), "at": datetime.now(UTC), **extra,
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
