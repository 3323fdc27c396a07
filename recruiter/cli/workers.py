"""How ``recruiter workers list`` prints the roster the read model gives (:mod:`recruiter.admin.workers`).

Invariant: rendering reads nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict

from recruiter.admin.workers import ProgressView, workers
from recruiter.domain.placement import is_worker_group
from recruiter.store import SyncDb


class WorkerRow(TypedDict):
    """One line of ``recruiter workers list`` (and one object of its ``--json``)."""

    id: str
    groups: list[str]
    state: str
    job: str
    pid: object
    hostname: object
    last_seen_s: float | None
    live: bool
    progress: ProgressRow | None
    problem: str | None  # what is wrong with a malformed entry (state ``malformed``)


class ProgressRow(TypedDict):
    """What the running job last said of its progress (``ctx.progress``)."""

    value: float | None
    message: str | None
    at: str | None
    text: str


def describe_workers(db: SyncDb, now: datetime, worker_groups: bool = False) -> list[WorkerRow]:
    """One row per roster entry (the read model's :func:`recruiter.admin.workers.workers`), as JSON prints it;
    its ``@worker:ID`` group (the jobs aimed at it) only if ``worker_groups``."""
    return [WorkerRow(id=w.id, groups=[g for g in w.groups if worker_groups or not is_worker_group(g)],
                      state=w.state, job=w.job, pid=w.pid, hostname=w.hostname,
                      last_seen_s=w.last_seen_s, live=w.live, progress=_progress(w.progress), problem=w.problem)
            for w in workers(db, now)]


def _progress(p: ProgressView | None) -> ProgressRow | None:
    if p is None:
        return None
    return ProgressRow(value=p.value, message=p.message, at=p.at.isoformat() if p.at else None, text=p.text)


def render_workers(rows: list[WorkerRow]) -> str:
    """The well-formed entries as a table, then one line per malformed entry (its reason)."""
    if not rows:
        return "no workers in the roster"
    good = [r for r in rows if r["problem"] is None]
    header = ("id", "groups", "state", "job", "progress", "pid", "host", "last seen")
    table = [header] + [
        (r["id"], ",".join(r["groups"]), r["state"], r["job"], r["progress"]["text"] if r["progress"] else "",
         str(r["pid"]), str(r["hostname"]),
         (f"{r['last_seen_s']}s ago" if r["last_seen_s"] is not None else "never")
         + ("" if r["live"] else " (missed heartbeats: given no work)"))
        for r in good
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table] \
        if good else []
    lines += [f"malformed roster entry {r['id']}: {r['problem']} (given no work)" for r in rows if r["problem"]]
    return "\n".join(lines)
