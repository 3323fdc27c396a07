"""The reads of ``recruiter jobs explain`` (:mod:`recruiter.admin.explain`): around one job.

Invariant: bounded, whatever the number of jobs. A worker entry and heartbeats are read by
``_id``; the roster entries taking a group are read from ``roster`` (one entry per worker
lane: as many as ``workers list`` shows); the ready jobs ahead of a job are counted on the
``candidates`` index, each range an equality prefix of it (``locked``, ``group``,
``tenant``, ``status``, ``priority``) and one range of ``scheduled_at`` or ``_id``, so the
server walks index keys, and never more than ``cap`` in all. No hint: the planner picks
``candidates`` for these ranges, and on the embedded server a hint made each count slower
(about 50 ms instead of 1 ms for 500 jobs); tests/integration/test_explain_reads.py checks the plans.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from recruiter.domain.naming import ANY_GROUP
from recruiter.domain.records import Query, Raw
from recruiter.store.heartbeats import beats_of
from recruiter.store.layout import AsyncColl, Document, SyncColl

ENTRY_FIELDS = {"work_on": 1, "session": 1, "available": 1, "process": 1, "last_seen_at": 1}

def read_entry_of(roster: SyncColl, worker_id: str) -> Document | None:
    """The roster entry ``worker_id`` (its groups, session, availability), or None."""
    return roster.find_one({"_id": {"$eq": worker_id}}, ENTRY_FIELDS)


def read_entries_taking(roster: SyncColl, group: str) -> list[Document]:
    """The roster entries whose groups name ``group`` or ``*``."""
    return list(roster.find({"work_on": {"$in": [group, ANY_GROUP]}}, ENTRY_FIELDS))


def read_beats_of(heartbeats: SyncColl, ids: Sequence[object],
                  entries: Mapping[object, Raw] | None = None) -> dict[object, Document]:
    """The heartbeats of the entries ``ids``, by entry id (one ``find``): their worker processes'
    documents, read per entry, the one with the entry's session where ``entries`` are given."""
    return beats_of(heartbeats, ids, entries)


def count_ahead(scheduled: SyncColl, ranges: Sequence[Query], cap: int) -> tuple[int, bool]:
    """How many jobs the disjoint ``ranges`` hold, counted on ``candidates`` up to ``cap`` in all
    (one count per range, stopping at the cap); and whether the cap was reached."""
    total = 0
    for where in ranges:
        left = cap - total
        if left <= 0:
            return total, True
        total += scheduled.count_documents(where, limit=left)
    return total, total >= cap


async def read_waiting_classes(scheduled: AsyncColl, groups: Sequence[str], limit: int) -> list[Document]:
    """The class names of up to ``limit`` unlocked jobs of ``groups`` (``*``: any group): their
    ``workable.class``, ``retry_policy`` and ``group`` only. One read on the ``candidates``
    prefix (``locked``, ``group``), whatever the queue holds: a worker's check at start."""
    where: Query = {"locked": False}
    if ANY_GROUP not in groups:
        where["group"] = {"$in": list(groups)}
    return await scheduled.find(where, {"workable.class": 1, "retry_policy": 1, "group": 1}).limit(limit).to_list()
