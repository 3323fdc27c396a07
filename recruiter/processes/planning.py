"""Planning a round: its reads, into a :class:`~recruiter.processes.round_plan.RoundPlan`, and what
the leader keeps in memory from one round to the next to read less.

Invariants:

- :meth:`RoundPlanner.plan` writes nothing: the round's writes are
  :meth:`recruiter.processes.rounds.RoundWrites.carry_out`, in the leader's fenced transaction.
- Only entries that are well formed, available, not stopping, of a release this one works
  beside, and whose process's heartbeat is fresh and names them with their session are given
  work (:meth:`RoundPlanner._live`); the stranded jobs of entries that missed their beats are
  noted for the round to take back.
- What the planner trusts from memory (the copies handed out, the free entries and beats
  kept, the known jobs) is learnt only from committed rounds (:meth:`RoundPlanner.remember`),
  and all of it is forgotten at once (:meth:`RoundPlanner.forget`) when a leadership starts.
- A round reads no roster (a quiet round) only when woken by enqueues alone, with every
  outcome the last round read applied; a job that was not as known is found out by its lock,
  and the next round reads (:meth:`RoundPlanner.missed`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING

import structlog

from recruiter.domain.clock import Clock
from recruiter.domain.documents import WarnOnce, check_job, entry_problem
from recruiter.domain.liveness import FROM_PROCESS, dated_ahead, is_fresh, missed_beats, pick_beats
from recruiter.domain.quarantine import log_quarantined
from recruiter.domain.selection import FreeWorker
from recruiter.processes.hot import HotEntries
from recruiter.processes.lookahead import LookAhead
from recruiter.processes.reading import CandidateReader, Picked
from recruiter.processes.releases import RosterReleases
from recruiter.processes.roster_view import RosterView
from recruiter.processes.round_plan import RoundPlan
from recruiter.processes.round_stats import RoundTimer
from recruiter.processes.sweeper import Sweeper
from recruiter.processes.upkeep import find_stranded
from recruiter.store import heartbeats, scheduled
from recruiter.store.layout import Collections, Document

if TYPE_CHECKING:
    from recruiter.processes.recruiter import RecruiterConfig

log = structlog.get_logger("recruiter.recruiter")

# The jobs handed out are remembered until their outcomes come back; past this many (workers that died), afresh.
MAX_HANDED_OUT = 10_000


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


def free_workers(lanes: list[tuple[Document, int]]) -> list[FreeWorker]:
    """The lanes a round may give work (:meth:`.lookahead.LookAhead.free_lanes`), as the workers it serves."""
    return [FreeWorker(e["_id"], tuple(e["work_on"]), d, process=str(e.get("process") or e["_id"]))
            for e, d in lanes]


class RoundPlanner:
    """The reads of the leader's rounds, and what it keeps between them (see the module's invariants)."""

    def __init__(self, c: Collections, clock: Clock, config: RecruiterConfig, reader: CandidateReader, *,
                 epoch: Callable[[], int | None], sweeper: Sweeper, warned: WarnOnce, timer: RoundTimer) -> None:
        self.c = c  # outside any transaction: the round's reads
        self.clock = clock
        self.config = config  # the leader's (RecruiterProcess.config is this one)
        self.reader = reader
        self.epoch = epoch  # the lease's, for the candidates' reads
        self.sweeper = sweeper
        self.warned = warned
        self.timer = timer
        self._handed_out: dict[object, Document] = {}
        self.lookahead = LookAhead()  # the slots' job lengths and the rounds' time
        self.view = RosterView()  # the free entries and beats read (recruiter.processes.roster_view)
        self.releases = RosterReleases()  # entries of a release this one does not work beside get no work
        self.hot = HotEntries()  # the idle entries kept hot, and the order of the free ones (processes.hot)
        # The next round was woken by enqueued jobs alone, after an idle wait: its candidate
        # reads start with its roster reads, for the free workers kept (see plan()).
        self.early_candidates = False
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

    def forget(self, max_age_s: float) -> None:
        """A leadership starts: nothing read under an earlier one is trusted."""
        self._handed_out.clear()
        self.view.reset()
        self.reader.known.forget()
        self.reader.known.max_age_s = max_age_s
        self.outcomes_settled = False
        self.quiet_after, self.known_missed = None, False  # counted on this leadership's doorbell

    def abandoned(self) -> None:
        """A round failed before it committed: what it read may not have been applied."""
        self.reader.known.abandoned()
        self.outcomes_settled = False

    def missed(self) -> None:
        """A quiet round's job or worker was not as known: read, at once."""
        self.reader.known.forget()
        self.known_missed = True

    def woken(self, heard: set[str], arrivals: list[Document], disturbed: bool, *, caught_up: int = 0) -> None:
        """What the doorbell reported before the next round: the collections whose events rang,
        the jobs enqueued, whether ``scheduled`` may have changed otherwise
        (:meth:`recruiter.store.doorbell.Doorbell.take_arrivals`: each arrival's ``_id`` is a string,
        an integer or an ObjectId), how often it caught up. A job handed out already is not new."""
        fresh = [d for d in arrivals if d["_id"] not in self._handed_out]
        self.reader.heard(fresh, disturbed=disturbed, controls="metadata" in heard)
        self.early_candidates = heard == {"scheduled"}
        if self.known_missed:
            self.quiet_after, self.known_missed = caught_up, False
        elif self.quiet_after is not None and caught_up > self.quiet_after:
            self.quiet_after = None
        self.insert_woken = self.early_candidates and bool(fresh) and not disturbed and self.quiet_after is None

    def remember(self, plan: RoundPlan) -> None:
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
        read = await self.view.read(self.c.roster, asyncio.get_running_loop().time(),
                                    partial(well_formed, self.warned), changed=not plan.quiet)
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
        self.hot.offering([e for e, _ in lanes])
        plan.ahead = {e["_id"] for e, d in lanes if d > 0}
        plan.report.free_workers = len(lanes)
        if lanes:
            workers = free_workers(lanes)
            self.timer.mark("plan")
            picked = await self._chosen(early, workers == guess, workers, plan)
            self.timer.mark("read_candidates")
            plan.selection, plan.documents, plan.paced = picked.selection, picked.documents, picked.paced
            plan.gates = picked.gates
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
            return await self.reader.select(workers, now, self.epoch(), self.config.counting_scheme,
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
        warn_dated_ahead(self.warned, read, plan.now)
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


def warn_dated_ahead(warned: WarnOnce, read: list[Document], now: datetime) -> None:
    """One warning per heartbeat document dated too far ahead to be believed (its dates as read):
    its entries are given no work and taken for silent (:func:`recruiter.domain.liveness.dated_ahead`)."""
    for b in read:
        if (problem := dated_ahead(b, now)) is None:
            continue
        source = b.get(FROM_PROCESS, b["_id"])
        if warned.first(("heartbeats", source), f"ahead {b.get('last_seen_at')!r} {b.get('fresh_until')!r}"):
            log.warning("heartbeat.malformed", process=str(source)[:100], worker_id=str(b["_id"])[:100],
                        reason=problem, detail="dated too far ahead to be believed: its slots are given no "
                                               "work, and a job they hold is taken back, until it beats again")


def well_formed(warned: WarnOnce, entries: list[Document]) -> list[Document]:
    """The roster entries a round can use; a malformed one is skipped, warned of once (the cleaner removes it)."""
    kept = []
    for e in entries:
        problem = entry_problem(e)
        if problem is None:
            kept.append(e)
        elif warned.first(("roster", e.get("_id")), problem):
            log.warning("worker.malformed", worker_id=str(e.get("_id"))[:100], reason=problem,
                        detail="this roster entry is skipped until it is fixed or removed")
    return kept
