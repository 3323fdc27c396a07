"""The cleaner process: removes dead workers, unlocks their jobs, prunes history.

A worker is dead when the ``last_seen_at`` of its heartbeat document
(:mod:`recruiter.liveness`) is older than ``considered_dead_after``. Its heartbeat
document and roster entry are deleted first (so the worker, if it was only
paused, is fenced: its outcome write finds no entry), then the jobs it held
are returned or unlocked as crashed attempts, as its heartbeats tell
(:func:`recruiter.liveness.rescue_update`). An entry that still holds an
unapplied outcome is left for the recruiter to apply first. Jobs locked by a
worker that no longer exists (a cleaner that died between the two steps) are
swept the same way. Before that, as a recruiter round does, a pass takes back
at once the jobs assigned to entries that missed their heartbeats before
showing they started them. Roster entries that have no heartbeat document
(an older version's, or a registration cut short) are judged by their own
``last_seen_at`` or, without one, their ``created_at``.

Each pass runs in a transaction fenced by the cleaner's lease
(:func:`recruiter.store.fenced_transaction`): a cleaner that lost its lease
writes nothing, and logs nothing of what it would have done: the events a pass's
writes make true (``worker.dead``, ``job.crashed``, ``archive.reconciled``,
``archived.pruned``) are logged once it has committed
(:class:`recruiter.logs.AfterCommit`), each for a write that took effect.

Before a job is unlocked as crashed, the pass checks that it was not archived
already: a job whose archived copy exists but which is still in ``scheduled``
(an archive cut between its two writes) is deleted from ``scheduled``,
finishing the archive instead of running the job again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import structlog
from bson import ObjectId
from pymongo import UpdateOne
from pymongo.errors import PyMongoError

from recruiter.domain.clock import Clock
from recruiter.domain.documents import Malformed, check_job, outcome_problem
from recruiter.domain.liveness import find_stranded, missed_beats, rescue_update, take_back
from recruiter.domain.outcome import REFERENCE_FIELDS, jobs_referenced_by
from recruiter.domain.quarantine import log_quarantined, quarantine
from recruiter.processes.logs import AfterCommit
from recruiter.store.connection import first_line
from recruiter.store.layout import Collections
from recruiter.store.leases import Lease
from recruiter.store.transactions import LostFence, fenced_transaction

log = structlog.get_logger("recruiter.cleaner")

PRUNE_BATCH = 1000


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
    quarantined: list[Malformed] = field(default_factory=list)


def no_fault(point: str) -> None:
    """The default fault hook: does nothing."""


class CleanerProcess:
    def __init__(self, db: Any, clock: Clock, config: CleanerConfig, *, owner: str | None = None) -> None:
        self.c = Collections.of(db)
        self.clock = clock
        self.config = config
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{ObjectId()}"
        self.lease = Lease(self.c.metadata, "cleaner", self.owner, timedelta(seconds=config.lease_ttl_s), clock)
        self._stop = asyncio.Event()
        self._db = db
        self._next_orphan_scan: datetime | None = None
        self._report = CleanReport()
        self.events = AfterCommit(log)
        self.fault: Callable[[str], None] = no_fault  # tests inject one that raises at a named point

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        interval = min(self.config.interval_s, self.config.lease_ttl_s / 3)
        leading = False
        while not self._stop.is_set():
            try:
                if await self.lease.acquire():
                    if not leading:
                        log.info("leader.elected", role="cleaner", epoch=self.lease.epoch)
                        leading = True
                    await self.fenced_clean()
                elif leading:
                    log.warning("leader.lost", role="cleaner")
                    leading = False
            except LostFence:
                log.warning("leader.lost", role="cleaner", detail="the pass wrote nothing")
                leading = False
            except PyMongoError as exc:
                log.warning("clean.failed", error=first_line(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=interval)
        await self.lease.release()

    async def fenced_clean(self) -> CleanReport:
        """:meth:`clean` in a transaction fenced by the lease; :class:`LostFence` if it is not ours."""
        outside = self.c
        with self.events.held():
            async with fenced_transaction(self._db, self.lease) as inside:
                self.c = inside
                try:
                    report = await self.clean()
                    self.fault("clean.before_commit")
                finally:
                    self.c = outside
        log_quarantined(log, report.quarantined)  # committed
        return report

    async def clean(self) -> CleanReport:
        now = self.clock.now()
        report = CleanReport()
        cutoff = now - timedelta(seconds=self.config.considered_dead_after_s)
        self._report = report
        stale = await self.c.heartbeats.find(
            {"$or": [{"fresh_until": {"$lte": now}}, {"last_seen_at": {"$lt": cutoff}}]}).to_list()
        dead = {b["_id"]: b for b in stale if not isinstance(b.get("last_seen_at"), datetime)
                or b["last_seen_at"] < cutoff}
        silent = [b for b in stale if b["_id"] not in dead and missed_beats(b, now)]
        taken = await take_back(self.c, await find_stranded(self.c, silent), now)
        for s, kind in taken:
            self.events.warning(f"job.{kind}", job_id=str(s.job["_id"]), worker_id=s.entry["_id"],
                                attempt=s.job.get("attempts"), group=s.job.get("group"), detail=s.reason)
        report.unlocked_jobs += len(taken)
        entries = {e["_id"]: e for e in await self.c.roster.find({"_id": {"$in": list(dead)}}).to_list()}
        entries.update(await self._without_heartbeat(cutoff))
        for worker_id in {*dead, *entries}:
            if not self.lease.held:
                return report
            unlocked = await self.remove_dead_worker(entries.get(worker_id), dead.get(worker_id), now)
            if unlocked is not None:
                report.dead_workers += 1
                report.unlocked_jobs += unlocked
        report.unlocked_jobs += await self.sweep_orphans(now, cutoff)
        report.pruned = await self.prune(now)
        return report

    async def _without_heartbeat(self, cutoff: datetime) -> dict[Any, dict[str, Any]]:
        """Roster entries not created since ``cutoff`` that have no (readable) heartbeat document.

        Reads every such entry's id, so it runs at most once per ``considered_dead_after``.
        """
        now = self.clock.now()
        if self._next_orphan_scan is not None and now < self._next_orphan_scan:
            return {}
        self._next_orphan_scan = now + timedelta(seconds=self.config.considered_dead_after_s)
        old = self.c.roster.find({"created_at": {"$not": {"$gte": cutoff}}}, {"_id": 1})
        ids = [e["_id"] for e in await old.to_list()]
        if not ids:
            return {}
        # A heartbeat document without a date in last_seen_at counts as none: no query finds it stale.
        beating = {b["_id"] for b in await self.c.heartbeats.find(
            {"_id": {"$in": ids}}, {"last_seen_at": 1}).to_list() if isinstance(b.get("last_seen_at"), datetime)}
        lone = [i for i in ids if i not in beating]
        return {e["_id"]: e for e in await self.c.roster.find({"_id": {"$in": lone}}).to_list()} if lone else {}

    async def remove_dead_worker(self, worker: dict[str, Any] | None, beat: dict[str, Any] | None,
                                 now: datetime) -> int | None:
        """Delete a dead worker's heartbeat and entry and unlock its jobs; None if the entry was not deleted."""
        outcome = (worker or {}).get("outcome")
        if worker is not None and outcome and outcome_problem(outcome) is None:
            log.info("worker.dead_with_outcome", worker_id=worker["_id"],
                     detail="waiting for the recruiter to apply its last outcome")
            return None
        if beat is not None:
            gone = await self.c.heartbeats.delete_one({"_id": beat["_id"], "last_seen_at": beat.get("last_seen_at")})
            if not gone.deleted_count:
                return None  # it came back to life, or someone else handled it
        if worker is None:
            return None  # a heartbeat left by an entry already removed
        if beat is None:  # an unreadable heartbeat document goes with its entry
            await self.c.heartbeats.delete_one({"_id": worker["_id"], "last_seen_at": {"$not": {"$type": "date"}}})
        # A malformed outcome is never applied: the entry goes, its job is unlocked below.
        fence: dict[str, Any] = {"_id": {"$eq": worker["_id"]}, "session": {"$eq": worker.get("session")},
                                 "outcome": {"$eq": outcome} if "outcome" in worker else {"$exists": False}}
        if beat is None and "last_seen_at" in worker:
            fence["last_seen_at"] = {"$eq": worker["last_seen_at"]}
        if not (await self.c.roster.delete_one(fence)).deleted_count:
            return None
        if beat is not None and beat.get("session") != worker.get("session"):
            beat = None  # the heartbeat of another registration with this id
        seen_text = _when((beat or worker).get("last_seen_at"))
        self.events.warning("worker.dead", worker_id=str(worker["_id"])[:100], last_seen_at=seen_text,
                            pid=worker.get("pid"), hostname=worker.get("hostname"))
        # Only the jobs the entry referred to: a job locked for a new entry with the same
        # id (a restarted worker) is not this dead worker's. Other locks go to the orphan sweep.
        held = list(jobs_referenced_by(worker))
        jobs = await self.c.scheduled.find(
            {"_id": {"$in": held}, "locked": True, "locked_by": worker["_id"]}).to_list() if held else []
        reason = (f"worker {worker['_id']} (pid {worker.get('pid')} on {worker.get('hostname')}) "
                  f"stopped heartbeating; last seen {seen_text}")
        return await self._unlock(jobs, worker, beat, now, reason)

    async def sweep_orphans(self, now: datetime, cutoff: datetime) -> int:
        """Unlock jobs locked before ``cutoff`` that no roster entry holds.

        Either the worker is gone (a cleaner died between deleting it and
        unlocking its jobs), or its entry no longer refers to the job (a write
        the server lost). The unlock is conditional on the lock token, so a job
        the recruiter archives or reschedules meanwhile is left alone.
        """
        locked = await self._well_formed(
            await self.c.scheduled.find({"locked": True, "locked_at": {"$lt": cutoff}}).to_list())
        if not locked:
            return 0
        entries = {w["_id"]: w for w in await self.c.roster.find(
            {"_id": {"$in": list({j.get("locked_by") for j in locked})}}, REFERENCE_FIELDS).to_list()}
        gone = [j for j in locked if j.get("locked_by") not in entries]
        forgotten = [j for j in locked if j.get("locked_by") in entries
                     and j["_id"] not in jobs_referenced_by(entries[j["locked_by"]])]
        return (await self._unlock(gone, None, None, now, "its worker left the roster without finishing it")
                + await self._unlock(forgotten, None, None, now, "its worker no longer refers to it"))

    async def _well_formed(self, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The well-formed ``jobs``; the others are quarantined (:mod:`recruiter.quarantine`)."""
        malformed = [m for j in jobs if (m := check_job(j)) is not None]
        if not malformed:
            return jobs
        self._report.quarantined += await quarantine(self.c, malformed, self.clock.now())
        bad = [m.document for m in malformed]
        return [j for j in jobs if not any(j is d for d in bad)]

    async def _unlock(self, jobs: list[dict[str, Any]], worker: dict[str, Any] | None, beat: dict[str, Any] | None,
                      now: datetime, reason: str) -> int:
        """Return or unlock as crashed each job of a dead ``worker`` (:func:`recruiter.liveness.rescue_update`)."""
        jobs = await self._well_formed(jobs)
        jobs = await self._finish_archived(jobs)
        if not jobs:
            return 0
        rescues = [(j, *rescue_update(j, worker, beat, now, reason)) for j in jobs]
        result = await self.c.scheduled.bulk_write([UpdateOne(*change) for _, _, change in rescues], ordered=False)
        if result.modified_count < len(jobs):
            # Some changed since they were read (each update is conditional on its lock token):
            # log only those this write returned or unlocked.
            unlocked = {d["_id"] for d in await self.c.scheduled.find(
                {"_id": {"$in": [j["_id"] for j in jobs]}, "$or": [
                    {"crash_pending": True, "last_execution.ended_at": now, "last_execution.message": reason},
                    {"last_return.returned_at": now, "last_return.reason": reason}]}, {"_id": 1}).to_list()}
            rescues = [r for r in rescues if r[0]["_id"] in unlocked]
        for j, kind, _ in rescues:
            self.events.warning(f"job.{kind}", job_id=str(j["_id"]), worker_id=j.get("locked_by"),
                                attempt=j.get("attempts"), group=j.get("group"))
        return int(result.modified_count)

    async def _finish_archived(self, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Delete from ``scheduled`` the jobs already archived; return the others.

        Conditional on the lock token, as the recruiter's own delete is.
        """
        if not jobs:
            return jobs
        archived = {d["_id"] for d in await self.c.archived.find(
            {"_id": {"$in": [j["_id"] for j in jobs]}}, {"_id": 1}).to_list()}
        done = [j for j in jobs if j["_id"] in archived]
        if done:
            result = await self.c.scheduled.delete_many(
                {"$or": [{"_id": j["_id"], "lock_token": j.get("lock_token")} for j in done]})
            if result.deleted_count < len(done):  # some changed since they were read: log the deleted ones
                left = {d["_id"] for d in await self.c.scheduled.find(
                    {"_id": {"$in": [j["_id"] for j in done]}}, {"_id": 1}).to_list()}
                done = [j for j in done if j["_id"] not in left]
            for j in done:
                self.events.warning("archive.reconciled", job_id=str(j["_id"]),
                                    detail="it was archived but still in scheduled; the delete was finished")
        return [j for j in jobs if j["_id"] not in archived]

    async def prune(self, now: datetime) -> int:
        """Delete archived jobs past retention, at most ``PRUNE_BATCH`` per pass (one transaction stays small)."""
        cutoff = now - timedelta(seconds=self.config.clean_after_s)
        old = [d["_id"] for d in await self.c.archived.find(
            {"archived_at": {"$lt": cutoff}}, {"_id": 1}).limit(PRUNE_BATCH).to_list()]
        if not old:
            return 0
        result = await self.c.archived.delete_many({"_id": {"$in": old}, "archived_at": {"$lt": cutoff}})
        if result.deleted_count:
            self.events.info("archived.pruned", count=result.deleted_count)
        return int(result.deleted_count)


def _when(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else f"never (last_seen_at is {type(value).__name__})"
