"""The write guard: every write command checked against MongoDB's storage rules.

The embedded server stores what MongoDB refuses (``$`` field names where MongoDB
forbids them, documents nested too deep), so a test suite run on it alone cannot
see that class of fault. With ``RECRUITER_STRICT_WRITES=1`` every client made by
:mod:`recruiter.store.connection` carries one process-wide :class:`StrictWrites`
command listener, which checks each ``insert``, ``update`` (upserts and bulk
writes included: the driver sends them as these commands), ``findAndModify`` and
``bulkWrite`` command before it leaves, with the pure rules of
:mod:`recruiter.domain.storage_rules` (where each rule is cited from MongoDB's
documentation: "Field Names with Periods and Dollar Signs", "Dollar-Prefixed
Field Names", "MongoDB Limits and Thresholds"; and MongoDB's own tests).

``RECRUITER_STRICT_WRITES=mongodb`` checks only what MongoDB 5.0 and later refuse
by themselves; ``1`` (``true``, ``yes``, ``on``, ``all``) also applies the
queue's rule for stored names (no ``$``-prefixed or dotted field name inside a
value an update writes; MongoDB 4.4 refuses those).

A listener cannot stop a command, and PyMongo ignores what a listener raises,
so a violation is made loud in three ways instead:

- it is kept in the guard (:meth:`StrictWrites.violations`), where a test
  fixture finds it and fails the test that caused it;
- it is logged as an error event, ``strict_writes.violation``, with the rule,
  the path in the command and the reason;
- with ``RECRUITER_STRICT_WRITES_FILE=<path>`` it is appended to that file as one
  JSON line, so a test can check what the processes it started sent.

The check costs one walk of each written value and one BSON encoding of each
inserted document; it is meant for tests and for trying a deployment, not for
every production process.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field

import structlog
from pymongo import monitoring

from recruiter.domain.storage_rules import Violation, command_violations

STRICT_ENVVAR = "RECRUITER_STRICT_WRITES"
FILE_ENVVAR = "RECRUITER_STRICT_WRITES_FILE"
WRITE_COMMANDS = frozenset({"insert", "update", "findAndModify", "findandmodify", "bulkWrite"})
_ON = frozenset({"1", "true", "yes", "on", "all"})
_MONGODB_ONLY = "mongodb"
KEPT = 1000  # violations kept in memory; the log and the file have them all

_log = structlog.get_logger("recruiter.strict")


def mode() -> str | None:
    """``"all"``, ``"mongodb"`` or None (off), from ``RECRUITER_STRICT_WRITES``."""
    value = os.environ.get(STRICT_ENVVAR, "").strip().lower()
    if value == _MONGODB_ONLY:
        return _MONGODB_ONLY
    return "all" if value in _ON else None


@dataclass
class StrictWrites(monitoring.CommandListener):
    """Checks write commands as they start; records what MongoDB would refuse."""

    mongodb_only: bool = False
    _found: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name not in WRITE_COMMANDS:
            return
        try:
            found = command_violations(event.command_name, event.command)
        except Exception as exc:  # noqa: BLE001 - a bug here must be as loud as a violation
            found = [Violation("guard", event.command_name, f"the guard failed: {type(exc).__name__}: {exc}")]
        for violation in found:
            if violation.refused_by_mongodb or not self.mongodb_only:
                self.record(violation, event.database_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def record(self, violation: Violation, database: str = "") -> None:
        line = violation.line()
        with self._lock:
            if len(self._found) < KEPT:
                self._found.append(line)
        _log.error("strict_writes.violation", rule=violation.rule, where=violation.where,
                   detail=violation.detail, database=database)
        path = os.environ.get(FILE_ENVVAR)
        if path:
            _append(path, {"pid": os.getpid(), "at": time.time(), "database": database, "rule": violation.rule,
                           "where": violation.where, "detail": violation.detail, "line": line})

    def violations(self) -> list[str]:
        """The violations recorded so far (one line each)."""
        with self._lock:
            return list(self._found)

    def take(self) -> list[str]:
        """The violations recorded so far, forgetting them."""
        with self._lock:
            found, self._found = self._found, []
            return found


def _append(path: str, record: dict[str, object]) -> None:
    try:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record, default=str) + "\n")
    except OSError as exc:
        _log.error("strict_writes.file_failed", path=path, error=str(exc))


_guard: StrictWrites | None = None
_guard_lock = threading.Lock()


def process_guard() -> StrictWrites:
    """The guard of this process, shared by all its clients (created on first use)."""
    global _guard
    with _guard_lock:
        if _guard is None:
            _guard = StrictWrites()
        _guard.mongodb_only = mode() == _MONGODB_ONLY
        return _guard


def listeners() -> list[monitoring.CommandListener]:
    """``[the guard]`` when ``RECRUITER_STRICT_WRITES`` switches it on, else none."""
    return [process_guard()] if mode() else []


def read_file(path: str) -> list[str]:
    """The violation lines a ``RECRUITER_STRICT_WRITES_FILE`` holds (none if it does not exist)."""
    try:
        with open(path, encoding="utf-8") as found:
            return [_line_of(text) for text in found if text.strip()]
    except FileNotFoundError:
        return []


def _line_of(text: str) -> str:
    try:
        record = json.loads(text)
    except ValueError:
        return text.strip()
    return f"pid {record.get('pid')}: {record.get('line')}" if isinstance(record, dict) else text.strip()
