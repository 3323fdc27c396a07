"""Choosing which ready job goes to which free worker: pure, no I/O.

This is the only place the assignment policy lives. The recruiter fetches
bounded candidate lists (see :func:`candidate_queries`) and calls
:func:`select`; tests call :func:`select` on plain data.

The policy here is FIFO by ``scheduled_at`` within the groups a worker takes.
Workers bound to specific groups choose first, so a ``*`` worker does not take
the only job a group-bound worker could run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

ANY_GROUP = "*"


@dataclass(frozen=True)
class FreeWorker:
    id: str
    groups: tuple[str, ...]

    @property
    def takes_any(self) -> bool:
        return ANY_GROUP in self.groups

    def takes(self, group: str) -> bool:
        return self.takes_any or group in self.groups


@dataclass(frozen=True)
class Candidate:
    id: Any
    group: str
    scheduled_at: datetime


@dataclass(frozen=True)
class Assignment:
    worker_id: str
    job_id: Any


def select(workers: Sequence[FreeWorker], candidates: Iterable[Candidate]) -> list[Assignment]:
    """Give each worker the oldest ready job of its groups, each job at most once."""
    ordered = sorted({c.id: c for c in candidates}.values(), key=lambda c: (c.scheduled_at, str(c.id)))
    taken: set[Any] = set()
    assignments: list[Assignment] = []
    for worker in sorted(workers, key=lambda w: w.takes_any):  # stable: bound workers first
        for candidate in ordered:
            if candidate.id not in taken and worker.takes(candidate.group):
                taken.add(candidate.id)
                assignments.append(Assignment(worker.id, candidate.id))
                break
    return assignments


def candidate_queries(workers: Sequence[FreeWorker], now: datetime) -> list[tuple[dict[str, Any], int]]:
    """(filter, limit) pairs whose results are enough for :func:`select`.

    One query per named group plus one for ``*`` workers, each limited to the
    number of free workers, so a round reads at most ``groups x workers``
    documents whatever the backlog. Each filter is an equality prefix plus a
    range on ``scheduled_at`` and is sorted by ``scheduled_at``, which the
    ``candidates_*`` indexes serve in order.
    """
    limit = len(workers)
    if not limit:
        return []
    ready = {"locked": False, "scheduled_at": {"$lte": now}}
    queries: list[tuple[dict[str, Any], int]] = []
    if any(w.takes_any for w in workers):
        queries.append((dict(ready), limit))
    named = sorted({g for w in workers for g in w.groups if g != ANY_GROUP})
    queries.extend(({**ready, "group": g}, limit) for g in named)
    return queries
