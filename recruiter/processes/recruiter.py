"""The recruiter process: one leader assigns ready jobs to free workers in rounds.

A round first reads (:meth:`RecruiterProcess.plan`):

1. the roster entries that are available or hold an outcome, and the jobs the
   outcomes name (unless this leader still has the copies it handed out);
   the heartbeats of the available ones (only entries with a fresh heartbeat
   are given work) and those that missed their beats, whose stranded jobs
   (assigned, never shown started) are taken back (:mod:`recruiter.liveness`);
2. the candidates the fairness policy needs for the free workers
   (:mod:`recruiter.candidates`), and picks jobs (:mod:`recruiter.selection`);

then writes (:meth:`RecruiterProcess.carry_out`):

3. takes back stranded jobs, deleting their entries; applies the outcomes in bulk (archive, or put back in the queue);
4. locks the picked jobs with one bulk write;
5. assigns them with ONE ``update_many`` carrying the ``assigned_to`` map and
   the jobs, which also clears the outcomes of the workers it reaches.

Any step may be repeated after a crash without harm: archiving ignores
duplicates, every job update is conditional on its lock token, and locks that
never reached a worker are rolled back when a leader starts.

Fencing: the leader runs each round's writes in one transaction whose first write is a
conditional update of its lease document (:func:`recruiter.store.fenced_transaction`).
A successor's acquire conflicts with it, so a stale leader's round commits
nothing, and a round cut short by a crash leaves nothing half-done (an archived
copy without its delete, a lock without its assignment).

Logs say what happened: what a round's writes make true (``job.archived``,
``jobs.rolled_back``, ``round.assigned``) is logged once its transaction has
committed (:class:`recruiter.logs.AfterCommit`); a round that aborts logs none of it.
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

import bson
import structlog
from bson import ObjectId
from pymongo import DeleteOne, UpdateOne
from pymongo.errors import PyMongoError

from recruiter.domain.candidates import Paused, Query, candidate_from, plan_round
from recruiter.domain.clock import Clock
from recruiter.domain.control import CURSOR_ID, PAUSED_ID, cursor_changes, cursor_document, read_cursor, read_switches
from recruiter.domain.documents import Malformed, WarnOnce, check_job, entry_problem
from recruiter.domain.job import Status
from recruiter.domain.liveness import Rescue, Stranded, find_stranded, is_fresh, missed_beats, take_back
from recruiter.domain.outcome import (
    REFERENCE_FIELDS,
    ROLLBACK_PIPELINE,
    archived_document,
    held_by,
    is_archive,
    jobs_referenced_by,
    reschedule_update,
)
from recruiter.domain.quarantine import log_quarantined, quarantine, sweep_scheduled
from recruiter.domain.selection import (
    DEFAULT_SCHEME,
    Assignment,
    Candidate,
    CountingScheme,
    Cursor,
    FreeWorker,
    Selection,
)
from recruiter.processes.logs import AfterCommit
from recruiter.store.connection import first_line
from recruiter.store.layout import Collections
from recruiter.store.leases import Lease
from recruiter.store.readahead import ReadAhead
from recruiter.store.transactions import LostFence, fenced_transaction
from recruiter.store.wakeup import Doorbell, job_reference

log = structlog.get_logger("recruiter.recruiter")

# A job document bigger than this is not copied into the worker's roster entry:
# the entry gets a reference (recruiter.wakeup.job_reference), and the worker reads
# the job from ``scheduled`` by ``_id`` (one more read, for big jobs only).
MAX_JOB_COPY_BYTES = 64 * 1024
# The copies one assignment update carries, together, stay under this (the rest go as
# references), so the update stays far below the 16 MiB command limit whatever the round size.
MAX_ROUND_COPY_BYTES = 4 * 1024 * 1024
# The leader remembers the jobs it handed out until their outcomes come back;
# past this many (outcomes that never came: workers that died) it starts afresh.
MAX_HANDED_OUT = 10_000


@dataclass(frozen=True)
class RecruiterConfig:
    round_size: int = 42
    backoff_from_s: float = 0.05
    backoff_to_s: float = 1.0
    lease_ttl_s: float = 10.0
    counting_scheme: CountingScheme = DEFAULT_SCHEME
    # How often the leader looks for malformed jobs no candidate read can meet (at least
    # 20 times as long as the last look took, so it costs the server 5% at most).
    sweep_interval_s: float = 60.0

    def __post_init__(self) -> None:
        if self.round_size < 1:
            raise ValueError("round size must be at least 1")
        if not 0 < self.backoff_from_s <= self.backoff_to_s:
            raise ValueError("backoff-from must be positive and not above backoff-to")
        if self.lease_ttl_s <= 0:
            raise ValueError("lease ttl must be positive")
        if self.sweep_interval_s <= 0:
            raise ValueError("sweep interval must be positive")


@dataclass
class RoundReport:
    applied: int = 0
    assigned: int = 0
    free_workers: int = 0
    taken_back: int = 0

    @property
    def busy(self) -> bool:
        return bool(self.applied or self.assigned or self.taken_back)


@dataclass
class RoundPlan:
    """What a round read, and chose, before it writes anything."""

    now: datetime
    report: RoundReport = field(default_factory=RoundReport)
    outcomes: list[dict[str, Any]] = field(default_factory=list)  # roster entries holding one
    outcome_jobs: dict[Any, dict[str, Any]] = field(default_factory=dict)
    selection: Selection | None = None
    handed_out: dict[Any, dict[str, Any]] = field(default_factory=dict)  # job id -> the copy its worker got
    malformed: list[Malformed] = field(default_factory=list)  # jobs to quarantine (recruiter.quarantine)
    quarantined: list[Malformed] = field(default_factory=list)  # those whose archived copy the round wrote
    stranded: list[Stranded] = field(default_factory=list)
    taken_back: list[tuple[Stranded, Rescue]] = field(default_factory=list)

    @property
    def idle(self) -> bool:
        """Nothing to write: no outcome, no malformed or stranded job, and no job for a free worker
        (nor a cursor that moved)."""
        return (not self.outcomes and not self.malformed and not self.stranded
                and (self.selection is None or not self.selection.assignments))


@dataclass(frozen=True)
class Locked:
    """A job locked for a worker this round: the assignment, its token, the locked document."""

    assignment: Assignment
    token: ObjectId
    job: dict[str, Any]


def copies_to_send(locked: list[Locked]) -> list[dict[str, Any]]:
    """What each assignment carries in ``job``: the job itself, or a reference to it
    (:func:`recruiter.wakeup.job_reference`) when the job is bigger than
    ``MAX_JOB_COPY_BYTES`` or the round's copies already reach ``MAX_ROUND_COPY_BYTES``."""
    budget = MAX_ROUND_COPY_BYTES
    out = []
    for lk in locked:
        size = len(bson.encode(lk.job))
        if size <= min(MAX_JOB_COPY_BYTES, budget):
            budget -= size
            out.append(lk.job)
        else:
            out.append(job_reference(lk.assignment.job_id, lk.token))
    return out


