"""The cleaner process: removes dead workers, unlocks their jobs, prunes history.

A worker is dead when the ``last_seen_at`` of its heartbeat
(:mod:`recruiter.domain.liveness`: its process's document, which names it with its
session) is older than ``considered_dead_after``; a process that dies makes all its slots
dead at once. Its heartbeat (its slot in the process's document, the document with its
last slot) and roster entry are deleted first (so the worker, if it was only
paused, is fenced: its outcome write finds no entry), then the jobs it held
are returned or unlocked as crashed attempts, as its heartbeats tell
(:func:`recruiter.domain.liveness.rescue_update`). An entry that still holds an
unapplied outcome is left for the recruiter to apply first. Jobs locked by a
worker that no longer exists (a cleaner that died between the two steps) are
swept the same way. Before that, as a recruiter round does, a pass takes back
at once the jobs assigned to entries that missed their heartbeats before
showing they started them. Roster entries that have no heartbeat document
(an older version's, or a registration cut short) are judged by their own
``last_seen_at`` or, without one, their ``created_at``.

Each pass runs in a transaction fenced by the cleaner's lease
(:class:`recruiter.processes.leadership.Leadership`, shared with the recruiter,
which also paces the passes and handles their errors): a cleaner that lost its lease
writes nothing, and logs nothing of what it would have done: the events a pass's
writes make true (``worker.dead``, ``job.crashed``, ``archive.reconciled``,
``archived.pruned``) are logged once it has committed
(:class:`recruiter.processes.logs.AfterCommit`), each for a write that took effect.

Jobs aimed at one worker (:mod:`recruiter.domain.placement`) are archived by a
pass: ``worker-gone`` once it removed the last slot of their worker as dead,
``worker-deadline`` past their deadline; each only if still unlocked as read.

Before a job is unlocked as crashed, the pass checks that it was not archived
already: a job whose archived copy exists but which is still in ``scheduled``
(an archive cut between its two writes) is deleted from ``scheduled``,
finishing the archive instead of running the job again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import structlog
from bson import ObjectId

from recruiter.domain.clock import Clock
from recruiter.domain.documents import Malformed, check_job, outcome_problem
from recruiter.domain.events import JobArchived, WorkerGone
from recruiter.domain.liveness import FROM_PROCESS, is_dead, missed_beats, pick_beats, rescue_update
from recruiter.domain.outcome import archived_document, jobs_referenced_by
from recruiter.domain.placement import (
    WORKER_DEADLINE,
    WORKER_GONE,
    deadline_of,
    deadline_reason,
    gone_reason,
    is_worker_group,
    unplaced_outcome,
    worker_of,
)
from recruiter.domain.quarantine import log_quarantined
from recruiter.domain.records import Raw
from recruiter.domain.workflow import workflow_name
from recruiter.processes.dependencies import decided_event
from recruiter.processes.events import Bus
from recruiter.processes.leadership import Fault, LeaderProcess, Leadership, Pace, leader_owner, no_fault
from recruiter.processes.logs import AfterCommit
from recruiter.processes.upkeep import find_stranded, quarantine, take_back
from recruiter.store import archived, halting, heartbeats, roster, scheduled
from recruiter.store.dependencies import release_dependents
from recruiter.store.layout import AsyncDb, Collections, Document

log = structlog.get_logger("recruiter.cleaner")

PRUNE_BATCH = 1000
UNPLACED_BATCH = 100  # jobs aimed at a worker archived per pass and reason (the rest next pass)


@dataclass(frozen=True)
class CleanerConfig:
    considered_dead_after_s: float = 30.0
    clean_after_s: float = 7 * 24 * 3600.0
    interval_s: float = 2.0
    lease_ttl_s: float = 10.0

    def __post_init__(self) -> None:
        if self.considered_dead_after_s <= 0:
            raise ValueError("considered-dead-after must be positive")
        if self.clean_after_s <= 0:
            raise ValueError("clean-after must be positive")
        if self.interval_s <= 0 or self.lease_ttl_s <= 0:
            raise ValueError("interval and lease ttl must be positive")


@dataclass
class CleanReport:
    dead_workers: int = 0
    unlocked_jobs: int = 0
    pruned: int = 0
    unplaced: int = 0  # jobs aimed at a worker archived (worker-gone, worker-deadline)
    quarantined: list[Malformed] = field(default_factory=list)


@dataclass(frozen=True)
class Pass:
    """One pass's values: the collections of its transaction, its time, its cutoff, its report."""

    c: Collections
    now: datetime
    cutoff: datetime
    report: CleanReport
    gone_groups: set[str] = field(default_factory=set)  # reserved groups of the workers removed


