"""Counting what a process asks of the database, for the benchmarks.

When ``RECRUITER_COMMAND_STATS=<path>`` is set, a process's edge makes one
:class:`CommandStats` listener (:func:`listeners`) and gives it to every client
the process makes (the processes: :class:`recruiter.processes.runtime.Instruments`).
It counts round trips (commands started), the bytes of each command sent and
reply received (their BSON size), the replies that found nothing (idle
polls), the documents cursor replies carried and the documents writes wrote
(from each write's reply: inserted, matched, modified, upserted, deleted;
:func:`_writes_in`), per command name and per ``command:collection``. It writes the totals
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
WRITE_FIELDS = ("inserted", "matched", "modified", "upserted", "deleted")


@dataclass
class Tally:
    count: int = 0
    failed: int = 0
    empty: int = 0  # reads whose reply held no document: idle polls, change-stream waits that timed out
    request_bytes: int = 0
    reply_bytes: int = 0
    documents: int = 0  # documents in cursor replies (find, aggregate, getMore)
    # Documents written, from the write replies (a write in a transaction that aborts is counted too).
    inserted: int = 0
    matched: int = 0  # updates: documents matched and not upserted (modified or left as they were)
    modified: int = 0
    upserted: int = 0
    deleted: int = 0
    written_by_many: int = 0  # of those written, by commands whose every statement may touch many (update_many...)
    retryable: int = 0  # retryable writes sent (:func:`_is_retryable_write`), whose replies a server keeps

    @property
    def written(self) -> int:
        """Documents the writes inserted, changed, upserted or deleted."""
        return self.inserted + self.modified + self.upserted + self.deleted

    def add_writes(self, writes: Mapping[str, int], by_many: bool) -> None:
        before = self.written
        for name, value in writes.items():
            setattr(self, name, getattr(self, name) + value)
        if by_many:
            self.written_by_many += self.written - before

    def to_document(self) -> dict[str, int]:
        return {"count": self.count, "failed": self.failed, "empty": self.empty,
                "request_bytes": self.request_bytes, "reply_bytes": self.reply_bytes, "documents": self.documents,
                **{name: getattr(self, name) for name in WRITE_FIELDS}, "written": self.written,
                "written_by_many": self.written_by_many, "retryable": self.retryable}



def _collection_of(command_name: str, command: Mapping[str, object]) -> str | None:
    value = command.get(command_name)
    if isinstance(value, str):
        return value
    if command_name == "getMore" and isinstance(command.get("collection"), str):
        return str(command["collection"])  # a change stream on a whole database: "$cmd.aggregate"
    namespaces = command.get("nsInfo")  # a client bulkWrite: its collection when it writes to one only
    if command_name == "bulkWrite" and isinstance(namespaces, list) and len(namespaces) == 1:
        ns = namespaces[0].get("ns") if isinstance(namespaces[0], Mapping) else None
        return ns.split(".", 1)[1] if isinstance(ns, str) and "." in ns else None
    return None


def _touches_many(command_name: str, command: Mapping[str, object]) -> bool:
    """An update or delete whose every statement may touch many documents (``multi``, ``limit: 0``)."""
    statements: object
    value: object
    if command_name == "update":
        statements, key, value = command.get("updates"), "multi", True
    elif command_name == "delete":
        statements, key, value = command.get("deletes"), "limit", 0
    else:
        return False
    if not isinstance(statements, list) or not statements:
        return False
    return all(isinstance(s, Mapping) and s.get(key) == value for s in statements)


def _is_retryable_write(command: Mapping[str, object]) -> bool:
    """A retryable write: a transaction number outside a transaction (whose statements carry
    ``autocommit``). The server keeps each one's reply for a retry (:mod:`recruiter.store.unrecorded`)."""
    return "txnNumber" in command and "autocommit" not in command


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _writes_in(command_name: str, reply: Mapping[str, object]) -> dict[str, int]:
    """The documents a write command wrote, from its reply (empty for other commands)."""
    n = _count(reply.get("n"))
    if command_name == "insert":
        return {"inserted": n}
    if command_name == "delete":
        return {"deleted": n}
    if command_name == "update":
        upserted = reply.get("upserted")
        up = len(upserted) if isinstance(upserted, list) else 0
        return {"matched": max(0, n - up), "modified": _count(reply.get("nModified")), "upserted": up}
    if command_name == "findAndModify":
        return _find_and_modify_writes(reply.get("lastErrorObject"))
    if command_name == "bulkWrite":
        return {"inserted": _count(reply.get("nInserted")), "matched": _count(reply.get("nMatched")),
                "modified": _count(reply.get("nModified")), "upserted": _count(reply.get("nUpserted")),
                "deleted": _count(reply.get("nDeleted"))}
    return {}


BulkOp = tuple[str, str, bool]  # a client bulkWrite's operation: (update, insert or delete), collection, many


