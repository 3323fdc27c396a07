"""Cancelled jobs that still run: the roster entries that hold them, and the end their worker reports.

A cancel of a job a worker has (:mod:`recruiter.domain.cancel`) archives it at once and leaves
``halting`` (the job, its group and tenant) in the worker's roster entry. Flow control counts
those entries as running jobs (:func:`read_halting_in`, beside the locked jobs of ``scheduled``),
so a ``max_running`` slot is not handed out again while a thread that cannot be stopped runs on.
The worker's "available again" write (:func:`recruiter.store.roster.release_entry`), made only
once the job has stopped, removes ``halting``; the worker then records when it ended in the
archived job (:func:`halt_ended`). The cleaner removing a dead worker's entry removes it too, and
records that the job ended with its worker (:func:`worker_gone`).

Invariant: a cancel removes a job from ``scheduled`` and puts ``halting`` in its worker's entry in
one transaction, and a round reads ``scheduled`` before the roster
(``recruiter.processes.reading.CandidateReader._running``), so a cancel between its two reads
counts the job twice (a cap held one round too long), never not at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from recruiter.domain.cancel import HALT, HALTING
from recruiter.domain.records import Query, Raw
from recruiter.store.layout import AsyncColl, SyncColl, SyncCollections
from recruiter.store.scheduled import read_locked_in_sync

_WHERE = {"_id": 0, f"{HALTING}.group": 1, f"{HALTING}.tenant": 1}


def _halting_in(groups: Sequence[str]) -> Query:
    """Entries halting a job of ``groups``: not available again and given no new job since (an
    entry released by an older worker, which does not remove ``halting``, is either)."""
    return {f"{HALTING}.group": {"$in": list(groups)}, "available": {"$ne": True}, "assigned_to": {"$exists": False}}


def _names(docs: Sequence[Raw]) -> list[Raw]:
    """The ``halting`` parts as read (untrusted: flow control counts only names)."""
    return [h for d in docs if isinstance(h := d.get(HALTING), dict)]


async def read_halting_in(roster: AsyncColl, groups: Sequence[str]) -> list[Raw]:
    """The group and tenant of every cancelled job of ``groups`` a worker has not stopped yet
    (one read on the sparse ``halting`` index: it costs what is halting, not the roster's size)."""
    return _names(await roster.find(_halting_in(groups), _WHERE).to_list())


def read_halting_in_sync(roster: SyncColl, groups: Sequence[str]) -> list[Raw]:
    """:func:`read_halting_in` with a synchronous client (the CLI's views)."""
    return _names(list(roster.find(_halting_in(groups), _WHERE)))


async def halt_ended(archived: AsyncColl, job_id: object, worker: str, session: object, now: datetime) -> bool:
    """Record in the archived job that the worker ``worker`` (registration ``session``) has stopped
    it; only the first report counts, and only that registration's. Whether it was recorded."""
    result = await archived.update_one(
        {"_id": job_id, f"{HALT}.worker": worker, f"{HALT}.session": session, f"{HALT}.ended_at": None},
        {"$set": {f"{HALT}.ended_at": now}})
    return result.modified_count > 0


def read_running_in_sync(c: SyncCollections, groups: Sequence[str]) -> list[Raw]:
    """The group and tenant of every job of ``groups`` that ``max_running`` counts, as a round
    counts them: locked in ``scheduled``, then cancelled and not stopped yet (the operator's views)."""
    if not groups:
        return []
    return [*read_locked_in_sync(c.scheduled, groups), *read_halting_in_sync(c.roster, groups)]


async def worker_gone(archived: AsyncColl, entry: Raw, now: datetime) -> bool:
    """The cleaner removed ``entry`` as dead: a cancelled job it was still halting ended with its
    process; recorded as :func:`halt_ended` does, with ``worker_gone``. Whether it was recorded."""
    held = entry.get(HALTING)
    job_id = held.get("job") if isinstance(held, dict) else None
    if job_id is None:
        return False
    # $eq: values read from the entry (untrusted), one shaped like an operator is compared, not
    # read as one (it failed the cleaner's pass: "unknown operator").
    result = await archived.update_one(
        {"_id": {"$eq": job_id}, f"{HALT}.worker": {"$eq": entry.get("_id")},
         f"{HALT}.session": {"$eq": entry.get("session")}, f"{HALT}.ended_at": None},
        {"$set": {f"{HALT}.ended_at": now, f"{HALT}.worker_gone": True}})
    return result.modified_count > 0