class CleanerProcess(LeaderProcess):

    def __init__(self, db: AsyncDb, clock: Clock, config: CleanerConfig, *, owner: str | None = None,
                 bus: Bus | None = None) -> None:
        self.c = Collections.of(db)  # outside any transaction (tests drive passes on it)
        self.clock = clock
        self.config = config
        self.owner = owner or leader_owner()
        self.bus = bus or Bus.logging()
        self.leadership = Leadership(db, "cleaner", self.owner, clock, config.lease_ttl_s, bus=self.bus)
        self._next_orphan_scan: datetime | None = None
        self.events = AfterCommit(log, self.bus)
        self.fault: Fault = no_fault  # tests inject one that raises at a named point

    async def run(self) -> None:
        """Wait for the lease, run a pass every ``interval`` while holding it
        (:class:`recruiter.processes.leadership.Leadership`)."""
        self.leadership.task = asyncio.current_task()
        interval = min(self.config.interval_s, self.config.lease_ttl_s / 3)

        async def one_pass() -> bool:
            await self.fenced_clean()
            return False  # the next pass after the interval

        async def lead() -> None:
            await self.leadership.units(one_pass, Pace(interval, interval), name="clean")

        await self.leadership.run(lead, standby_poll_s=interval)

    async def fenced_clean(self) -> CleanReport:
        """:meth:`clean` in a transaction fenced by the lease; :class:`LostLease` if it is not ours."""
        with self.events.held():
            async with self.leadership.fenced() as inside:
                report = await self.clean(inside)
                self.fault("clean.before_commit")
        log_quarantined(log, report.quarantined)  # committed
        return report

    async def clean(self, c: Collections) -> CleanReport:
        """One pass on ``c`` (the collections of its transaction, or, in tests, plain ones)."""
        now = self.clock.now()
        p = Pass(c, now, now - timedelta(seconds=self.config.considered_dead_after_s), CleanReport())
        stale = await heartbeats.read_stale(c.heartbeats, now, p.cutoff)
        dead_beats = [b for b in stale if is_dead(b, now, self.config.considered_dead_after_s)]
        dead_ids = {b["_id"] for b in dead_beats}
        silent = [b for b in stale if b["_id"] not in dead_ids and missed_beats(b, now)]
        taken = await take_back(c, await find_stranded(c, silent), now)
        for s, kind in taken:
            self.events.warning(f"job.{kind}", job_id=str(s.job["_id"]), worker_id=s.entry["_id"],
                                attempt=s.job.get("attempts"), group=s.job.get("group"), detail=s.reason)
        p.report.unlocked_jobs += len(taken)
        entries = {e["_id"]: e for e in await roster.read_entries(c.roster, list(dead_ids))}
        dead = await self._own_beats(c, dead_beats, entries)
        entries = {i: e for i, e in entries.items() if i in dead}
        entries.update(await self._without_heartbeat(c, p.cutoff))
        for worker_id in {*dead, *entries}:
            if not self.lease.held:
                return p.report
            unlocked = await self.remove_dead_worker(p, entries.get(worker_id), dead.get(worker_id))
            if unlocked is not None:
                p.report.dead_workers += 1
                p.report.unlocked_jobs += unlocked
        p.report.unlocked_jobs += await self.sweep_orphans(p)
        p.report.unplaced = await self.archive_unplaced(p)
        p.report.pruned = await self.prune(c, now)
        return p.report

    async def _own_beats(self, c: Collections, beats: list[Document],
                         entries: dict[object, Document]) -> dict[object, Document]:
        """The dead ``beats`` by entry id, the entry's own (same session) where several name it. A dead
        process's beat of an entry that another registration has taken since (a process restarted
        with the same id) is not that entry's: only the beat goes, the entry stays."""
        own = []
        for b in beats:
            entry = entries.get(b["_id"])
            if FROM_PROCESS in b and entry is not None and b.get("session") != entry.get("session"):
                await heartbeats.delete_beat(c.heartbeats, b)
            else:
                own.append(b)
        return pick_beats(own, entries)

    async def _without_heartbeat(self, c: Collections, cutoff: datetime) -> dict[object, Document]:
        """Roster entries not created since ``cutoff`` that have no (readable) heartbeat document.

        Reads every such entry's id, so it runs at most once per ``considered_dead_after``.
        """
        now = self.clock.now()
        if self._next_orphan_scan is not None and now < self._next_orphan_scan:
            return {}
        self._next_orphan_scan = now + timedelta(seconds=self.config.considered_dead_after_s)
        ids = await roster.ids_created_before(c.roster, cutoff)
        if not ids:
            return {}
        # A heartbeat document without a date in last_seen_at counts as none: no query finds it stale.
        # Only a string names a beat (liveness.expand_beats): an entry with any other _id (a hand edit,
        # another language; a document or an array is not even hashable) has none, and goes as such.
        named = [i for i in ids if isinstance(i, str)]
        beating = await heartbeats.read_dated(c.heartbeats, named) if named else set()
        lone = [i for i in ids if not isinstance(i, str) or i not in beating]
        return {entry_key(e["_id"]): e for e in await roster.read_entries(c.roster, lone)} if lone else {}

    async def remove_dead_worker(self, p: Pass, worker: Document | None, beat: Document | None) -> int | None:
        """Delete a dead worker's heartbeat and entry and unlock its jobs; None if the entry was not deleted."""
        outcome = (worker or {}).get("outcome")
        if worker is not None and outcome and outcome_problem(outcome) is None:
            log.info("worker.dead_with_outcome", worker_id=worker["_id"],
                     detail="waiting for the recruiter to apply its last outcome")
            return None
        if beat is not None and not await heartbeats.delete_beat(p.c.heartbeats, beat):
            return None  # it came back to life, or someone else handled it
        if beat is not None and is_worker_group(beat.get("worker_group")):
            p.gone_groups.add(beat["worker_group"])  # removed as dead, here or by an earlier take-back
        if worker is None:
            return None  # a heartbeat left by an entry already removed
        if beat is None:  # an unreadable heartbeat document goes with its entry
            await heartbeats.delete_undated(p.c.heartbeats, worker["_id"])
        # A malformed outcome is never applied: the entry goes, its job is unlocked below.
        if not await roster.delete_dead_entry(p.c.roster, worker, by_last_seen=beat is None
                                              and "last_seen_at" in worker):
            return None
        await halting.worker_gone(p.c.archived, worker, p.now)  # a cancelled job it ran ended with it
        if beat is not None and beat.get("session") != worker.get("session"):
            beat = None  # the heartbeat of another registration with this id
        work_on = worker.get("work_on")
        if isinstance(work_on, list):  # an entry without a heartbeat document says it here
            p.gone_groups.update(g for g in work_on if is_worker_group(g))
        seen_text = _when((beat or worker).get("last_seen_at"))
        self.events.emit(WorkerGone(str(worker["_id"])[:100], "dead", last_seen=seen_text, pid=worker.get("pid"),
                                    hostname=worker.get("hostname")))  # logged as worker.dead
        # Only the jobs the entry referred to: a job locked for a new entry with the same
        # id (a restarted worker) is not this dead worker's. Other locks go to the orphan sweep.
        held = list(jobs_referenced_by(worker))
        jobs = await scheduled.read_held_by(p.c.scheduled, held, worker["_id"]) if held else []
        reason = (f"worker {worker['_id']} (pid {worker.get('pid')} on {worker.get('hostname')}) "
                  f"stopped heartbeating; last seen {seen_text}")
        return await self._unlock(p, jobs, worker, beat, reason)

    async def archive_unplaced(self, p: Pass) -> int:
        """Archive the waiting jobs aimed at a worker that will not run them: ``worker-gone`` when
        this pass removed the last roster entry of that worker as dead, ``worker-deadline`` past
        their deadline (:mod:`recruiter.domain.placement`). Each is deleted from ``scheduled`` only
        if still unlocked as read, then archived."""
        archived_count = 0
        for group in sorted(p.gone_groups):
            if await roster.any_takes_group(p.c.roster, group):
                continue  # another slot of that worker is still registered
            jobs = await scheduled.read_waiting_in_group(p.c.scheduled, group, UNPLACED_BATCH)
            archived_count += await self._archive(p, jobs, WORKER_GONE, lambda j: gone_reason(worker_of(j)))
        late = await scheduled.read_past_worker_deadline(p.c.scheduled, p.now, UNPLACED_BATCH)
        archived_count += await self._archive(p, late, WORKER_DEADLINE,
                                              lambda j: deadline_reason(worker_of(j), deadline_of(j)))
        return archived_count

    async def _archive(self, p: Pass, jobs: list[Document], why: str, reason: Callable[[Document], str]) -> int:
        docs = []
        for job in jobs:
            if await scheduled.delete_unlocked_as_read(p.c.scheduled, job):
                docs.append(archived_document(job, unplaced_outcome(why, reason(job)), p.now))
                self.events.emit(JobArchived(job.get("_id"), why, job.get("attempts"), job.get("group"),
                                             by="cleaner", reason=reason(job),
                                             workflow=workflow_name(job.get("workflow"))))  # logged as job.archived
        if docs:
            await archived.archive(p.c.archived, docs)
            for d in await release_dependents(p.c, {d["_id"]: why for d in docs if isinstance(d["_id"], ObjectId)},
                                              p.now):
                self.events.emit(decided_event(d, "cleaner"))  # a dependent its end decided otherwise than run
        return len(docs)

    async def sweep_orphans(self, p: Pass) -> int:
        """Unlock jobs locked before the pass's cutoff that no roster entry holds.

        Either the worker is gone (a cleaner died between deleting it and
        unlocking its jobs), or its entry no longer refers to the job (a write
        the server lost). The unlock is conditional on the lock token, so a job
        the recruiter archives or reschedules meanwhile is left alone.
        """
        locked = await self._well_formed(p, await scheduled.read_locked_before(p.c.scheduled, p.cutoff))
        if not locked:
            return 0
        entries = {w["_id"]: w for w in await roster.read_references(
            p.c.roster, list({j.get("locked_by") for j in locked}))}
        gone = [j for j in locked if j.get("locked_by") not in entries]
        forgotten = [j for j in locked if j.get("locked_by") in entries
                     and j["_id"] not in jobs_referenced_by(entries[j["locked_by"]])]
        return (await self._unlock(p, gone, None, None, "its worker left the roster without finishing it")
                + await self._unlock(p, forgotten, None, None, "its worker no longer refers to it"))

    async def _well_formed(self, p: Pass, jobs: list[Document]) -> list[Document]:
        """The well-formed ``jobs``; the others are quarantined (:mod:`recruiter.domain.quarantine`)."""
        malformed = [m for j in jobs if (m := check_job(j)) is not None]
        if not malformed:
            return jobs
        p.report.quarantined += await quarantine(p.c, malformed, self.clock.now())
        bad = [m.document for m in malformed]
        return [j for j in jobs if not any(j is d for d in bad)]

    async def _unlock(self, p: Pass, jobs: list[Document], worker: Raw | None, beat: Raw | None,
                      reason: str) -> int:
        """Return or unlock as crashed each job of a dead ``worker``
        (:func:`recruiter.domain.liveness.rescue_update`)."""
        jobs = await self._finish_archived(p.c, await self._well_formed(p, jobs))
        if not jobs:
            return 0
        rescues = [(j, *rescue_update(j, worker, beat, p.now, reason)) for j in jobs]
        changed = await scheduled.apply_changes(p.c.scheduled, [change for _, _, change in rescues])
        if changed < len(jobs):
            # Some changed since they were read (each update is conditional on its lock token):
            # log only those this write returned or unlocked.
            unlocked = await scheduled.read_rescued(p.c.scheduled, [j["_id"] for j in jobs], p.now, reason)
            rescues = [r for r in rescues if r[0]["_id"] in unlocked]
        for j, kind, _ in rescues:
            self.events.warning(f"job.{kind}", job_id=str(j["_id"]), worker_id=j.get("locked_by"),
                                attempt=j.get("attempts"), group=j.get("group"))
        return changed

    async def _finish_archived(self, c: Collections, jobs: list[Document]) -> list[Document]:
        """Delete from ``scheduled`` the jobs already archived; return the others.

        Conditional on the lock token, as the recruiter's own delete is.
        """
        if not jobs:
            return jobs
        done_ids = await archived.read_ids(c.archived, [j["_id"] for j in jobs])
        done = [j for j in jobs if j["_id"] in done_ids]
        if done:
            deleted = await scheduled.delete_finished(c.scheduled, [(j["_id"], j.get("lock_token")) for j in done])
            if deleted < len(done):  # some changed since they were read: log the deleted ones
                left = await scheduled.read_ids(c.scheduled, [j["_id"] for j in done])
                done = [j for j in done if j["_id"] not in left]
            for j in done:
                self.events.warning("archive.reconciled", job_id=str(j["_id"]),
                                    detail="it was archived but still in scheduled; the delete was finished")
        return [j for j in jobs if j["_id"] not in done_ids]

    async def prune(self, c: Collections, now: datetime) -> int:
        """Delete archived jobs past retention, at most ``PRUNE_BATCH`` per pass (one transaction stays small)."""
        cutoff = now - timedelta(seconds=self.config.clean_after_s)
        old = await archived.read_expired(c.archived, cutoff, PRUNE_BATCH)
        if not old:
            return 0
        deleted = await archived.delete_expired(c.archived, old, cutoff)
        if deleted:
            self.events.info("archived.pruned", count=deleted)
        return deleted


def entry_key(entry_id: object) -> object:
    """A key for the roster entry ``entry_id`` among others: the id itself if it is a string (as every
    beat's), else a tuple naming it (hashable whatever the id, and never equal to a beat's id)."""
    return entry_id if isinstance(entry_id, str) else ("_id", repr(entry_id))


def _when(value: object) -> str:
    return value.isoformat() if isinstance(value, datetime) else f"never (last_seen_at is {type(value).__name__})"
