"""The recruiter process: one leader assigns ready jobs to free workers in rounds.

A round first reads (:meth:`RecruiterProcess.plan`), into a
:class:`~recruiter.processes.rounds.RoundPlan` value:

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
import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from recruiter.domain.clock import Clock
from recruiter.domain.documents import Malformed, WarnOnce, check_job, entry_problem
from recruiter.domain.events import RoundAbandoned, RoundCommitted, RoundIdle
from recruiter.domain.liveness import FROM_PROCESS, dated_ahead, is_fresh, missed_beats, pick_beats
from recruiter.domain.quarantine import log_quarantined
from recruiter.domain.selection import DEFAULT_SCHEME, Assignment, CountingScheme, FreeWorker
from recruiter.processes.events import Bus
from recruiter.processes.firing import ScheduleFirer
from recruiter.processes.hot import HotEntries
from recruiter.processes.leadership import Fault, LeaderProcess, Leadership, Pace, leader_owner, no_fault
from recruiter.processes.logs import AfterCommit
from recruiter.processes.lookahead import LookAhead
from recruiter.processes.reading import CandidateReader, Picked
from recruiter.processes.releases import RosterReleases
from recruiter.processes.roster_view import RosterView
from recruiter.processes.round_stats import RoundTimer
from recruiter.processes.rounds import Locked, LocksMissed, RoundPlan, RoundReport, RoundWrites
from recruiter.processes.timeline import Timeline
from recruiter.processes.upkeep import find_stranded, sweep
from recruiter.store import heartbeats, roster, scheduled
from recruiter.store.connection import StoreError, first_line
from recruiter.store.layout import AsyncDb, Collections, Document
from recruiter.store.leases import MAX_TTL
from recruiter.store.wakeup import Doorbell

log = structlog.get_logger("recruiter.recruiter")

# The jobs handed out are remembered until their outcomes come back; past this many (workers that died), afresh.
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


class Sweeper:
    """Looks for malformed jobs that no candidate read meets, in a task of its own so rounds
    go on meanwhile; the next round quarantines what it found (:meth:`take`)."""

    def __init__(self, c: Collections) -> None:
        self.c = c
        self.task: asyncio.Task[None] | None = None
        self.due = 0.0
        self.found: list[Malformed] = []

    def start(self, interval_s: float) -> None:
        loop = asyncio.get_running_loop()
        if self.task is not None or loop.time() < self.due:
            return

        async def look() -> None:
            started = loop.time()
            try:
                self.found.extend(await sweep(self.c.scheduled))
            except StoreError as exc:
                log.warning("sweep.failed", error=first_line(exc))
            finally:
                took = loop.time() - started
                self.due = loop.time() + max(interval_s, 20 * took)
                self.task = None

        self.task = asyncio.create_task(look(), name="recruiter.sweep")

    def take(self) -> list[Malformed]:
        found, self.found = self.found, []
        return found

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, StoreError):
                await self.task
            self.task = None
        self.due = 0.0


@dataclass(frozen=True)
class _Timed:
    report: RoundReport
    took_s: float | None  # None: an idle round


def finishing(plan: RoundPlan) -> list[tuple[str, str]]:
    """The (group, tenant) of each job whose outcome this round applies, which unlocks it: flow
    control counts them as no longer running (only outcomes whose lock token is the job's)."""
    out = []
    for e in plan.outcomes:
        job = plan.outcome_jobs.get(e["outcome"]["job"])
        if job and job.get("locked") and job.get("lock_token") == e["outcome"].get("token"):
            group, tenant = job.get("group"), job.get("tenant") or ""
            if isinstance(group, str) and isinstance(tenant, str):
                out.append((group, tenant))
    return out

# How far before a reading round's start the doorbell takes events for new: above the clock's error (store.clock).
SEEN_MARGIN = timedelta(milliseconds=100)


def free_workers(lanes: list[tuple[Document, int]]) -> list[FreeWorker]:
    """The lanes a round may give work (:meth:`.lookahead.LookAhead.free_lanes`), as the workers it serves."""
    return [FreeWorker(e["_id"], tuple(e["work_on"]), d, process=str(e.get("process") or e["_id"]))
            for e, d in lanes]


class RecruiterProcess(LeaderProcess):

    def __init__(self, db: AsyncDb, clock: Clock, config: RecruiterConfig, *, owner: str | None = None,
                 bus: Bus | None = None) -> None:
        self.db = db
        self.c = Collections.of(db)  # outside any transaction: the round's reads
        self.clock = clock
        self.config = config
        self.owner = owner or leader_owner()
        self.bus = bus or Bus.logging()
        self.timeline = Timeline.on(self.bus, clock, self.owner)  # the history over time (processes.timeline)
        self.leadership = Leadership(db, "recruiter", self.owner, clock, config.lease_ttl_s, bus=self.bus)
        self.fault: Fault = no_fault
        # What a fenced round's writes make true is logged (and emitted) once its transaction has committed.
        self.events = AfterCommit(log, self.bus)
        self.timer = RoundTimer()
        self.writes = RoundWrites(self.events, self.leadership.check, lambda point: self.fault(point),
                                  self.timer.mark)
        self.reader = CandidateReader(self.c)
        self.sweeper = Sweeper(self.c)
        self.warned = WarnOnce()
        self.firer = ScheduleFirer(db, self.warned, self.events)
        self._handed_out: dict[object, Document] = {}
        self.lookahead = LookAhead()  # the slots' job lengths and the rounds' time
        self.view = RosterView()  # the free entries and beats read (recruiter.processes.roster_view)
        self.releases = RosterReleases()  # entries of a release this one does not work beside get no work
        self.hot = HotEntries()  # the idle entries kept hot, and the order of the free ones (processes.hot)
        self.early_candidates = False  # woken by enqueues alone, idle before: candidate reads start at once
        self.early_used = 0  # rounds whose early candidate reads were the ones chosen from
        # The next round was woken by enqueues alone, with nothing else heard since the last:
        # it reads no roster unless a check is due, and answers candidates from what is known
        # (recruiter.processes.known_jobs). A known job that was not as known is found out by
        # its lock; the next round then runs at once, reading.
        self.insert_woken = False
        self.known_missed = False
        # After a known job was not as known, no quiet round until the doorbell has caught up
        # (its stream found empty more times than this): a busy spell leaves the insert events of
        # the jobs it handled unread, each of which would otherwise wake a quiet round in vain.
        self.quiet_after: int | None = None
        # Every outcome the last round read was applied (none deferred, the round did not fail):
        # a round that reads no roster could otherwise hand work to an entry still holding one.
        self.outcomes_settled = False
        # The server time before which every write is reflected in the last reading round (its
        # start, less a margin for the clock's estimate): the doorbell's events of such writes wake
        # no round (``seen_until`` of recruiter.store.wakeup.Doorbell).
        self.seen_until: datetime | None = None

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
        (:class:`recruiter.store.wakeup.Doorbell`) for an enqueue or an outcome, or for its
        backoff, whichever comes first: jobs that become due by the clock raise no event.
        A previous leader, or a round of ours that failed, may have locked jobs without
        handing them out: those are released before anything is assigned.
        """
        self._handed_out.clear()
        self.view.reset()
        self.reader.known.forget()
        self.reader.known.max_age_s = self.config.backoff_to_s
        self.outcomes_settled = False
        self.seen_until = None
        self.quiet_after, self.known_missed = None, False  # counted on this leadership's doorbell
        doorbell = Doorbell(self.db, max_await_s=self.config.backoff_to_s)
        needs_rollback = True

        loop = asyncio.get_running_loop()
        last_start = -1.0

        async def one_round() -> bool:
            nonlocal needs_rollback, last_start
            heard = doorbell.drain()
            self.woken(heard, *doorbell.take_arrivals(), caught_up=doorbell.caught_up)
            if self.config.coalesce_s and "scheduled" not in heard:
                await self.leadership.sleep(last_start + self.config.coalesce_s - loop.time())
            last_start = loop.time()
            self.sweeper.start(self.config.sweep_interval_s)
            fired = await self.fire_schedules()
            report = await self.fenced_round(rollback=needs_rollback)
            needs_rollback = False
            return report.busy or fired > 0 or self.known_missed

        async def wait(timeout_s: float) -> bool:
            """The doorbell, or the next due slot (or start a rate allows) if it comes first (a timer, not a poll)."""
            doorbell.seen_until = self.seen_until
            due_in = self.reader.wake_in_s(self.clock.now(), self.firer.wake_in_s)
            bell_s = doorbell.max_await_ms / 1000  # a doorbell wait may last this much longer than asked
            if due_in is None or due_in >= timeout_s + bell_s:
                rang = await doorbell.wait(timeout_s)
            else:
                rang = await doorbell.wait(due_in - bell_s) if due_in > bell_s else False
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

    def woken(self, heard: set[str], arrivals: list[Document], disturbed: bool, *, caught_up: int = 0) -> None:
        """What the doorbell reported before the next round: the collections whose events rang,
        the jobs enqueued, whether ``scheduled`` may have changed otherwise
        (:meth:`recruiter.store.wakeup.Doorbell.take_arrivals`: each arrival's ``_id`` is a string,
        an integer or an ObjectId), how often it caught up. A job handed out already is not new."""
        fresh = [d for d in arrivals if d["_id"] not in self._handed_out]
        self.reader.heard(fresh, disturbed=disturbed, controls="metadata" in heard)
        self.early_candidates = heard == {"scheduled"}
        if self.known_missed:
            self.quiet_after, self.known_missed = caught_up, False
        elif self.quiet_after is not None and caught_up > self.quiet_after:
            self.quiet_after = None
        self.insert_woken = self.early_candidates and bool(fresh) and not disturbed and self.quiet_after is None

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
            self.reader.known.abandoned()
            self.outcomes_settled = False
            if self.timer.running:
                self.timer.abandon()
                self.bus.emit(RoundAbandoned(first_line(exc) if isinstance(exc, Exception) else type(exc).__name__))
            raise
        if report.took_s is not None:
            self.lookahead.round_took(report.took_s)
        return report.report

    async def _timed_round(self, rollback: bool) -> _Timed:
        plan = await self.leadership.keeping(self.plan())
        self.timer.mark("plan")
        timed = await self._written(plan, rollback)
        await self.hot.mark(self.c.roster, plan.offered, plan.now)
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
                self.reader.known.forget()  # a job or a worker was not as known: read, at once
                self.known_missed = True
            self.timer.mark("commit")
            phases, took = self.timer.finish()
            self.events.emit(RoundCommitted(report.assigned, report.applied, report.free_workers, took, phases))
        self._remember(plan)  # committed
        return _Timed(report, took)

    async def round(self) -> RoundReport:
        """One round without the fence (tests drive it step by step); leaders run :meth:`fenced_round`."""
        plan = await self.plan()
        report = await self.carry_out(self.c, plan)
        self._remember(plan)
        return report

    async def carry_out(self, c: Collections, plan: RoundPlan) -> RoundReport:
        """The writes of a round, on ``c`` (:meth:`recruiter.processes.rounds.RoundWrites.carry_out`)."""
        return await self.writes.carry_out(c, plan, self.lease.epoch)

    def _remember(self, plan: RoundPlan) -> None:
        """After a round is committed: its fairness cursor is the current one; and keep
        the jobs it handed out, until their outcomes are applied: a job
        is not changed while its worker has it, so its archived copy can be made from
        this one without reading it again (only if the outcome's lock token matches)."""
        self.reader.known.committed([a.job_id for a in plan.selection.assignments] if plan.selection else (),
                                    whole=not plan.quiet)
        if plan.selection is not None:
            self.reader.committed(plan.selection)
            # Given work, or found no longer available by the assignment: not free either way (a
            # worker whose job was not locked was not offered it, and stays free).
            self.view.taken(plan.offered)
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
        chosen jobs. Writes nothing.

        A round woken by enqueued jobs alone, after an idle wait (:attr:`early_candidates`),
        starts its candidate reads at once, for the free workers kept from the last rounds
        (:meth:`_kept_workers`), at the same time as its roster reads, instead of after them:
        one job's wait from enqueue to start is mostly round trips one after the other. What
        those reads chose is used only if the roster reads then find exactly those free
        workers and no outcome; else they are dropped and the round reads its candidates
        again, as any round does."""
        now = self.clock.now()
        plan = RoundPlan(now, quiet=self.insert_woken and self.outcomes_settled
                         and not self.view.full_due(asyncio.get_running_loop().time()))
        guess = self._kept_workers(now) if self.early_candidates and not plan.quiet else None
        self.early_candidates = self.insert_woken = False
        early = asyncio.ensure_future(self._select(guess, now, [])) if guess else None
        try:
            await self._plan(plan, guess, early)
        finally:
            if early is not None:  # over, or not needed any more (the round failed first)
                early.cancel()
                await asyncio.gather(early, return_exceptions=True)
        return plan

    async def _plan(self, plan: RoundPlan, guess: list[FreeWorker] | None,
                    early: asyncio.Future[Picked] | None) -> None:
        now = plan.now
        read = await self.view.read(self.c.roster, asyncio.get_running_loop().time(), self._well_formed,
                                    changed=not plan.quiet)
        entries, plan.freed = read.entries, read.marks
        self.timer.mark("read_roster")
        plan.malformed = self.sweeper.take()
        plan.outcomes = [e for e in entries if e.get("outcome")]
        await self._read_outcome_jobs(plan)
        self.timer.mark("read_jobs")
        available = [e for e in entries if e.get("available") and not e.get("stopping") and e.get("work_on")]
        free = self.hot.order(await self._live(plan, entries, available), now)
        self.timer.mark("read_beats")
        # Idle slots' lanes first (domain.lanes), then processes.hot's order; a busy slot topped up if worth it.
        self.lookahead.note_run_times(plan.outcomes)
        lanes = self.releases.beside(self.lookahead.free_lanes(free, entries, self.config.round_size))
        plan.ahead = {e["_id"] for e, d in lanes if d > 0}
        plan.report.free_workers = len(lanes)
        if lanes:
            workers = free_workers(lanes)
            self.timer.mark("plan")
            picked = await self._chosen(early, workers == guess, workers, plan)
            self.timer.mark("read_candidates")
            plan.selection, plan.documents, plan.paced = picked.selection, picked.documents, picked.paced
            plan.cursor_write = self.reader.cursor_write(picked.selection.cursor)
            plan.malformed += picked.malformed
        read_outcomes = bool(plan.outcomes)
        self.lookahead.defer_lone_outcomes(plan, entries)
        self.outcomes_settled = not (read_outcomes and not plan.outcomes)  # none left for a later round

    def _kept_workers(self, now: datetime) -> list[FreeWorker] | None:
        """The free workers a round finds when its roster reads bring no change: those of the
        entries kept free (:class:`RosterView`) whose kept beats are fresh, as :meth:`_plan`
        lays them out. None when any of them needs its beat read (the round may find it dead)."""
        entries = list(self.view.free.values())
        available = [e for e in entries if e.get("available") and not e.get("stopping") and e.get("work_on")]
        if not available or any(self.view.needs_beat(e, now) for e in available):
            return None
        free = self.hot.order(available, now)
        lanes = self.releases.beside(self.lookahead.free_lanes(free, entries, self.config.round_size))
        return free_workers(lanes) or None

    async def _select(self, workers: list[FreeWorker], now: datetime, finishing_: list[tuple[str, str]],
                      *, quiet: bool = False) -> Picked:
        self.reader.from_memory = quiet
        try:
            return await self.reader.select(workers, now, self.lease.epoch, self.config.counting_scheme,
                                            finishing=finishing_)
        finally:
            self.reader.from_memory = False

    async def _chosen(self, early: asyncio.Future[Picked] | None, same: bool, workers: list[FreeWorker],
                      plan: RoundPlan) -> Picked:
        """The round's choice for ``workers``: the early reads' if they were for these same
        workers (``same``) and no outcome frees a running job (flow control counts those), else
        its own, read once the early ones are over (one reader, one read at a time)."""
        ending = finishing(plan)
        if early is not None:
            picked = (await asyncio.gather(early, return_exceptions=True))[0]
            if same and not ending and isinstance(picked, Picked):
                self.early_used += 1
                return picked
        return await self._select(workers, plan.now, ending, quiet=plan.quiet)

    async def _read_outcome_jobs(self, plan: RoundPlan) -> None:
        """The jobs the plan's outcomes name: the copies this leader handed out, else read."""
        for e in plan.outcomes:
            known = self._handed_out.get(e["outcome"]["job"])
            if known is not None and known.get("lock_token") == e["outcome"]["token"]:
                plan.outcome_jobs[known["_id"]] = known
        unknown = [e["outcome"]["job"] for e in plan.outcomes if e["outcome"]["job"] not in plan.outcome_jobs]
        if unknown:
            for j in await scheduled.read_jobs(self.c.scheduled, unknown):
                if (m := check_job(j)) is not None:
                    plan.malformed.append(m)  # quarantined; its outcome is cleared, not applied
                else:
                    plan.outcome_jobs[j["_id"]] = j

    async def _live(self, plan: RoundPlan, entries: list[Document], available: list[Document]) -> list[Document]:
        """The ``available`` entries whose heartbeat is fresh; notes in ``plan`` the stranded jobs
        of entries that missed their beats. One read by ``_id`` (only the entries whose kept beat is
        no longer fresh, or not their registration's, :mod:`recruiter.processes.roster_view`) and by
        ``fresh_until``, both indexed; one more only when an entry not among ``entries``
        (available or holding an outcome, so holding no job) missed its beats."""
        needing = [e for e in available if self.view.needs_beat(e, plan.now)]
        needed = [e["_id"] for e in needing]
        needed_ids = set(needed)  # well-formed entries: their ids are hashable (RosterView keys them)
        read, malformed = await heartbeats.read_round_beats(self.c.heartbeats, needing, plan.now,
                                                            stale=self.view.stale_due(plan.now))
        for doc_id in malformed:
            if self.warned.first(("heartbeats", doc_id), "malformed"):
                log.warning("heartbeat.malformed", process=str(doc_id)[:100],
                            detail="this worker process's heartbeat document names no slot that can be read; "
                                   "its slots are given no work until it beats again")
        self._warn_dated_ahead(read, plan.now)
        # A process's document gives one beat per entry it names; an entry's is the one with its session.
        # Only the beats read for it replace an entry's kept one: a stale document of an earlier
        # registration of the same id, read for the stranded jobs, must not hide its fresh one.
        picked = pick_beats(read, {e["_id"]: e for e in needing})  # only the needed ones are used
        self.view.beats.update((i, picked[i]) for i in needed if i in picked)
        self.view.extend_beats(read)
        beats = self.view.beats
        known = {e["_id"] for e in entries}
        plan.stranded = await find_stranded(
            self.c, [b for b in read if b["_id"] not in known and missed_beats(b, plan.now)])
        # An entry that needed no read has its kept beat, found fresh just above: only the others
        # are judged again (at 1 600 entries, judging each twice was a tenth of the leader's time).
        return [e for e in available
                if e["_id"] not in needed_ids or is_fresh(beats.get(e["_id"]), e, plan.now)]

    def _warn_dated_ahead(self, read: list[Document], now: datetime) -> None:
        """One warning per heartbeat document dated too far ahead to be believed (its dates as read):
        its entries are given no work and taken for silent (:func:`recruiter.domain.liveness.dated_ahead`)."""
        for b in read:
            if (problem := dated_ahead(b, now)) is None:
                continue
            source = b.get(FROM_PROCESS, b["_id"])
            if self.warned.first(("heartbeats", source), f"ahead {b.get('last_seen_at')!r} {b.get('fresh_until')!r}"):
                log.warning("heartbeat.malformed", process=str(source)[:100], worker_id=str(b["_id"])[:100],
                            reason=problem, detail="dated too far ahead to be believed: its slots are given no "
                                                   "work, and a job they hold is taken back, until it beats again")

    def _well_formed(self, entries: list[Document]) -> list[Document]:
        """The roster entries a round can use; a malformed one is skipped, warned of once (the cleaner removes it)."""
        kept = []
        for e in entries:
            problem = entry_problem(e)
            if problem is None:
                kept.append(e)
            elif self.warned.first(("roster", e.get("_id")), problem):
                log.warning("worker.malformed", worker_id=str(e.get("_id"))[:100], reason=problem,
                            detail="this roster entry is skipped until it is fixed or removed")
        return kept

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