def _bulk_ops(command_name: str, command: Mapping[str, object]) -> list[BulkOp] | None:
    """A client ``bulkWrite``'s operations, by index, each as (kind, collection, whether it may touch
    many documents); None for another command or one this cannot read."""
    ns_info, ops = command.get("nsInfo"), command.get("ops")
    if command_name != "bulkWrite" or not isinstance(ns_info, list) or not isinstance(ops, list):
        return None
    names = [str(ns.get("ns", "")).split(".", 1)[-1] if isinstance(ns, Mapping) else "" for ns in ns_info]
    out: list[BulkOp] = []
    for op in ops:
        kind = next((k for k in ("update", "insert", "delete") if isinstance(op, Mapping) and k in op), None)
        at = op.get(kind) if kind is not None and isinstance(op, Mapping) else None
        if kind is None or not isinstance(at, int) or not 0 <= at < len(names):
            return None
        out.append((kind, names[at], bool(op.get("multi"))))
    return out


def _bulk_writes(ops: list[BulkOp], reply: Mapping[str, object]) -> list[tuple[str, dict[str, int], bool]]:
    """What each operation of a verbose client ``bulkWrite`` wrote, as (``kind:collection``, the
    documents written, many), from its reply's per-operation results (empty when it has none)."""
    cursor = reply.get("cursor")
    batch = cursor.get("firstBatch") if isinstance(cursor, Mapping) else None
    out = []
    for result in batch if isinstance(batch, list) else []:
        idx = result.get("idx") if isinstance(result, Mapping) else None
        if not isinstance(idx, int) or not 0 <= idx < len(ops):
            continue
        kind, collection, many = ops[idx]
        n = _count(result.get("n"))
        up = 1 if "upserted" in result else 0
        writes = ({"inserted": n} if kind == "insert" else {"deleted": n} if kind == "delete" else
                  {"matched": max(0, n - up), "modified": _count(result.get("nModified")), "upserted": up})
        out.append((f"{kind}:{collection}", writes, many))
    return out


def _find_and_modify_writes(last: object) -> dict[str, int]:
    """findAndModify reports no modified count: an update that matched counts as modified."""
    if not isinstance(last, dict):
        return {}
    n = _count(last.get("n"))
    if "upserted" in last:
        return {"upserted": n}
    if "updatedExisting" in last:
        return {"matched": n, "modified": n}
    return {"deleted": n}  # a remove reports n alone


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
    _keys: dict[tuple[Address, int], tuple[str, str, bool, list[BulkOp] | None]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        name = event.command_name
        collection = _collection_of(name, event.command)
        target = f"{name}:{collection}" if collection else name
        size = len(bson.encode(event.command))
        many = _touches_many(name, event.command)
        ops = _bulk_ops(name, event.command)
        retryable = _is_retryable_write(event.command)
        with self._lock:
            self._keys[(event.connection_id, event.request_id)] = (name, target, many, ops)
            for key, table in ((name, self.by_command), (target, self.by_target)):
                tally = table.setdefault(key, Tally())
                tally.count += 1
                tally.request_bytes += size
                tally.retryable += retryable

    def _finished(self, connection_id: Address, request_id: int, reply_size: int, failed: bool, empty: bool,
                  documents: int = 0, reply: Mapping[str, object] | None = None) -> None:
        with self._lock:
            keys = self._keys.pop((connection_id, request_id), None)
            if keys is None:
                return
            name, target, many, ops = keys
            writes = _writes_in(name, reply) if reply is not None else {}
            # A client bulkWrite's writes count under each operation's own command:collection
            # (update:scheduled, update:roster...), as if sent apart; its results are no documents read.
            apart = _bulk_writes(ops, reply) if ops is not None and reply is not None else []
            if ops is not None:
                documents = 0
            for key, table in ((name, self.by_command), (target, self.by_target)):
                tally = table[key]
                tally.reply_bytes += reply_size
                tally.failed += failed
                tally.empty += empty
                tally.documents += documents
                tally.add_writes(writes if not (apart and table is self.by_target) else {}, many)
            for op_target, op_writes, op_many in apart:
                self.by_target.setdefault(op_target, Tally()).add_writes(op_writes, op_many)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._finished(event.connection_id, event.request_id, len(bson.encode(event.reply)), False,
                       _is_empty_read(event.reply), _documents_in(event.reply), event.reply)

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

    def write_if_read(self) -> None:
        with contextlib.suppress(OSError):  # the reader's directory went away: nobody to report to
            self.write()

    def loop(self) -> None:
        # The first write happens at once: a reader can tell from the file that
        # the SIGUSR2 handler is in place.
        while True:
            self.write_if_read()
            self.wake.wait(WRITE_INTERVAL_S)
            self.wake.clear()


def write_periodically(snapshot: Callable[[], dict[str, object]], path: str, name: str) -> None:
    """Write ``snapshot()`` as JSON to ``path`` from a thread called ``name``: at once, then every
    ``WRITE_INTERVAL_S``, on ``SIGUSR2`` (:func:`on_flush`) and at exit (the recruiter's round
    timings use it too: :mod:`recruiter.processes.round_stats`)."""
    writer = _StatsFile(snapshot, path)
    on_flush(writer.wake.set)
    threading.Thread(target=writer.loop, name=name, daemon=True).start()
    atexit.register(writer.write_if_read)


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
