"""Reading and steering the roster from the command line: ``recruiter workers list|stop``."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from recruiter.domain.liveness import is_fresh
from recruiter.store.layout import SyncCollections


def _ids_filter(ids: list[str]) -> dict[str, Any]:
    """Entries named by ``ids``; ``W`` also names the slots ``W-0``, ``W-1``… of ``--concurrency``."""
    return {"_id": {"$in": [re.compile(rf"^{re.escape(i)}(-\d+)?$") for i in ids]}}


def request_stop(db: Any, ids: list[str] | None) -> list[str]:
    """Ask the named workers (all, when ``ids`` is None) to stop gracefully; returns the entries asked.

    The request is a flag in the roster entry (``stop_requested``); each worker
    reads its entry when it polls, stops taking work, finishes what it runs
    within its grace period and leaves.
    """
    c = SyncCollections.of(db)
    filter_ = {} if ids is None else _ids_filter(ids)
    asked = [d["_id"] for d in c.roster.find(filter_, {"_id": 1})]
    if asked:
        c.roster.update_many({"_id": {"$in": asked}}, {"$set": {"stop_requested": True}})
    return sorted(asked)


def describe_workers(db: Any, now: datetime) -> list[dict[str, Any]]:
    """One row per roster entry, with its heartbeat (``heartbeats``, see :mod:`recruiter.liveness`)."""
    c = SyncCollections.of(db)
    rows = []
    beats = {b["_id"]: b for b in c.heartbeats.find({})}
    for w in c.roster.find({}, {"outcome": 0, "job": 0}).sort("_id", 1):
        beat = beats.get(w["_id"])
        if beat is None or beat.get("session") != w.get("session"):
            beat = {"last_seen_at": w.get("last_seen_at")}  # none of its own (an older version's entry)
        if w.get("stop_requested") or w.get("stopping"):
            state = "stopping"
        elif beat.get("working"):
            state = "working"
        elif not w.get("available"):
            state = "assigned"
        else:
            state = "idle"
        seen = beat.get("last_seen_at")
        rows.append({
            "id": w["_id"], "groups": list(w.get("work_on") or []), "state": state,
            "job": str(beat.get("working_on") or (w.get("assigned_to") or {}).get(w["_id"]) or ""),
            "pid": w.get("pid"), "hostname": w.get("hostname"),
            "last_seen_s": round((now - seen).total_seconds(), 1) if isinstance(seen, datetime) else None,
            "live": is_fresh(beat, w, now),
        })
    return rows


def render_workers(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no workers in the roster"
    header = ("id", "groups", "state", "job", "pid", "host", "last seen")
    table = [header] + [
        (r["id"], ",".join(r["groups"]), r["state"], r["job"], str(r["pid"]), str(r["hostname"]),
         (f"{r['last_seen_s']}s ago" if r["last_seen_s"] is not None else "never")
         + ("" if r["live"] else " (missed heartbeats: given no work)"))
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table)
