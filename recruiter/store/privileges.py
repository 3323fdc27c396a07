"""Which (collection, privilege action) pairs a process uses: the ground truth of the security recipe.

With ``RECRUITER_RECORD_PRIVILEGES_FILE`` set, every client the store builds carries a
command listener that maps each command it sends to MongoDB's privilege actions on a
resource (``find``, ``insert``, ``update``, ``remove``, ``changeStream``,
``createIndex``, ``listIndexes``, ``collMod``, ``createCollection``, ...) and appends
``{"db", "collection", "action"}`` JSON lines to that file, each pair once per process.
``tests/processes/test_roles.py`` runs every process kind and the producer API with it
and fails when a role of docs/operations/security.md does not grant a pair one used.
An empty ``collection`` is the database itself (a change stream on the database).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from pymongo import monitoring

FILE_ENVVAR = "RECRUITER_RECORD_PRIVILEGES_FILE"

# Commands that need no privilege on a collection (sessions, transactions, handshakes).
FREE = {"commitTransaction", "abortTransaction", "endSessions", "hello", "isMaster", "ismaster", "ping",
        "buildInfo", "getMore", "killCursors", "saslStart", "saslContinue", "getLastError", "serverStatus"}
SIMPLE = {"find": "find", "count": "find", "distinct": "find", "insert": "insert", "delete": "remove",
          "createIndexes": "createIndex", "listIndexes": "listIndexes", "collMod": "collMod",
          "create": "createCollection", "drop": "dropCollection", "dropIndexes": "dropIndex"}


def actions(name: str, command: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """The (collection, action) pairs ``command`` needs (pure)."""
    target = command.get(name)
    coll = target if isinstance(target, str) else ""
    if name in FREE:
        return
    if name in SIMPLE:
        yield coll, SIMPLE[name]
    elif name == "update":
        yield coll, "update"
        if any(isinstance(u, dict) and u.get("upsert") for u in command.get("updates") or []):
            yield coll, "insert"
    elif name == "findAndModify":
        yield coll, "find"
        yield coll, "remove" if command.get("remove") else "update"
        if command.get("upsert"):
            yield coll, "insert"
    elif name == "aggregate":
        stages = command.get("pipeline") or []
        first = stages[0] if stages and isinstance(stages[0], dict) else {}
        yield coll, "changeStream" if "$changeStream" in first else "find"
        if "$changeStream" in first:
            yield coll, "find"
    elif name == "listCollections":
        yield from _listing(command)
    else:
        yield coll, name  # an unknown command: named as is, so the recipe test shows it


def _listing(command: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Names only, of the collections the user may use, needs no privilege (the start-up check of
    recruiter.store.names lists them so); any other listing needs ``listCollections``."""
    if not (command.get("nameOnly") and command.get("authorizedCollections")):
        yield "", "listCollections"


class Recorder(monitoring.CommandListener):
    """Appends each new (db, collection, action) this process uses to ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.seen: set[tuple[str, str, str]] = set()
        self.lock = threading.Lock()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        new = [(event.database_name, coll, action) for coll, action in actions(event.command_name, event.command)]
        with self.lock:
            fresh = [p for p in new if p not in self.seen]
            self.seen.update(fresh)
            if fresh:
                with open(self.path, "a") as out:
                    for db, coll, action in fresh:
                        out.write(json.dumps({"db": db, "collection": coll, "action": action}) + "\n")

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


_recorders: dict[str, Recorder] = {}


def listeners() -> list[monitoring.CommandListener]:
    """The recorder of this process, when ``RECRUITER_RECORD_PRIVILEGES_FILE`` asks for one."""
    path = os.environ.get(FILE_ENVVAR)
    if not path:
        return []
    return [_recorders.setdefault(path, Recorder(path))]
