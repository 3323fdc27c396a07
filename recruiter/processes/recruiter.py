"""The recruiter process: one leader assigns ready jobs to free workers in rounds.

A round first reads (:meth:`recruiter.processes.planning.RoundPlanner.plan`), into a
:class:`~recruiter.processes.round_plan.RoundPlan` value:

1. the roster entries that are available or hold an outcome, and the jobs the
   outcomes name (unless this leader still has the copies it handed out);
   the heartbeats of the available ones (only entries whose process's heartbeat
   is fresh and names them with their session are given work) and those that missed their beats, whose stranded jobs
   (assigned, never shown started) are taken back (:mod:`recruiter.domain.liveness`);
2. the candidates the fairness policy needs for the free workers
   (:mod:`recruiter.processes.reading`), and picks jobs (:mod:`recruiter.domain.selection`);

then writes (:meth:`recruiter.processes.rounds.RoundWrites.carry_out`), on the
collections of its fenced transaction: takes back stranded jobs, applies the
outcomes, locks the picked jobs with one bulk write, assigns them with ONE
``update_many``.

Every step may be repeated after a crash without harm: archiving ignores
duplicates, every job update is conditional on its lock token, and locks that
never reached a worker are rolled back when a leader starts.

Fencing: the leader runs each round's writes in one transaction whose first write is a
conditional update of its lease document (:meth:`recruiter.processes.leadership.Leadership.fenced`).
A successor's acquire conflicts with it, so a stale leader's round commits
nothing, and a round cut short by a crash leaves nothing half-done (an archived
copy without its delete, a lock without its assignment).

Logs say what happened: what a round's writes make true (``job.archived``,
``jobs.rolled_back``, ``round.assigned``) is logged once its transaction has
committed (:class:`recruiter.processes.logs.AfterCommit`); a round that aborts logs none of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from recruiter.domain.clock import Clock
from recruiter.domain.documents import WarnOnce
from recruiter.domain.events import RoundAbandoned, RoundCommitted, RoundIdle
from recruiter.domain.selection import DEFAULT_SCHEME, Assignment, CountingScheme
from recruiter.processes.dependencies import DependencySweep
from recruiter.processes.events import Bus
from recruiter.processes.firing import ScheduleFirer
from recruiter.processes.leadership import Fault, LeaderProcess, Leadership, Pace, leader_owner, no_fault
from recruiter.processes.logs import AfterCommit
from recruiter.processes.planning import RoundPlanner
from recruiter.processes.reading import CandidateReader
from recruiter.processes.round_plan import Locked, RoundPlan, RoundReport
from recruiter.processes.round_stats import RoundTimer
from recruiter.processes.rounds import LocksMissed, RoundWrites
from recruiter.processes.sweeper import Sweeper
from recruiter.processes.timeline import Timeline
from recruiter.store import roster
from recruiter.store.connection import StoreError, first_line
from recruiter.store.doorbell import Doorbell
from recruiter.store.layout import AsyncDb, Collections, Document
from recruiter.store.leases import MAX_TTL

log = structlog.get_logger("recruiter.recruiter")


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
    # Least time between the starts of two rounds, unless a job was enqueued meanwhile
    # (``recruiter start --coalesce``): a round woken by outcomes waits for the rest of it,
    # so that it serves more of them at once. 0: a round starts as soon as something happens.
    coalesce_s: float = 0.0

    def __post_init__(self) -> None:
        if self.round_size < 1:
            raise ValueError("round size must be at least 1")
        if not 0 < self.backoff_from_s <= self.backoff_to_s:
            raise ValueError("backoff-from must be positive and not above backoff-to")
        if not 0 < self.lease_ttl_s <= MAX_TTL.total_seconds():
            raise ValueError(f"lease ttl must be positive and at most {MAX_TTL} (recruiter.store.leases.MAX_TTL)")
        if self.sweep_interval_s <= 0:
            raise ValueError("sweep interval must be positive")
        if not 0 <= self.coalesce_s <= 1:
            raise ValueError("coalesce must be between 0s and 1s")


@dataclass(frozen=True)
class _Timed:
    report: RoundReport
    took_s: float | None  # None: an idle round


# How far before a reading round's start the doorbell takes events for new: above the clock's error (store.clock).
SEEN_MARGIN = timedelta(milliseconds=100)


class RecruiterProcess(LeaderProcess):
    """The leader: runs rounds while it holds the lease (:meth:`run`); a round's reads are the
    :class:`~recruiter.processes.planning.RoundPlanner`'s, its writes the
    :class:`~recruiter.processes.rounds.RoundWrites`', committed in one fenced transaction."""

    def __init__(self, db: AsyncDb, clock: Clock, config: RecruiterConfig, *, owner: str | None = None,
                 bus: Bus | None = None) -> None:
        self.db = db
        self.c = Collections.of(db)  # outside any transaction: the round's reads
        self.clock = clock
        self.owner = owner or leader_owner()
        self.bus = bus or Bus.logging()
        self.timeline = Timeline.on(self.bus, clock, self.owner)  # the history over time (processes.timeline)
        self.leadership = Leadership(db, "recruiter", self.owner, clock, config.lease_ttl_s, bus=self.bus)
        self.fault: Fault = no_fault
        # What a fenced round's writes make true is logged (and emitted) once its transaction has committed.
        self.events = AfterCommit(log, self.bus)
        self.timer = RoundTimer()
        self.writes = RoundWrites(self.events, self.leadership.check, lambda point: self.fault(point),
                                  self.timer.mark, held_jobs=lambda: self.dependencies.any_held)
        self.reader = CandidateReader(self.c)
        self.sweeper = Sweeper(self.c)
        # Held jobs whose dependencies ended (processes.dependencies); those it archives are counted.
        self.dependencies = DependencySweep(emit=self.bus.emit)
        self.warned = WarnOnce()
        self.firer = ScheduleFirer(db, self.warned, self.events)
        # The round's reads, and what is kept between rounds (recruiter.processes.planning).
        self.planner = RoundPlanner(self.c, clock, config, self.reader, epoch=lambda: self.lease.epoch,
                                    sweeper=self.sweeper, warned=self.warned, timer=self.timer)
        # The server time before which every write is reflected in the last reading round (its
        # start, less a margin for the clock's estimate): the doorbell's events of such writes wake
        # no round (``seen_until`` of recruiter.store.doorbell.Doorbell).
        self.seen_until: datetime | None = None

    @property
    def config(self) -> RecruiterConfig:
        """The leader's settings: the planner's own, so that one set here is the one rounds use."""
        return self.planner.config

    @config.setter
    def config(self, config: RecruiterConfig) -> None:
        self.planner.config = config

    async def run(self) -> None:
        """Wait for the lease, lead while holding it, stand by again when it is lost.

        First, before asking for the lease, it reads the keys of every queued job once
        (:meth:`recruiter.store.readahead.ReadAhead.warm`): the one read whose cost is the
        backlog, so it must not run while a lease is held."""
        self.leadership.task = asyncio.current_task()
        try:
            await self.reader.warm(self.clock.now())
        except StoreError as exc:  # the rounds read what they need anyway
            log.warning("readahead.not_warmed", error=first_line(exc))
        await self.leadership.run(self._lead, standby_poll_s=min(1.0, self.config.lease_ttl_s / 4))

    async def _lead(self) -> None:
        """Run rounds while the lease holds (:meth:`Leadership.units`: database errors are
        survived, every step of a round can be repeated).

        Busy, rounds run back to back. Idle, the recruiter waits on a change stream
        (:class:`recruiter.store.doorbell.Doorbell`) for an enqueue or an outcome, or for its
        backoff, whichever comes first: jobs that become due by the clock raise no event.
        A previous leader, or a round of ours that failed, may have locked jobs without
        handing them out: those are released before anything is assigned.
        """
        self.planner.forget(self.config.backoff_to_s)
        self.seen_until = None
        self.saw_no_free_lane = False  # the last round found no lane to fill (bell, below)
        doorbell = Doorbell(self.db, max_await_s=self.config.backoff_to_s)
        needs_rollback = True

        loop = asyncio.get_running_loop()
        last_start = -1.0

        async def one_round() -> bool:
            nonlocal needs_rollback, last_start
            heard = doorbell.drain()
            self.planner.woken(heard, *doorbell.take_arrivals(), caught_up=doorbell.caught_up)
            if self.config.coalesce_s and "scheduled" not in heard:
                await self.leadership.sleep(last_start + self.config.coalesce_s - loop.time())
            last_start = loop.time()
            self.sweeper.start(self.config.sweep_interval_s)
            fired = await self.fire_schedules()
            fired += await self.dependencies.maybe(self.leadership, self.c, self.clock.now())
            report = await self.fenced_round(rollback=needs_rollback)
            needs_rollback = False
            self.saw_no_free_lane = report.free_workers == 0
            return report.busy or fired > 0 or self.planner.known_missed

        def bell(timeout_s: float) -> Awaitable[bool]:
            return doorbell.wait_for_work(timeout_s, no_free_lane=self.saw_no_free_lane,
                                          longest_s=self.config.backoff_to_s)

        async def wait(timeout_s: float) -> bool:
            """The doorbell, or the next due slot (or start a rate allows) if it comes first (a timer, not a poll)."""
            doorbell.seen_until = self.seen_until
            due_in = self.reader.wake_in_s(self.clock.now(), self.firer.wake_in_s)
            bell_s = doorbell.max_await_ms / 1000  # a doorbell wait may last this much longer than asked
            if due_in is None or due_in >= timeout_s + bell_s:
                rang = await bell(timeout_s)
            else:
                rang = await bell(due_in - bell_s) if due_in > bell_s else False
                if not rang:
                    await self.leadership.sleep(self.reader.wake_in_s(self.clock.now(), self.firer.wake_in_s) or 0)
            if doorbell.take("schedules"):
                self.firer.changed()
            return rang

        self.firer.changed()
        try:
            await self.leadership.units(one_round, Pace(self.config.backoff_from_s, self.config.backoff_to_s),
                                        name="round", wait=wait)
        finally:
            await self.sweeper.stop()
            await doorbell.close()


    async def fire_schedules(self) -> int:
        """Write the history once a minute; fire the periodic jobs due now (each in its own fenced transaction)."""
        await self.timeline.flush_if_due(self.leadership)
        now = self.clock.now()
        if not self.firer.due(now):
            return 0
        return await self.firer.fire(self.leadership, now)

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
        self.timer.begin()
        try:
            report = await self._timed_round(rollback)
        except BaseException as exc:
            self.planner.abandoned()
            if self.timer.running:
                self.timer.abandon()
                self.bus.emit(RoundAbandoned(first_line(exc) if isinstance(exc, Exception) else type(exc).__name__))
            raise
        if report.took_s is not None:
            self.planner.lookahead.round_took(report.took_s)
        return report.report

    async def _timed_round(self, rollback: bool) -> _Timed:
        plan = await self.leadership.keeping(self.plan())
        self.timer.mark("plan")
        timed = await self._written(plan, rollback)
        await self.planner.hot.mark(self.c.roster, plan.offered, plan.now)
        if not plan.quiet:  # what was written before its reads began, it read
            self.seen_until = plan.now - SEEN_MARGIN
        return timed

    async def _written(self, plan: RoundPlan, rollback: bool) -> _Timed:
        if not rollback and plan.idle:
            await roster.clear_freed(self.c.roster, plan.freed)  # the marks read: bookkeeping, no fence needed
            self.reader.known.committed((), whole=not plan.quiet)  # nothing to write: what it read whole is known
            phases, took = self.timer.finish()
            self.bus.emit(RoundIdle(took, phases))
            return _Timed(plan.report, None)
        await self.leadership.keep()  # the reads may have been long (a leader's first round): renew before writing
        try:
            return await self._commit(plan, rollback)
        except LocksMissed as missed:
            # Nothing was written; the same plan again, its locks and assignment one by one.
            log.debug("round.written_again", reason=str(missed))
            return await self._commit(plan, rollback)

    async def _commit(self, plan: RoundPlan, rollback: bool) -> _Timed:
        """The round's writes in one transaction fenced by the lease."""
        with self.events.held():
            async with self.leadership.fenced(deferred=True) as inside:
                self.timer.mark("fence")
                if rollback:
                    await self.writes.rollback_unassigned(inside)
                report = await self.carry_out(inside, plan)
                self.fault("round.before_commit")
            if plan.quiet and plan.selection is not None and report.assigned < len(plan.selection.assignments):
                self.planner.missed()  # a job or a worker was not as known: read, at once
            self.timer.mark("commit")
            phases, took = self.timer.finish()
            self.events.emit(RoundCommitted(report.assigned, report.applied, report.free_workers, took, phases))
        self.planner.remember(plan)  # committed
        return _Timed(report, took)

    async def round(self) -> RoundReport:
        """One round without the fence (tests drive it step by step); leaders run :meth:`fenced_round`."""
        plan = await self.plan()
        report = await self.carry_out(self.c, plan)
        self.planner.remember(plan)
        return report

    async def carry_out(self, c: Collections, plan: RoundPlan) -> RoundReport:
        """The writes of a round, on ``c`` (:meth:`recruiter.processes.rounds.RoundWrites.carry_out`)."""
        return await self.writes.carry_out(c, plan, self.lease.epoch)


    async def plan(self) -> RoundPlan:
        """The reads of a round; writes nothing (:meth:`recruiter.processes.planning.RoundPlanner.plan`)."""
        return await self.planner.plan()

    # -- single writes, for tests and tools: each takes the collections it writes to --------

    async def apply_outcomes(self, c: Collections, entries: list[Document], now: datetime,
                             jobs: dict[object, Document] | None = None, *, clear: bool = True) -> int:
        """:meth:`recruiter.processes.rounds.RoundWrites.apply_outcomes` on ``c``."""
        return await self.writes.apply_outcomes(c, entries, now, jobs, clear=clear)

    async def lock(self, c: Collections, assignments: list[Assignment], now: datetime) -> list[Locked]:
        """Lock ``assignments`` on ``c`` as a round would (no documents read: the attempts are not checked)."""
        return await self.writes.lock(c, assignments, now, self.lease.epoch, {})

    async def rollback_unassigned(self, c: Collections) -> None:
        await self.writes.rollback_unassigned(c)
