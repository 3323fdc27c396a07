"""Counting what a process asks of the database, for the benchmarks.

When ``RECRUITER_COMMAND_STATS=<path>`` is set, a process's edge makes one
:class:`CommandStats` listener (:func:`listeners`) and gives it to every client
the process makes (the processes: :class:`recruiter.processes.runtime.Instruments`).
It counts round trips (commands started), the bytes of each command sent and
reply received (their BSON size), and the replies that found nothing (idle
polls), per command name and per ``command:collection``. It writes the totals
as JSON to ``<path>`` every second (atomically, through a rename), at exit, and
on ``SIGUSR2`` so a reader can ask for figures as of now (:func:`on_flush`: one
handler per process, shared with the recruiter's round timings,
:mod:`recruiter.processes.round_stats`).

Only application commands are counted: PyMongo's server monitoring
(heartbeat ``hello``s on their own connections) and connection handshakes are
not command events. Explicit ``hello`` commands (the server clock's
calibration) are. Off by default; the cost when on is one BSON encoding of
each command and reply.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import bson
from pymongo import monitoring

STATS_ENVVAR = "RECRUITER_COMMAND_STATS"
# The server address a command went to (host, port), which with its request id names it.
Address = tuple[str, int | None]
WRITE_INTERVAL_S = 1.0


@dataclass
class Tally:
    count: int = 0
    failed: int = 0
    empty: int = 0  # reads whose reply held no document: idle polls, change-stream waits that timed out
    request_bytes: int = 0
    reply_bytes: int = 0
    documents: int = 0  # documents in cursor replies (find, aggregate, getMore)

    def to_document(self) -> dict[str, int]:
        return {"count": self.count, "failed": self.failed, "empty": self.empty,
                "request_bytes": self.request_bytes, "reply_bytes": self.reply_bytes, "documents": self.documents}


def _collection_of(command_name: str, command: Mapping[str, object]) -> str | None:
    value = command.get(command_name)
    return value if isinstance(value, str) else None


def _documents_in(reply: Mapping[str, object]) -> int:
    cursor = reply.get("cursor")
    if isinstance(cursor, dict):
        return len(cursor.get("firstBatch") or cursor.get("nextBatch") or [])
    return 0


def _is_empty_read(reply: Mapping[str, object]) -> bool:
    """A cursor reply (find, aggregate, getMore) whose batch is empty, or a findAndModify that found nothing."""
    cursor = reply.get("cursor")
    if isinstance(cursor, dict):
        return not (cursor.get("firstBatch") or cursor.get("nextBatch"))
    return "value" in reply and reply["value"] is None


@dataclass
class CommandStats(monitoring.CommandListener):
    """Totals per command name and per ``name:collection``; safe to share between threads."""

    by_command: dict[str, Tally] = field(default_factory=dict)
    by_target: dict[str, Tally] = field(default_factory=dict)
    _keys: dict[tuple[Address, int], tuple[str, str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        name = event.command_name
        collection = _collection_of(name, event.command)
        target = f"{name}:{collection}" if collection else name
        size = len(bson.encode(event.command))
        with self._lock:
            self._keys[(event.connection_id, event.request_id)] = (name, target)
            for key, table in ((name, self.by_command), (target, self.by_target)):
                tally = table.setdefault(key, Tally())
                tally.count += 1
                tally.request_bytes += size

    def _finished(self, connection_id: Address, request_id: int, reply_size: int, failed: bool, empty: bool,
                  documents: int = 0) -> None:
        with self._lock:
            keys = self._keys.pop((connection_id, request_id), None)
            if keys is None:
                return
            for key, table in zip(keys, (self.by_command, self.by_target), strict=True):
                tally = table[key]
                tally.reply_bytes += reply_size
                tally.failed += failed
                tally.empty += empty
                tally.documents += documents

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._finished(event.connection_id, event.request_id, len(bson.encode(event.reply)), False,
                       _is_empty_read(event.reply), _documents_in(event.reply))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._finished(event.connection_id, event.request_id, 0, True, False)

    def snapshot(self) -> dict[str, object]:
        with self._lock:
            return {
                "pid": os.getpid(),
                "written_at": time.time(),
                "commands": {k: t.to_document() for k, t in self.by_command.items()},
                "targets": {k: t.to_document() for k, t in self.by_target.items()},
            }


@dataclass
class _StatsFile:
    snapshot: Callable[[], dict[str, object]]
    path: str
    wake: threading.Event = field(default_factory=threading.Event)

    def write(self) -> None:
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w") as out:
            json.dump(self.snapshot(), out)
        os.replace(tmp, self.path)

    def loop(self) -> None:
        # The first write happens at once: a reader can tell from the file that
        # the SIGUSR2 handler is in place.
        while True:
            with contextlib.suppress(OSError):  # the reader's directory went away: nobody to report to
                self.write()
            self.wake.wait(WRITE_INTERVAL_S)
            self.wake.clear()


def write_periodically(snapshot: Callable[[], dict[str, object]], path: str, name: str) -> None:
    """Write ``snapshot()`` as JSON to ``path`` from a thread called ``name``: at once, then every
    ``WRITE_INTERVAL_S``, on ``SIGUSR2`` (:func:`on_flush`) and at exit (the recruiter's round
    timings use it too: :mod:`recruiter.processes.round_stats`)."""
    writer = _StatsFile(snapshot, path)
    on_flush(writer.wake.set)
    threading.Thread(target=writer.loop, name=name, daemon=True).start()
    atexit.register(writer.write)


_flush_callbacks: list[Callable[[], None]] = []
_flush_lock = threading.Lock()
_flush_installed = False


def on_flush(callback: Callable[[], None]) -> None:
    """Call ``callback`` on ``SIGUSR2`` (a reader asking for figures as of now).

    One handler serves every callback of the process; it is installed with the first
    callback when that comes from the main thread (Python runs signal handlers there).
    A callback must only wake its writer: the interrupted code may hold any lock."""
    global _flush_installed
    with _flush_lock:
        _flush_callbacks.append(callback)
        if not _flush_installed and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGUSR2, _flush_all)
            _flush_installed = True


def _flush_all(_signum: int, _frame: object) -> None:
    for callback in tuple(_flush_callbacks):
        callback()


def listeners() -> list[monitoring.CommandListener]:
    """The listeners ``RECRUITER_COMMAND_STATS`` asks for: none unless it is set, else one new
    :class:`CommandStats` writing to its path. Called once per process, at its edge
    (:class:`recruiter.processes.runtime.Instruments`), which gives it to every client the process makes."""
    path = os.environ.get(STATS_ENVVAR)
    if not path:
        return []
    stats = CommandStats()
    write_periodically(stats.snapshot, path, "command-stats")
    return [stats]
