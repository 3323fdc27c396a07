"""Reading and steering the roster from the command line: ``recruiter workers list|stop``."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from recruiter.store import Collections


def _ids_filter(ids: list[str]) -> dict[str, Any]:
    """Entries named by ``ids``; ``W`` also names the slots ``W-0``, ``W-1``… of ``--concurrency``."""
    return {"_id": {"$in": [re.compile(rf"^{re.escape(i)}(-\d+)?$") for i in ids]}}


def request_stop(db: Any, ids: list[str] | None) -> list[str]:
    """Ask the named workers (all, when ``ids`` is None) to stop gracefully; returns the entries asked.

    The request is a flag in the roster entry (``stop_requested``); each worker
    reads its entry when it polls, stops taking work, finishes what it runs
    within its grace period and leaves.
    """
    c = Collections.of(db)
    filter_ = {} if ids is None else _ids_filter(ids)
    asked = [d["_id"] for d in c.roster.find(filter_, {"_id": 1})]
    if asked:
        c.roster.update_many({"_id": {"$in": asked}}, {"$set": {"stop_requested": True}})
    return sorted(asked)


def describe_workers(db: Any, now: datetime) -> list[dict[str, Any]]:
    rows = []
    for w in Collections.of(db).roster.find({}, {"outcome": 0}).sort("_id", 1):
        if w.get("stop_requested") or w.get("stopping"):
            state = "stopping"
        elif w.get("working"):
            state = "working"
        elif not w.get("available"):
            state = "assigned"
        else:
            state = "idle"
        seen = w.get("last_seen_at")
        rows.append({
            "id": w["_id"], "groups": list(w.get("work_on") or []), "state": state,
            "job": str(w.get("working_on") or (w.get("assigned_to") or {}).get(w["_id"]) or ""),
            "pid": w.get("pid"), "hostname": w.get("hostname"),
            "last_seen_s": round((now - seen).total_seconds(), 1) if seen else None,
        })
    return rows


def render_workers(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no workers in the roster"
    header = ("id", "groups", "state", "job", "pid", "host", "last seen")
    table = [header] + [
        (r["id"], ",".join(r["groups"]), r["state"], r["job"], str(r["pid"]), str(r["hostname"]),
         f"{r['last_seen_s']}s ago" if r["last_seen_s"] is not None else "never")
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table)
