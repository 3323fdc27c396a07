"""The roster reads and writes of hot entries and of a worker process's poller.

:func:`read_process_entries` is what a worker process reads to learn of its work
(:mod:`recruiter.processes.worker.poller`): every entry of the process in one
``find`` by ``_id``, with what a slot needs to start its job (the copy the
assignment carries) and the entry's ``hot`` mark (:mod:`recruiter.domain.hot`).
:func:`mark_hot` is the leader's write of those marks, :func:`unmark` takes them back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from recruiter.domain.hot import HOT
from recruiter.store.layout import AsyncColl, Document

POLL_FIELDS = {"available": 1, "assigned_to": 1, "job": 1, "session": 1, "stop_requested": 1, "ahead": 1,
               "started": 1, HOT: 1}


async def read_process_entries(roster: AsyncColl, entry_ids: Sequence[str]) -> list[Document]:
    """Every entry of one worker process, with what its slots act on (one read for all of them).
    An entry holds only its own key of ``assigned_to`` (recruiter.store.roster.assign_statement)."""
    return await roster.find({"_id": {"$in": list(entry_ids)}}, POLL_FIELDS).to_list()


async def mark_hot(roster: AsyncColl, marks: Mapping[object, datetime]) -> int:
    """Mark each entry hot until its date, if it is still available: one ``update_one`` per
    distinct date (a round writes one: now plus HOT_FOR). How many entries
    took their mark."""
    by_until: dict[datetime, list[object]] = {}
    for entry_id, until in marks.items():
        by_until.setdefault(until, []).append(entry_id)
    changed = 0
    for until, ids in by_until.items():
        result = await roster.update_many({"_id": {"$in": ids}, "available": True}, {"$set": {HOT: until}})
        changed += int(result.modified_count)
    return changed


async def unmark(roster: AsyncColl, ids: Sequence[object]) -> int:
    """Take back the hot marks of ``ids`` (their groups have work left: the leader serves them in
    its next rounds); how many entries held one."""
    result = await roster.update_many({"_id": {"$in": list(ids)}, HOT: {"$exists": True}}, {"$unset": {HOT: ""}})
    return int(result.modified_count)
