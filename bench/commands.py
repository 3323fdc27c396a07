"""A PyMongo command listener that records what reaches the server (benchmarks, and tests that count round trips)."""

from __future__ import annotations

from typing import Any

from pymongo import monitoring


class Commands(monitoring.CommandListener):
    """Records the commands a client sends, so a test can count round trips."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any, dict[str, Any]]] = []
        self.documents = 0  # documents the server sent back in cursor batches

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.events.append((event.command_name, event.command.get(event.command_name), dict(event.command)))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        cursor = event.reply.get("cursor") or {}
        self.documents += len(cursor.get("firstBatch") or cursor.get("nextBatch") or [])

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def clear(self) -> None:
        self.events.clear()
        self.documents = 0

    def named(self, name: str, collection: str) -> list[dict[str, Any]]:
        """The ``name`` commands (e.g. ``insert``) sent to ``collection``."""
        return [cmd for n, coll, cmd in self.events if n == name and coll == collection]

    def updates(self, collection: str) -> list[dict[str, Any]]:
        """Every update statement sent to ``collection`` (``q``, ``u``, ``multi``), whether in an
        ``update`` command or as an operation of a client ``bulkWrite`` across collections."""
        out: list[dict[str, Any]] = []
        for name, coll, cmd in self.events:
            if name == "update" and coll == collection:
                out += [{"q": u.get("q"), "u": u.get("u"), "multi": bool(u.get("multi"))} for u in cmd["updates"]]
            elif name == "bulkWrite":
                names = [str(ns.get("ns", "")).split(".", 1)[-1] for ns in cmd.get("nsInfo", [])]
                out += [{"q": op.get("filter"), "u": op.get("updateMods"), "multi": bool(op.get("multi"))}
                        for op in cmd.get("ops", []) if "update" in op and names[op["update"]] == collection]
        return out
