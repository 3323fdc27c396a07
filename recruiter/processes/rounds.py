"""The writes of a recruiter round, as functions of the round's values.

A round is read first (:meth:`recruiter.processes.recruiter.RecruiterProcess.plan`)
into a :class:`~recruiter.processes.round_plan.RoundPlan`: a value holding what it read and
chose. Its writes
(:meth:`RoundWrites.carry_out`) then take that plan and the
:class:`~recruiter.store.layout.Collections` of the round's fenced transaction:

1. take back stranded jobs, deleting their entries; quarantine malformed jobs;
2. apply the outcomes in bulk (archive, or put back in the queue; a job resubmitted
   while it ran goes back to the queue whatever its outcome, even when the resubmit
   came after the round read it: the archive's delete and the reschedule match only
   jobs without one, and the others are read again);
3. save what moved in the fairness cursor;
4. lock the picked jobs with one bulk write;
5. assign them with ONE ``update_many`` carrying the ``assigned_to`` map and
   the jobs, which also clears the outcomes of the workers it reaches; clear the others.
   Inside a transaction, for a round of a few jobs, 4 and 5 travel as one command where the
   server has it (:meth:`RoundWrites.lock_and_assign`); if either falls short, :class:`LocksMissed`
   aborts the transaction and the round is written again with them apart.

Invariant: every write takes the collections it writes to as an argument (no
write reaches a collection the caller did not hand over, so a round's writes are
all inside its fence), and every write is conditional (``locked: false`` and
the attempts read, lock tokens, ``available``), so any step may be repeated
after a crash without harm.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import structlog
from bson import ObjectId

from recruiter.domain.job import Status
from recruiter.domain.outcome import jobs_referenced_by
from recruiter.domain.selection import Assignment
from recruiter.processes.adding import checked_additions
from recruiter.processes.applying import apply_sorted, sort_outcomes

# What an assignment carries and a round's plan, moved to their own modules; still importable from here.
from recruiter.processes.assignment_copies import MAX_JOB_COPY_BYTES as MAX_JOB_COPY_BYTES
from recruiter.processes.assignment_copies import MAX_ROUND_COPY_BYTES as MAX_ROUND_COPY_BYTES
from recruiter.processes.assignment_copies import NOT_SENT_TO_WORKERS as NOT_SENT_TO_WORKERS
from recruiter.processes.assignment_copies import copies_to_send as copies_to_send
from recruiter.processes.assignment_copies import handed_out as handed_out
from recruiter.processes.assignment_copies import paced_copies as paced_copies
from recruiter.processes.assignment_copies import picks_of as picks_of
from recruiter.processes.assignment_copies import worker_copy as worker_copy
from recruiter.processes.logs import AfterCommit
from recruiter.processes.round_plan import CursorWrite as CursorWrite
from recruiter.processes.round_plan import Locked as Locked
from recruiter.processes.round_plan import RoundPlan as RoundPlan
from recruiter.processes.round_plan import RoundReport as RoundReport
from recruiter.processes.upkeep import quarantine, take_back
from recruiter.store import metadata, roster, scheduled
from recruiter.store.layout import Collections, Document
from recruiter.store.together import update_together

log = structlog.get_logger("recruiter.recruiter")

# A round that hands out at most this many jobs sends its fence, locks and assignment as one
# command (RoundWrites.lock_and_assign): it is the round an idle leader runs for a new job, whose
# round trips are its latency. A bigger round would save the same round trips over many jobs:
# nothing per job, for a round whose every lock must land at once or be written again.
TOGETHER_MAX_JOBS = 4


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


class LocksMissed(Exception):
    """A round's locks and assignment, sent as one command, did not all land (a job or a worker
    changed since the round read it): raised inside the round's transaction, which aborts; the
    round is then written again with its locks and assignment one by one, which handle that."""


def lock_requests(assignments: Sequence[Assignment], now: datetime, epoch: int | None,
                  read: dict[object, Document | None]
                  ) -> tuple[dict[object, ObjectId], dict[str, object], list[scheduled.Lock]]:
    """Each job's new lock token, the fields every lock sets, and the locks (each conditional on
    the attempt count ``read``, where the job was read)."""
    tokens = {a.job_id: ObjectId() for a in assignments}
    common = {"locked": True, "locked_at": now, "lock_epoch": epoch, "status": Status.ASSIGNED.value}
    locks = [scheduled.Lock(a.job_id, None if (doc := read[a.job_id]) is None else doc.get("attempts", 0),
                            a.worker_id, tokens[a.job_id]) for a in assignments]
    return tokens, common, locks


def locked_copy(doc: Document, common: dict[str, object], worker_id: str, token: ObjectId) -> Document:
    """The job as read, with its lock applied: what was locked, exactly."""
    return {**doc, **common, "locked_by": worker_id, "lock_token": token, "attempts": doc.get("attempts", 0) + 1}


@dataclass
class Together:
    """Whether a round sends its locks and assignment as one command (:mod:`recruiter.store.together`):
    while the server has that command, except once after :class:`LocksMissed`."""

    supported: bool = True
    apart_once: bool = False

    def now(self) -> bool:
        apart, self.apart_once = self.apart_once, False
        return self.supported and not apart


@dataclass(frozen=True)
class RoundWrites:
    """The writes of a round. ``check`` raises when the lease is no longer held (it is
    checked before each write); ``fault`` is the test hook; ``events`` holds what the
    writes make true until the round's transaction has committed; ``mark`` times its phases."""

    events: AfterCommit
    check: Callable[[], None]
    fault: Callable[[str], None]
    mark: Callable[[str], None] = lambda phase: None  # the round's timer (RoundTimer.mark)
    together: Together = field(default_factory=Together)
    held_jobs: Callable[[], bool] = lambda: True  # whether jobs may wait for others (processes.dependencies)

    async def carry_out(self, c: Collections, plan: RoundPlan, epoch: int | None) -> RoundReport:
        """The writes of a round on ``c``: take back stranded jobs, apply outcomes, move the
        fairness cursor, lock, assign (see the module doc). When ``c`` is a transaction's, the
        locks and the assignment may go as one command (:meth:`lock_and_assign`;
        :class:`LocksMissed` aborts the transaction)."""
        report = plan.report
        if plan.stranded:
            self.check()
            plan.taken_back = await take_back(c, plan.stranded, plan.now)
            report.taken_back = len(plan.taken_back)
        if plan.malformed:
            self.check()
            plan.quarantined = await quarantine(c, plan.malformed, plan.now)
        quarantined = {m.id for m in plan.malformed if _hashable(m.id)}
        applicable = [e for e in plan.outcomes if e["outcome"]["job"] not in quarantined]
        if applicable:
            self.check()
            report.applied = await self.apply_outcomes(c, applicable, plan.now, plan.outcome_jobs, clear=False)
        self.mark("apply")
        await self.save_cursor(c, plan.cursor_write)
        self.mark("cursor")
        assigned = (await self.hand_out(c, plan, epoch, together=c.in_transaction)
                    if plan.selection and plan.selection.assignments else set())
        self.mark("assign")
        # The assignment removed the outcomes of the workers it reached; clear the others.
        await clear_outcomes(c, [e for e in plan.outcomes if e["_id"] not in assigned])
        await roster.clear_freed(c.roster, plan.freed)
        self.mark("clear")
        return report

    async def hand_out(self, c: Collections, plan: RoundPlan, epoch: int | None, *, together: bool = False
                       ) -> set[str]:
        """Lock the plan's picks and assign them (with ``together``, as one command where it can);
        note in ``plan`` the copies handed out."""
        assert plan.selection is not None
        self.check()
        small = len(plan.selection.assignments) <= TOGETHER_MAX_JOBS
        sent = await self.lock_and_assign(c, plan, epoch) if together and small and self.together.now() else None
        if sent is None:
            locked = await self.lock(c, plan.selection.assignments, plan.now, epoch, plan.documents)
            self.mark("lock")
            self.check()
            copies = paced_copies(locked, plan)
            assigned = await self.assign(c, locked, plan.now, copies, ahead=plan.ahead)
        else:
            locked, copies, assigned = sent
        # Only the copies are remembered: a big job is read again when its outcome comes back.
        plan.handed_out = handed_out(locked, copies, assigned)
        plan.offered = {lk.assignment.worker_id for lk in locked}
        plan.report.assigned = len(assigned)
        if assigned:
            self.events.debug("round.assigned", assigned=len(assigned), free_workers=plan.report.free_workers,
                              ahead=len(plan.ahead & assigned))
        return assigned

    async def save_cursor(self, c: Collections, write: CursorWrite | None) -> None:
        """Write what moved in the cursor; it is taken as current once the round is committed,
        so a round that aborts leaves the turns as they were."""
        if write is None:
            return
        self.check()
        if write.replace:  # replace what was malformed rather than update inside it
            await metadata.replace_cursor(c.metadata, write.document)
        else:
            await metadata.update_cursor(c.metadata, write.document)

    async def apply_outcomes(self, c: Collections, entries: list[Document], now: datetime,
                             jobs: dict[object, Document] | None = None, *, clear: bool = True) -> int:
        """Archive or reschedule the jobs whose outcomes workers recorded in ``entries``
        (``jobs``: those jobs as read by the round, else read here); idempotent. With
        ``clear``, the outcomes are then removed from the entries (a round leaves that
        to its assignment where it can)."""
        outcomes = {e["outcome"]["job"]: (e["_id"], e["outcome"]) for e in entries}
        if jobs is None:
            jobs = {j["_id"]: j for j in await scheduled.read_jobs(c.scheduled, list(outcomes))}
        additions = await checked_additions(c, outcomes, jobs, now, self.events)  # rewrites the outcomes that add steps
        applied = await apply_sorted(c, sort_outcomes(outcomes, jobs, now), now, self.events, self.fault,
                                     dependents=self.held_jobs(), additions=additions)
        if clear:
            await clear_outcomes(c, entries)
        return applied

    async def lock_and_assign(self, c: Collections, plan: RoundPlan, epoch: int | None
                              ) -> tuple[list[Locked], list[Document], set[str]] | None:
        """:meth:`lock` and :meth:`assign` as ONE command (:mod:`recruiter.store.together`), when
        the round read every job it locks (so the locked copies are known without reading them
        back); None, having written nothing, otherwise or where the server has no such command.
        Raises :class:`LocksMissed` when a lock or an assignment did not land."""
        assert plan.selection is not None
        assignments = plan.selection.assignments
        read = {a.job_id: plan.documents.get(a.job_id) for a in assignments}
        if not all(read.values()):
            return None
        tokens, common, locks = lock_requests(assignments, plan.now, epoch, read)
        locked = [Locked(a, tokens[a.job_id], locked_copy(doc, common, a.worker_id, tokens[a.job_id]))
                  for a in assignments if (doc := read[a.job_id]) is not None]
        copies = paced_copies(locked, plan)
        statements = [(c.scheduled, f, u) for f, u in scheduled.lock_statements(locks, common)]
        statements.append((c.roster, *roster.assign_statement(picks_of(locked, copies, plan.ahead), plan.now)))
        counts = await update_together(statements, fence=c.fence)
        if counts is None:
            self.together.supported = False
            return None
        self.mark("lock")
        workers = {lk.assignment.worker_id for lk in locked}
        if sum(counts[:-1]) != len(assignments) or counts[-1] != len(workers):
            self.together.apart_once = True
            raise LocksMissed(f"{sum(counts[:-1])} of {len(assignments)} locks and {counts[-1]} of "
                              f"{len(workers)} assignments landed")
        return locked, copies, workers

    async def lock(self, c: Collections, assignments: Sequence[Assignment], now: datetime, epoch: int | None,
                   documents: dict[object, Document]) -> list[Locked]:
        """Lock the chosen jobs for their workers; returns the ones that were still free.

        Each lock is conditional on the job being unlocked with the attempt count
        the round read (``documents``), so the document read, with the lock applied, is
        exactly what was locked: it travels to the worker as is. Only when some lock did
        not land are the jobs read back, to tell by their token which are ours.
        """
        read = {a.job_id: documents.get(a.job_id) for a in assignments}
        tokens, common, locks = lock_requests(assignments, now, epoch, read)
        changed = await scheduled.lock_jobs(c.scheduled, locks, common)
        if changed == len(assignments) and all(read.values()):
            return [Locked(a, tokens[a.job_id], locked_copy(doc, common, a.worker_id, tokens[a.job_id]))
                    for a in assignments if (doc := read[a.job_id]) is not None]
        jobs = {d["_id"]: d for d in await scheduled.read_jobs(c.scheduled, list(tokens))}
        return [
            Locked(a, tokens[a.job_id], jobs[a.job_id])
            for a in assignments
            if a.job_id in jobs and jobs[a.job_id].get("lock_token") == tokens[a.job_id]
        ]

    async def assign(self, c: Collections, locked: list[Locked], now: datetime,
                     copies: list[Document] | None = None, *, ahead: set[str] | frozenset[str] = frozenset()
                     ) -> set[str]:
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
        picks = picks_of(locked, copies or copies_to_send(locked), ahead)
        if await roster.assign(c.roster, picks, now) == len(mapping):
            return set(mapping)
        # Some workers went away or started stopping between the read and the update.
        got = {
            d["_id"]
            for d in await roster.read_assignments(c.roster, list(mapping))
            if (d.get("assigned_to") or {}).get(d["_id"]) == mapping[d["_id"]]
        }
        missed = [lk for lk in locked if lk.assignment.worker_id not in got]
        await self.rollback(c, [(lk.assignment.job_id, lk.token) for lk in missed])
        return got

    async def rollback(self, c: Collections, locks: list[tuple[object, object]]) -> None:
        if not locks:
            return
        released = await scheduled.roll_back(c.scheduled, locks)
        if released:
            self.events.info("jobs.rolled_back", count=released)

    async def rollback_unassigned(self, c: Collections) -> None:
        """Release locks a previous leader took but never handed to a worker."""
        # A lock that is itself malformed is left to the sweep, which quarantines its job.
        locked = [j for j in await scheduled.read_locks(c.scheduled)
                  if isinstance(j.get("locked_by"), str) and isinstance(j.get("lock_token"), ObjectId)]
        if not locked:
            return
        refs = {w["_id"]: jobs_referenced_by(w)
                for w in await roster.read_references(c.roster, list({j.get("locked_by") for j in locked}))}
        # A job whose worker is gone is a crash, handled by the cleaner.
        orphans: list[tuple[object, object]] = [
            (j["_id"], j["lock_token"]) for j in locked
            if j.get("locked_by") in refs and j["_id"] not in refs[j["locked_by"]]]
        await self.rollback(c, orphans)


async def clear_outcomes(c: Collections, entries: list[Document]) -> None:
    """Remove the outcomes of ``entries`` that are still the ones read."""
    await roster.clear_outcomes(c.roster, [(e["_id"], e["outcome"]["token"]) for e in entries])
