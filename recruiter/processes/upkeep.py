"""The upkeep both leaders do: take back stranded jobs, quarantine malformed ones.

The decisions are pure (:mod:`recruiter.domain.liveness`,
:mod:`recruiter.domain.quarantine`); this module reads and writes what they
decide, through :mod:`recruiter.store`. The recruiter runs it in its rounds, the
cleaner in its passes, whichever meets the job first.

Invariant: every write here takes the :class:`~recruiter.store.layout.Collections`
of the caller's fenced transaction, and is conditional on what was read (the
entry's session and assignment, the job's lock token), so it is safe to repeat
and a stale leader's writes commit nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from bson import ObjectId

from recruiter.domain.documents import Malformed, check_job
from recruiter.domain.lanes import held_ahead
from recruiter.domain.liveness import Rescue, Stranded, rescue_update, shown_started
from recruiter.domain.outcome import MALFORMED
from recruiter.domain.quarantine import SWEEP_LIMIT, quarantine_copies
from recruiter.domain.records import Raw
from recruiter.store import archived, roster, scheduled
from recruiter.store.dependencies import release_dependents
from recruiter.store.layout import AsyncColl, Collections


async def find_stranded(c: Collections, stale: Iterable[Raw]) -> list[Stranded]:
    """The stranded jobs of the entries whose heartbeat documents ``stale`` missed their beats.

    Reads only when some heartbeat is stale: the entries that hold an
    assignment and no outcome, then their jobs. An ``at_most_once`` job is left
    to the cleaner's ``--considered-dead-after`` (it may have started), unless it
    was held ahead and never started (:func:`recruiter.domain.lanes.held_ahead`).
    """
    beats: dict[object, list[Raw]] = {}
    for b in stale:  # an entry id may be named by several (a process restarted with the same id)
        beats.setdefault(b["_id"], []).append(b)
    if not beats:
        return []
    held: dict[object, tuple[Raw, Raw]] = {}
    for e in await roster.read_assigned_entries(c.roster, list(beats)):
        assigned = e.get("assigned_to")
        job_id = assigned.get(e["_id"]) if isinstance(assigned, dict) else None
        beat = next((b for b in beats[e["_id"]] if b.get("session") == e.get("session")), None)
        if job_id is not None and beat is not None:
            held[job_id] = (e, beat)
    if not held:
        return []
    jobs = await scheduled.read_locked(c.scheduled, list(held))
    return [Stranded(held[j["_id"]][0], j, held[j["_id"]][1]) for j in jobs
            if j.get("locked_by") == held[j["_id"]][0]["_id"]
            and (not j.get("at_most_once") or held_ahead(j, held[j["_id"]][0]))
            and not shown_started(j, held[j["_id"]][1])]


async def take_back(c: Collections, stranded: list[Stranded], now: datetime) -> list[tuple[Stranded, Rescue]]:
    """Delete each stranded job's entry (fenced) and return the job; what was done.

    Meant to run inside a fenced transaction (the recruiter's round or the
    cleaner's pass). An entry that changed since it was read (an outcome
    written, the assignment gone, a new session) is left alone.
    """
    done: list[tuple[Stranded, Rescue]] = []
    for s in stranded:
        if not await roster.delete_stranded_entry(c.roster, s.entry, s.job["_id"]):
            continue
        kind, change = rescue_update(s.job, s.entry, s.beat, now, s.reason)
        if await scheduled.apply_change(c.scheduled, change):
            done.append((s, kind))
    return done


async def sweep(jobs: AsyncColl, limit: int = SWEEP_LIMIT) -> list[Malformed]:
    """Read up to ``limit`` jobs of ``scheduled`` that no candidate read can meet, and return the
    malformed ones.

    One query outside any transaction. On MongoDB it is served by scanning the
    collection (type tests are not index bounds), so the recruiter runs it
    rarely, in a task of its own (see ``RecruiterConfig.sweep_interval_s``).
    """
    return [m for doc in await scheduled.read_unreachable(jobs, limit) if (m := check_job(doc)) is not None]


async def quarantine(c: Collections, found: list[Malformed], now: datetime) -> list[Malformed]:
    """Archive ``found`` as malformed and delete them from ``scheduled``; returns those archived now.

    Runs on ``c`` (normally the collections of a fenced transaction). The caller logs
    ``job.quarantined`` once the transaction has committed
    (:func:`recruiter.domain.quarantine.log_quarantined`).
    """
    copies = quarantine_copies(found, now)
    if not copies:
        return []
    written = await archived.archive_copies(c.archived, [(m.id, copy) for m, copy in copies])
    await scheduled.delete_by_ids(c.scheduled, [m.id for m, _ in copies])
    # Only copies written now: one quarantined by an earlier pass is not reported again.
    now_archived = [copies[i][0] for i in written]
    # In the same transaction; only an ObjectId can be waited for (a hostile _id may be a document).
    await release_dependents(c, {m.id: MALFORMED for m in now_archived if isinstance(m.id, ObjectId)}, now)
    return now_archived