class LostLease(Exception):
    """The lease expired or was taken over during a round."""


def no_fault(point: str) -> None:
    """The default fault hook: does nothing. Tests inject one that raises at a named point."""


class RecruiterProcess:
    def __init__(self, db: Any, clock: Clock, config: RecruiterConfig, *, owner: str | None = None) -> None:
        self.db = db
        self.c = Collections.of(db)
        self.clock = clock
        self.config = config
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{ObjectId()}"
        self.lease = Lease(self.c.metadata, "recruiter", self.owner, timedelta(seconds=config.lease_ttl_s), clock)
        self._stop = asyncio.Event()
        self.fault: Callable[[str], None] = no_fault
        # Fairness cursor as last written, and the epoch it was loaded for; pause switches as last read.
        self._cursor = Cursor()
        self._cursor_epoch: int | None = None
        self._paused = Paused()
        # The candidate documents read this round, whole: locking one turns it into
        # the copy its worker receives, with no second read.
        self._read: dict[Any, dict[str, Any]] = {}
        self._handed_out: dict[Any, dict[str, Any]] = {}
        # What this process knows of the ready jobs between rounds: hints that stay valid
        # whoever leads in between, so they are kept across leaderships.
        self._readahead = ReadAhead(self._find_candidates)
        # What a fenced round's writes make true is logged once its transaction has committed.
        self.events = AfterCommit(log)
        # Malformed jobs met by this round's reads, and by the last sweep (quarantined by the next round).
        self._met: list[Malformed] = []
        self._swept: list[Malformed] = []
        self._sweep: asyncio.Task[None] | None = None
        self._sweep_due = 0.0
        self._cursor_reset = False  # the stored cursor was malformed: the next save replaces it
        self.warned = WarnOnce()

    def stop(self) -> None:
        self._stop.set()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=seconds)

    async def run(self) -> None:
        """Wait for the lease, lead while holding it, stand by again when it is lost.

        First, before asking for the lease, it reads the keys of every queued job once
        (:meth:`recruiter.readahead.ReadAhead.warm`): the one read whose cost is the
        backlog, so it must not run while a lease is held."""
        standby_poll_s = min(1.0, self.config.lease_ttl_s / 4)
        try:
            await self._readahead.warm(self.clock.now())
        except PyMongoError as exc:  # the rounds read what they need anyway
            log.warning("readahead.not_warmed", error=first_line(exc))
        while not self._stop.is_set():
            try:
                acquired = await self.lease.acquire()
            except PyMongoError as exc:
                log.warning("lease.unavailable", error=first_line(exc))
                acquired = False
            if not acquired:
                await self._sleep(standby_poll_s)
                continue
            epoch = self.lease.epoch
            log.info("leader.elected", epoch=epoch, owner=self.owner)
            self._handed_out.clear()
            try:
                await self._lead()
            except LostLease:
                log.warning("leader.lost", epoch=epoch)
        await self.lease.release()

    async def _lead(self) -> None:
        doorbell = Doorbell(self.db, max_await_s=self.config.backoff_to_s)
        self._sweep_due = 0.0
        try:
            await self._lead_rounds(doorbell)
        finally:
            if self._sweep is not None:
                self._sweep.cancel()
                with contextlib.suppress(asyncio.CancelledError, PyMongoError):
                    await self._sweep
                self._sweep = None
            await doorbell.close()

    def _start_sweep(self) -> None:
        """Look for malformed jobs that no candidate read meets, in a task of its own so
        rounds go on meanwhile; the next round quarantines what it found."""
        loop = asyncio.get_running_loop()
        if self._sweep is not None or loop.time() < self._sweep_due:
            return

        async def sweep() -> None:
            started = loop.time()
            try:
                self._swept.extend(await sweep_scheduled(self.c.scheduled))
            except PyMongoError as exc:
                log.warning("sweep.failed", error=first_line(exc))
            finally:
                took = loop.time() - started
                self._sweep_due = loop.time() + max(self.config.sweep_interval_s, 20 * took)
                self._sweep = None

        self._sweep = asyncio.create_task(sweep(), name="recruiter.sweep")

    async def _lead_rounds(self, doorbell: Doorbell) -> None:
        """Run rounds while the lease holds. Database errors are survived: every step
        of a round can be repeated (see the module doc), and locks a failed round took
        but never handed out are released before the next one.

        Busy, rounds run back to back. Idle, the recruiter waits on a change stream
        (:class:`recruiter.wakeup.Doorbell`) for an enqueue or an outcome, or for its
        backoff, whichever comes first: jobs that become due by the clock raise no event.
        """
        backoff = self.config.backoff_from_s
        # A previous leader, or a round of ours that failed, may have locked jobs
        # without handing them out: release those before assigning anything.
        needs_rollback = True
        while not self._stop.is_set():
            try:
                await self._keep_lease()
                self._start_sweep()
                report = await self.fenced_round(rollback=needs_rollback)
                needs_rollback = False
            except PyMongoError as exc:
                if exc.has_error_label("TransientTransactionError"):
                    # A worker wrote to an entry this round was changing (its outcome, or
                    # leaving; heartbeats go elsewhere): the round wrote nothing; run it again soon.
                    log.debug("round.conflict", error=first_line(exc))
                    await self._sleep(self.config.backoff_from_s)
                    continue
                log.warning("round.failed", error=first_line(exc))
                await self._sleep(self.config.backoff_to_s)
                continue
            if report.busy:
                backoff = self.config.backoff_from_s
                continue
            if self._stop.is_set():
                break
            if await doorbell.wait(backoff):
                backoff = self.config.backoff_from_s
            else:
                backoff = min(backoff * 2, self.config.backoff_to_s)

    async def _keep_lease(self) -> None:
        # Renew once a third of the lease has passed, so two renewals can fail before it expires.
        self._check_lease()
        expires_at = self.lease.expires_at
        margin = timedelta(seconds=self.config.lease_ttl_s * 2 / 3)
        due = expires_at is None or self.clock.now() >= expires_at - margin
        if due and not await self.lease.renew():
            raise LostLease()

    async def fenced_round(self, *, rollback: bool = False) -> RoundReport:
        """One round: its reads first, outside any transaction, then (after releasing
        unassigned locks, if asked) its writes in one transaction fenced by the lease.

        Keeping the reads out keeps the transaction short: a transaction that
        wrote an entry changed since it began (a worker recording an outcome)
        would be aborted whole. Heartbeats never conflict with it: they go to
        ``heartbeats``, which a round only reads. The writes are
        conditional (on ``locked: false`` and the attempts read, on lock tokens,
        on ``available``), so reads made just before are safe to act on.
        Raises :class:`LostLease` with nothing written when the lease is no longer ours.
        """
        plan = await self._plan_keeping_lease()
        if not rollback and plan.idle:
            return plan.report
        await self._keep_lease()  # the reads may have been long (a leader's first round): renew before writing
        outside = self.c
        try:
            with self.events.held():
                async with fenced_transaction(self.db, self.lease) as inside:
                    self.c = inside
                    try:
                        if rollback:
                            await self.rollback_unassigned()
                        report = await self.carry_out(plan)
                        self.fault("round.before_commit")
                    finally:
                        self.c = outside
        except LostFence:
            raise LostLease() from None
        self._remember(plan)  # committed
        return report

    async def _plan_keeping_lease(self) -> RoundPlan:
        """:meth:`plan`, renewing the lease every third of its time while the reads last, so a
        long read (a new leader reads the keys of every queued job once) never outlives it."""
        keeper = asyncio.create_task(self._renew_every_third())
        try:
            return await self.plan()
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper

    async def _renew_every_third(self) -> None:
        while True:
            await asyncio.sleep(self.config.lease_ttl_s / 3)
            try:
                await self._keep_lease()
            except (LostLease, PyMongoError) as exc:  # the writes check the lease again
                log.debug("lease.not_renewed", error=first_line(exc))
                return

    def _check_lease(self) -> None:
        if not self.lease.held:
            raise LostLease()

    async def round(self) -> RoundReport:
        """One round without the fence (tests drive it step by step); leaders run :meth:`fenced_round`."""
        plan = await self.plan()
        report = await self.carry_out(plan)
        self._remember(plan)
        return report

    def _remember(self, plan: RoundPlan) -> None:
        """After a round is committed: its fairness cursor is the current one; and keep
        the jobs it handed out, until their outcomes are applied: a job
        is not changed while its worker has it, so its archived copy can be made from
        this one without reading it again (only if the outcome's lock token matches)."""
        if plan.selection is not None:
            self._cursor = plan.selection.cursor
            self._cursor_reset = False
        log_quarantined(log, plan.quarantined)
        for s, kind in plan.taken_back:
            log.warning("job.returned" if kind == "returned" else "job.crashed", job_id=str(s.job["_id"]),
                        worker_id=s.entry["_id"], attempt=s.job.get("attempts"), group=s.job.get("group"),
                        detail=s.reason)
        for entry in plan.outcomes:
            self._handed_out.pop(entry["outcome"]["job"], None)
        if len(self._handed_out) > MAX_HANDED_OUT:
            self._handed_out.clear()  # only an optimisation: jobs not found here are read
        self._handed_out.update(plan.handed_out)

    async def plan(self) -> RoundPlan:
        """The reads of a round: free workers and outcomes, the jobs outcomes name, the
        chosen jobs. Writes nothing."""
        now = self.clock.now()
        plan = RoundPlan(now)
        entries = self._well_formed(await self.c.roster.find(
            {"$or": [{"available": True}, {"outcome.token": {"$exists": True}}]},
            {"assigned_to": 0, "job": 0},
        ).to_list())
        plan.malformed, self._swept = self._swept, []
        plan.outcomes = [e for e in entries if e.get("outcome")]
        for e in plan.outcomes:
            known = self._handed_out.get(e["outcome"]["job"])
            if known is not None and known.get("lock_token") == e["outcome"]["token"]:
                plan.outcome_jobs[known["_id"]] = known
        unknown = [e["outcome"]["job"] for e in plan.outcomes if e["outcome"]["job"] not in plan.outcome_jobs]
        if unknown:
            for j in await self.c.scheduled.find({"_id": {"$in": unknown}}).to_list():
                if (m := check_job(j)) is not None:
                    plan.malformed.append(m)  # quarantined; its outcome is cleared, not applied
                else:
                    plan.outcome_jobs[j["_id"]] = j
        free = sorted(
            await self._live(plan, entries, [e for e in entries if e.get("available") and not e.get("stopping")
                                             and e.get("work_on")]),
            key=lambda e: (e.get("available_since") or now, e["_id"]),
        )[: self.config.round_size]
        plan.report.free_workers = len(free)
        if free:
            workers = [FreeWorker(e["_id"], tuple(e["work_on"])) for e in free]
            self._read, self._met = {}, []
            plan.selection = await self.select(workers, now)
            plan.malformed += self._met
        return plan

    async def _live(self, plan: RoundPlan, entries: list[dict[str, Any]],
                    available: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The ``available`` entries whose heartbeat is fresh; notes in ``plan`` the stranded jobs
        of entries that missed their beats. One read by ``_id`` and by ``fresh_until``, both indexed;
        one more only when an entry not among ``entries`` (available or holding an outcome,
        so holding no job) missed its beats."""
        beats = {b["_id"]: b for b in await self.c.heartbeats.find(
            {"$or": [{"_id": {"$in": [e["_id"] for e in available]}}, {"fresh_until": {"$lte": plan.now}}]},
            {"session": 1, "fresh_until": 1, "last_seen_at": 1, "heartbeat_interval_s": 1, "working_token": 1},
        ).to_list()}
        known = {e["_id"] for e in entries}
        plan.stranded = await find_stranded(
            self.c, [b for b in beats.values() if b["_id"] not in known and missed_beats(b, plan.now)])
        return [e for e in available if is_fresh(beats.get(e["_id"]), e, plan.now)]

    def _well_formed(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The roster entries a round can use; a malformed one is skipped, with one warning
        per entry (the cleaner removes it once it stops heartbeating)."""
        kept = []
        for e in entries:
            problem = entry_problem(e)
            if problem is None:
                kept.append(e)
            elif self.warned.first(("roster", e.get("_id")), problem):
                log.warning("worker.malformed", worker_id=str(e.get("_id"))[:100], reason=problem,
                            detail="this roster entry is skipped until it is fixed or removed")
        return kept

    async def carry_out(self, plan: RoundPlan) -> RoundReport:
        """The writes of a round: take back stranded jobs, apply outcomes, move the fairness
        cursor, lock, assign."""
        report = plan.report
        if plan.stranded:
            self._check_lease()
            plan.taken_back = await take_back(self.c, plan.stranded, plan.now)
            report.taken_back = len(plan.taken_back)
        if plan.malformed:
            self._check_lease()
            plan.quarantined = await quarantine(self.c, plan.malformed, plan.now)
        quarantined = {m.id for m in plan.malformed if _hashable(m.id)}
        applicable = [e for e in plan.outcomes if e["outcome"]["job"] not in quarantined]
        if applicable:
            self._check_lease()
            report.applied = await self.apply_outcomes(applicable, plan.now, plan.outcome_jobs, clear=False)
        assigned: set[str] = set()
        if plan.selection is not None:
            await self._save_cursor(plan.selection.cursor)
        if plan.selection is not None and plan.selection.assignments:
            self._check_lease()
            locked = await self.lock(plan.selection.assignments, plan.now)
            self._check_lease()
            copies = copies_to_send(locked)
            assigned = await self._assign(locked, plan.now, copies)
            # Only the copies are remembered: a big job is read again when its outcome comes back.
            plan.handed_out = {lk.assignment.job_id: lk.job for lk, copy in zip(locked, copies, strict=True)
                               if lk.assignment.worker_id in assigned and copy is lk.job}
            report.assigned = len(assigned)
            if report.assigned:
                self.events.debug("round.assigned", assigned=report.assigned, free_workers=report.free_workers)
        # The assignment removed the outcomes of the workers it reached; clear the others.
        await self._clear_outcomes([e for e in plan.outcomes if e["_id"] not in assigned])
        return report

    async def _clear_outcomes(self, entries: list[dict[str, Any]]) -> None:
        if entries:
            await self.c.roster.bulk_write(
                [UpdateOne({"_id": e["_id"], "outcome.token": e["outcome"]["token"]}, {"$unset": {"outcome": ""}})
                 for e in entries],
                ordered=False,
            )

    async def select(self, workers: list[FreeWorker], now: datetime) -> Selection:
        """Choose jobs for ``workers`` by the fairness policy (the new cursor is saved
        with the round's writes, :meth:`_save_cursor`).

        The reads are planned by :func:`recruiter.candidates.plan_round`; the
        first one also reads the pause switches, so a pause is obeyed from the
        next round on. If the switches changed since the last round, the round
        is planned again with them."""
        if self._cursor_epoch != self.lease.epoch:
            self._cursor, problem = read_cursor(await self.c.metadata.find_one({"_id": CURSOR_ID}))
            self._cursor_reset = problem is not None
            if problem is not None:
                log.warning("cursor.malformed", reason=problem, detail="the fairness turns start afresh")
            self._cursor_epoch = self.lease.epoch
        for _ in range(3):
            paused = self._paused
            # A worker does not take a paused group; '*' workers' reads leave paused groups out.
            usable = [FreeWorker(w.id, tuple(g for g in w.groups if g not in paused.groups)) for w in workers]
            plan = plan_round(usable, self._cursor, now, self.config.counting_scheme)
            queries = next(plan)
            rows = await self._read_candidates(queries, now, paused, with_switches=True)
            if self._paused == paused:
                break
        while True:
            try:
                queries = plan.send(rows)
            except StopIteration as stop:
                selection: Selection = stop.value
                break
            rows = await self._read_candidates(queries, now, paused, with_switches=False)
        return selection

    async def _save_cursor(self, cursor: Cursor) -> None:
        """Write what moved in the cursor; it is taken as current once the round is
        committed (:meth:`_remember`), so a round that aborts leaves the turns as they were."""
        if self._cursor_reset:  # replace what was malformed rather than update inside it
            self._check_lease()
            await self.c.metadata.replace_one({"_id": CURSOR_ID}, cursor_document(cursor), upsert=True)
            return
        changes = cursor_changes(self._cursor, cursor)
        if changes:
            self._check_lease()
            await self.c.metadata.update_one({"_id": CURSOR_ID}, changes, upsert=True)

    async def _read_candidates(self, queries: list[Query], now: datetime, paused: Paused,
                               *, with_switches: bool) -> list[list[Candidate]]:
        """Answer ``queries`` through the read-ahead (:mod:`recruiter.readahead`: reads
        served from the candidates index on MongoDB and on the embedded server alike);
        with ``with_switches``, also read the pause switches, at the same time.
        Runs before the round's transaction (see fenced_round): reads need no fence.
        Whole documents are checked (:func:`recruiter.documents.check_job`): a malformed
        one is never a candidate, the round quarantines it; rows the read-ahead answered
        from keys are read whole first (one find by id, in rounds that met new jobs)."""
        switches_read = self.c.metadata.find_one({"_id": PAUSED_ID}) if with_switches else None
        if switches_read is not None:
            docs, switches = await asyncio.gather(self._readahead.answer(queries, now, paused), switches_read)
            self._paused = read_switches(switches, self.warned, log)
        else:
            docs = await self._readahead.answer(queries, now, paused)
        whole, self._readahead.documents = self._readahead.documents, {}
        await self._meet_unplaceable()
        keys_only = [d["_id"] for found in docs for d in found if d["_id"] not in whole]
        if keys_only:  # rows a keys read answered (new tenants, bursts): read them whole, once
            whole.update((d["_id"], d) for d in await self.c.scheduled.find({"_id": {"$in": keys_only}}).to_list())
        rows: list[list[Candidate]] = [[] for _ in queries]
        for i, found in enumerate(docs):
            for key in found:
                doc = whole.get(key["_id"])
                if doc is None:
                    continue  # gone since its keys were read
                if (m := check_job(doc)) is not None:
                    self._met.append(m)  # never a candidate; the round quarantines it
                    continue
                rows[i].append(candidate_from(doc))
                self._read[doc["_id"]] = doc
        return rows

    async def _meet_unplaceable(self) -> None:
        """Jobs whose keys the read-ahead could not place, read whole to be quarantined by this round."""
        ids, self._readahead.unplaceable = self._readahead.unplaceable, []
        if ids:
            for doc in await self.c.scheduled.find({"_id": {"$in": ids}, "locked": False}).to_list():
                if (m := check_job(doc)) is not None:
                    self._met.append(m)

    async def _find_candidates(self, filter_: dict[str, Any], projection: dict[str, Any] | None,
                               limit: int) -> list[Any]:
        cursor = self.c.scheduled.find(filter_, projection)
        if limit:
            cursor = cursor.sort([("scheduled_at", 1), ("_id", 1)]).limit(limit)
        return list(await cursor.to_list())

    async def apply_outcomes(self, entries: list[dict[str, Any]], now: datetime,
                             jobs: dict[Any, dict[str, Any]] | None = None, *, clear: bool = True) -> int:
        """Archive or reschedule the jobs whose outcomes workers recorded in ``entries``
        (``jobs``: those jobs as read by the round, else read here); idempotent. With
        ``clear``, the outcomes are then removed from the entries (a round leaves that
        to its assignment where it can)."""
        outcomes = {e["outcome"]["job"]: (e["_id"], e["outcome"]) for e in entries}
        if jobs is None:
            jobs = {j["_id"]: j for j in await self.c.scheduled.find({"_id": {"$in": list(outcomes)}}).to_list()}
        archive: list[dict[str, Any]] = []
        reschedule: list[UpdateOne] = []
        for job_id, (worker_id, outcome) in outcomes.items():
            job = jobs.get(job_id)
            if job is None or not held_by(job, outcome):
                # Already applied by an earlier round, or the lock was taken away.
                log.info("outcome.stale", job_id=str(job_id), worker_id=worker_id)
                continue
            if is_archive(outcome):
                archive.append(archived_document(job, outcome, now))
            else:
                filter_, update = reschedule_update(job, outcome)
                reschedule.append(UpdateOne(filter_, update))
        if archive:
            # An upsert that only sets fields on insert: a copy archived by an earlier,
            # half-done apply is left as it is, without the duplicate-key error that
            # would abort the round's transaction.
            await self.c.archived.bulk_write(
                [UpdateOne({"_id": d["_id"]}, {"$setOnInsert": {k: v for k, v in d.items() if k != "_id"}},
                           upsert=True) for d in archive],
                ordered=False,
            )
            self.fault("archive.between_insert_and_delete")
            # One delete per job by _id (then its token): a point lookup on any server,
            # where an $or of them is a collection scan on the embedded one.
            await self.c.scheduled.bulk_write(
                [DeleteOne({"_id": d["_id"], "lock_token": outcomes[d["_id"]][1]["token"]}) for d in archive],
                ordered=False,
            )
            for d in archive:
                self.events.info("job.archived", job_id=str(d["_id"]), why=d["why"], attempts=d.get("attempts"),
                                 group=d.get("group"))
        if reschedule:
            await self.c.scheduled.bulk_write(reschedule, ordered=False)
        if clear:
            await self._clear_outcomes(entries)
        return len(archive) + len(reschedule)

    async def lock(self, assignments: list[Assignment], now: datetime) -> list[Locked]:
        """Lock the chosen jobs for their workers; returns the ones that were still free.

        Each lock is conditional on the job being unlocked with the attempt count
        this round read, so the document read, with the lock applied, is exactly
        what was locked: it travels to the worker as is. Only when some lock did
        not land are the jobs read back, to tell by their token which are ours.
        """
        tokens = {a.job_id: ObjectId() for a in assignments}
        lock_fields = {a.job_id: {
            "locked": True,
            "locked_by": a.worker_id,
            "locked_at": now,
            "lock_token": tokens[a.job_id],
            "lock_epoch": self.lease.epoch,
            "status": Status.ASSIGNED.value,
        } for a in assignments}
        read = {a.job_id: self._read.get(a.job_id) for a in assignments}
        filters = {job_id: {"_id": job_id, "locked": False} for job_id in read}
        for job_id, doc in read.items():
            if doc is not None:
                filters[job_id]["attempts"] = doc.get("attempts", 0)
        result = await self.c.scheduled.bulk_write(
            [UpdateOne(filters[a.job_id], {"$set": lock_fields[a.job_id], "$inc": {"attempts": 1}})
             for a in assignments],
            ordered=False,
        )
        if result.modified_count == len(assignments) and all(read.values()):
            return [
                Locked(a, tokens[a.job_id], {**doc, **lock_fields[a.job_id], "attempts": doc.get("attempts", 0) + 1})
                for a in assignments
                if (doc := read[a.job_id]) is not None
            ]
        jobs = {d["_id"]: d for d in await self.c.scheduled.find({"_id": {"$in": list(tokens)}}).to_list()}
        return [
            Locked(a, tokens[a.job_id], jobs[a.job_id])
            for a in assignments
            if a.job_id in jobs and jobs[a.job_id].get("lock_token") == tokens[a.job_id]
        ]

    async def assign(self, locked: list[Locked], now: datetime) -> int:
        """Hand locked jobs to their workers (see :meth:`_assign`); returns how many landed."""
        return len(await self._assign(locked, now))

    async def _assign(self, locked: list[Locked], now: datetime,
                      copies: list[dict[str, Any]] | None = None) -> set[str]:
        """Hand locked jobs to their workers with one update; roll back what did not land.

        ONE ``update_many`` over the chosen roster entries carries the round's
        ``assigned_to`` map (worker id -> job id) once, as a list, with a copy of
        each job; an update pipeline keeps in each entry only its own part: its
        key of the map (``assigned_to: {<its id>: <job id>}``, readable in mongosh
        as in the seed) and its job in ``job``. So the command grows linearly with
        the round and each entry holds one job, instead of every entry holding the
        whole map; the worker needs no second read to start, and a change stream on
        its entry delivers the job itself. Jobs too big to copy (:func:`copies_to_send`)
        go as a reference in ``job``, so the worker still hears of them at once, and reads them.
        """
        if not locked:
            return set()
        mapping = {lk.assignment.worker_id: lk.assignment.job_id for lk in locked}
        picks = [{"w": lk.assignment.worker_id, "j": lk.assignment.job_id, "job": copy}
                 for lk, copy in zip(locked, copies or copies_to_send(locked), strict=True)]
        own_pick = {"$arrayElemAt": [
            {"$filter": {"input": {"$literal": picks}, "cond": {"$eq": ["$$this.w", "$_id"]}}}, 0]}
        result = await self.c.roster.update_many(
            {"_id": {"$in": list(mapping)}, "available": True, "stopping": {"$ne": True}},
            [
                {"$set": {"_pick": own_pick}},
                {"$set": {"available": False, "assigned_since": now,
                          "assigned_to": {"$arrayToObject": [[{"k": "$_pick.w", "v": "$_pick.j"}]]},
                          "job": "$_pick.job"}},
                {"$unset": ["_pick", "outcome"]},
            ],
        )
        if result.modified_count == len(mapping):
            return set(mapping)
        # Some workers went away or started stopping between the read and the update.
        got = {
            d["_id"]
            for d in await self.c.roster.find({"_id": {"$in": list(mapping)}}, {"assigned_to": 1}).to_list()
            if (d.get("assigned_to") or {}).get(d["_id"]) == mapping[d["_id"]]
        }
        missed = [lk for lk in locked if lk.assignment.worker_id not in got]
        await self._rollback([(lk.assignment.job_id, lk.token) for lk in missed])
        return got

    async def _rollback(self, locks: list[tuple[Any, ObjectId]]) -> None:
        if not locks:
            return
        result = await self.c.scheduled.bulk_write(
            [UpdateOne({"_id": job_id, "lock_token": token}, ROLLBACK_PIPELINE) for job_id, token in locks],
            ordered=False,
        )
        if result.modified_count:
            self.events.info("jobs.rolled_back", count=result.modified_count)

    async def rollback_unassigned(self) -> None:
        """Release locks a previous leader took but never handed to a worker."""
        # A lock that is itself malformed is left to the sweep, which quarantines its job.
        locked = [j for j in await self.c.scheduled.find({"locked": True}, {"locked_by": 1, "lock_token": 1}).to_list()
                  if isinstance(j.get("locked_by"), str) and isinstance(j.get("lock_token"), ObjectId)]
        if not locked:
            return
        refs = {
            w["_id"]: jobs_referenced_by(w)
            for w in await self.c.roster.find(
                {"_id": {"$in": list({j.get("locked_by") for j in locked})}}, REFERENCE_FIELDS
            ).to_list()
        }
        # A job whose worker is gone is a crash, handled by the cleaner.
        orphans = [(j["_id"], j["lock_token"]) for j in locked
                   if j.get("locked_by") in refs and j["_id"] not in refs[j["locked_by"]]]
        await self._rollback(orphans)



def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
