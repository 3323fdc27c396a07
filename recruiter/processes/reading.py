"""The reads of a recruiter round that choose its jobs: candidates, pause switches, the cursor.

:class:`CandidateReader` keeps what stays true between rounds: the read-ahead's
knowledge of the ready jobs (:mod:`recruiter.store.readahead`), the fairness
cursor as last committed, the pause switches as last read. A round asks it to
:meth:`~CandidateReader.select` and gets a :class:`Picked` value back: the
selection, the candidate documents read whole, the malformed jobs met.

Invariant: nothing here writes. Reads run before the round's transaction
(reads need no fence); the cursor the round moved is taken as current only
once the round has committed (:meth:`CandidateReader.committed`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import cast

import structlog

from recruiter.domain.candidates import Query, candidate_from, plan_round
from recruiter.domain.control import Paused, cursor_changes, cursor_document, read_cursor, read_switches
from recruiter.domain.documents import Malformed, WarnOnce, check_job
from recruiter.domain.limits import NO_LIMITS, allowance, count_by_key, count_locked, keys_of
from recruiter.domain.pacing import (
    STATE_FIELD,
    Bucket,
    Key,
    LimitState,
    start_times,
    state_document,
    state_from,
    state_sets,
    wake_at,
    with_buckets,
)
from recruiter.domain.records import JobDoc
from recruiter.domain.selection import (
    DEFAULT_SCHEME,
    Candidate,
    CountingScheme,
    Cursor,
    FreeWorker,
    RoundPolicy,
    Selection,
)
from recruiter.domain.start_gate import Gate, gates_for
from recruiter.domain.stored_limits import LastGood, read_limits
from recruiter.processes.known_jobs import KnownJobs
from recruiter.processes.round_plan import CursorWrite
from recruiter.store import halting, metadata, scheduled
from recruiter.store.layout import Collections, Document
from recruiter.store.readahead import ReadAhead

log = structlog.get_logger("recruiter.recruiter")


@dataclass
class Picked:
    """What a round's candidate reads found: the selection, the documents read whole (locking
    one turns it into the copy its worker receives, with no second read), the malformed jobs met."""

    selection: Selection
    documents: dict[object, Document] = field(default_factory=dict)
    malformed: list[Malformed] = field(default_factory=list)
    paced: dict[object, datetime] = field(default_factory=dict)  # jobs handed out under a rate limit: their starts
    gates: dict[object, list[Gate]] = field(default_factory=dict)  # ... and the start gates they take a token from


class CandidateReader:
    """The leader's reads of the queue and of its switches (see the module doc)."""

    def __init__(self, c: Collections) -> None:
        self.c = c  # outside any transaction: reads only
        self.warned = WarnOnce()
        # What this process knows of the ready jobs between rounds: hints that stay valid
        # whoever leads in between, so they are kept across leaderships.
        self.readahead = ReadAhead(partial(scheduled.find_candidates, c.scheduled))
        # Fairness cursor as last committed, and the epoch it was loaded for; pause switches as last read.
        self.cursor = Cursor()
        self.cursor_epoch: int | None = None
        self.cursor_reset = False  # the stored cursor was malformed: the next save replaces it
        self.paused = Paused()
        # Flow control (recruiter.domain.limits): the limits as last read, the token state as of
        # the last committed round, and what the round being planned spends.
        self.limits = NO_LIMITS
        self.last_good = LastGood()  # what a malformed stored limit is held at (recruiter.domain.stored_limits)
        self.limit_problems: frozenset[str] = frozenset()  # as last read: each is logged when it appears
        self.limit_state = LimitState()
        self.limiter_reset = False  # the stored state was malformed: the next save writes it whole
        self.spent: dict[Key, Bucket] = {}
        # The ready jobs of some groups, known without reading (recruiter.processes.known_jobs),
        # and whether the switches and limits as last read are still current (the doorbell
        # reports their changes): a round woken by enqueues alone then reads neither.
        self.known = KnownJobs()
        self.controls_current = False
        self.from_memory = False  # this round may answer from self.known

    def heard(self, arrivals: list[Document], *, disturbed: bool, controls: bool) -> None:
        """What the doorbell reported since the last round: the jobs enqueued, whether anything
        else may have changed ``scheduled``, whether the switches or limits changed."""
        if disturbed:
            self.known.forget()
            self.controls_current = False
        if controls:
            self.controls_current = False
        self.known.arrive(arrivals)

    async def warm(self, now: datetime) -> None:
        await self.readahead.warm(now)

    def cursor_write(self, cursor: Cursor) -> CursorWrite | None:
        """What a round that moved the cursor to ``cursor``, and spent the rate limits' tokens
        :attr:`spent`, writes (:class:`CursorWrite`): one update of the cursor document, the
        token state riding in it, or nothing when neither changed."""
        if self.cursor_reset:
            doc = cursor_document(cursor)
            doc[STATE_FIELD] = state_document(with_buckets(self.limit_state, self.spent))
            return CursorWrite(doc, replace=True)
        changes = cursor_changes(self.cursor, cursor) or {}
        if self.limiter_reset and self.spent:
            changes.setdefault("$set", {})[STATE_FIELD] = state_document(  # type: ignore[index]
                with_buckets(LimitState(), self.spent))
        elif self.spent:
            changes.setdefault("$set", {}).update(state_sets(self.spent))  # type: ignore[attr-defined]
        return CursorWrite(changes, replace=False) if changes else None

    def committed(self, selection: Selection) -> None:
        """The round that chose ``selection`` committed: its cursor is the current one, and so
        are the tokens it spent."""
        self.cursor = selection.cursor
        self.cursor_reset = False
        if self.spent:
            self.limit_state = with_buckets(self.limit_state, self.spent)
            self.limiter_reset = False
        self.spent = {}

    async def _load_cursor(self, epoch: int | None, now: datetime) -> None:
        """Read the stored cursor once per leadership (a new leader goes on where the last stopped)."""
        if self.cursor_epoch == epoch:
            return
        doc = await metadata.read_cursor(self.c.metadata)
        self.cursor, problem = read_cursor(doc)
        self.cursor_reset = problem is not None
        if problem is not None:
            log.warning("cursor.malformed", reason=problem, detail="the fairness turns start afresh")
        self.limit_state, problem = state_from(doc, now)
        self.limiter_reset = problem is not None
        if problem is not None:
            log.warning("limiter.malformed", reason=problem, detail="every rate limit starts with no token")
        self.cursor_epoch = epoch

    async def select(self, workers: Sequence[FreeWorker], now: datetime, epoch: int | None,
                     scheme: CountingScheme = DEFAULT_SCHEME, *, finishing: Sequence[tuple[str, str]] = ()
                     ) -> Picked:
        """Choose jobs for ``workers`` by the fairness policy (the new cursor is saved
        with the round's writes).

        The reads are planned by :func:`recruiter.domain.candidates.plan_round`; the
        first one also reads the pause switches, so a pause is obeyed from the
        next round on. If the switches changed since the last round, the round
        is planned again with them."""
        self.readahead.new_round()
        await self._load_cursor(epoch, now)
        picked = Picked(Selection([], self.cursor))
        running = await self._running(finishing)
        for _ in range(3):
            paused, limits = self.paused, self.limits
            policy = self.policy(scheme, running, now)
            # A worker does not take a paused group; '*' workers' reads leave paused groups out,
            # and groups whose limit allows no job this round.
            closed = paused.groups | policy.allowance.exhausted_groups()
            usable = [FreeWorker(w.id, tuple(g for g in w.groups if g not in closed), w.depth, process=w.process)
                      for w in workers]
            plan = plan_round(usable, self.cursor, now, policy)
            queries = next(plan)
            reads = Paused(closed, paused.tenants)
            rows = await self._read(picked, queries, now, reads, with_switches=True)
            if self.paused == paused and self.limits == limits:
                break
            if self.limits.capped_groups() != limits.capped_groups():
                running = await self._running(finishing)
        while True:
            try:
                queries = plan.send(rows)
            except StopIteration as stop:
                picked.selection = stop.value
                self.spent = self._spend(picked, now)
                return picked
            rows = await self._read(picked, queries, now, reads, with_switches=False)

    def policy(self, scheme: CountingScheme, running: dict[Key, int], now: datetime) -> RoundPolicy:
        """The round's policy: the scheme, the pause switches and what the limits allow now."""
        return RoundPolicy(scheme, self.paused.groups, self.paused.tenants,
                           allowance(self.limits, self.limit_state, running, now))

    async def _running(self, finishing: Sequence[tuple[str, str]]) -> dict[Key, int]:
        """The jobs assigned or running in each limited group and tenant: what ``scheduled`` says
        is locked, and the cancelled jobs their workers have not stopped yet (roster entries
        ``halting``; two indexed reads, only while a ``max_running`` limit exists), less the jobs
        ``finishing`` (whose outcomes the round applies, unlocking them). ``scheduled`` is read
        first: a cancel in between counts its job twice, never not at all (:mod:`recruiter.store.halting`)."""
        groups = self.limits.capped_groups()
        if not groups:
            return {}
        locked = await scheduled.read_locked_in(self.c.scheduled, groups)
        counts = count_locked([*locked, *await halting.read_halting_in(self.c.roster, groups)], self.limits)
        for key, n in count_by_key(finishing, self.limits).items():
            counts[key] = max(0, counts.get(key, 0) - n)
        return counts

    def _spend(self, picked: Picked, now: datetime) -> dict[Key, Bucket]:
        """The tokens the selection spends: one per job handed out in a rate-limited key, at the
        start time it gives that job (:func:`recruiter.domain.pacing.start_times`)."""
        rates = self.limits.rates()
        if not rates:
            return {}
        jobs = []
        for a in picked.selection.assignments:
            doc = picked.documents.get(a.job_id) or {}
            jobs.append(keys_of(str(doc.get("group")), str(doc.get("tenant") or "")))
        starts, changed = start_times(rates, self.limit_state, jobs, now)
        picked.paced = {a.job_id: at for a, at in zip(picked.selection.assignments, starts, strict=True)
                        if at is not None}
        picked.gates = {a.job_id: gates_for(keys, rates) for a, keys in zip(picked.selection.assignments, jobs,
                                                                            strict=True) if a.job_id in picked.paced}
        return changed

    def wake_in_s(self, now: datetime, other: Callable[[datetime], float | None] = lambda _: None) -> float | None:
        """Seconds until a rate that allows no start now will allow one, or until ``other`` says
        (the schedules' next due slot) if sooner; None: neither."""
        at = wake_at(self.limits.rates(), self.limit_state, now)
        due = [s for s in (other(now), None if at is None else max(0.0, (at - now).total_seconds())) if s is not None]
        return min(due) if due else None

    async def _read(self, picked: Picked, queries: list[Query], now: datetime, paused: Paused,
                    *, with_switches: bool) -> list[list[Candidate]]:
        """Answer ``queries`` through the read-ahead (:mod:`recruiter.store.readahead`: reads
        served from the candidates index on MongoDB and on the embedded server alike);
        with ``with_switches``, also read the pause switches, at the same time.
        Whole documents are checked (:func:`recruiter.domain.documents.check_job`): a malformed
        one is never a candidate, the round quarantines it; rows the read-ahead answered
        from keys are read whole first (one find by id, in rounds that met new jobs)."""
        known = [self.known.answer(q, now, paused) if self.from_memory else None for q in queries]
        to_read = [q for q, rows in zip(queries, known, strict=True) if rows is None]
        read_at = self.known.clock()
        if with_switches and not (self.from_memory and self.controls_current):
            read, (switches, limits) = await asyncio.gather(self.readahead.answer(to_read, now, paused),
                                                            metadata.read_controls(self.c.metadata))
            self._controls(switches, limits)
        else:
            read = await self.readahead.answer(to_read, now, paused) if to_read else []
        answers = iter(read)
        docs = [next(answers) if rows is None else rows for rows in known]
        whole, unplaceable = self.readahead.take_found()
        whole.update((d["_id"], d) for rows in known if rows is not None for d in rows)
        await self._meet_unplaceable(picked, unplaceable)
        keys_only = [d["_id"] for found in docs for d in found if d["_id"] not in whole]
        if keys_only:  # rows a keys read answered (new tenants, bursts): read them whole, once
            whole.update((d["_id"], d) for d in await scheduled.read_jobs(self.c.scheduled, keys_only))
        rows: list[list[Candidate]] = [[] for _ in queries]
        for i, found in enumerate(docs):
            good: list[Document] = []
            for key in found:
                doc = whole.get(key["_id"])
                if doc is None:
                    continue  # gone since its keys were read
                if (m := check_job(doc)) is not None:
                    picked.malformed.append(m)  # never a candidate; the round quarantines it
                    continue
                rows[i].append(candidate_from(cast(JobDoc, doc), now))
                picked.documents[doc["_id"]] = doc
                good.append(doc)
            if known[i] is None:
                self.known.observed(queries[i], good, read_at, short=len(found) < queries[i].limit)
        return rows

    def _controls(self, switches: Document | None, limits: Document | None) -> None:
        """The pause switches and the limits as just read."""
        self.paused = read_switches(switches, self.warned, log)
        stored = read_limits(limits)
        in_force = self.last_good.in_force(stored)
        problems = frozenset(stored.lines())
        for problem in sorted(problems - self.limit_problems):  # logged when it appears, again if it comes back
            log.warning("limits.malformed", reason=problem,
                        detail="held at the last good limit read, or nothing of it starts if none was read")
        if self.limit_problems and not problems:
            log.info("limits.fixed", detail="every stored limit is well-formed again")
        self.limit_problems = problems
        if in_force.held != self.limits.held and in_force.held:
            log.warning("limits.held", keys=sorted(f"{g}/{t}" if t is not None else g for g, t in in_force.held),
                        detail="a malformed limit with no good one read before: none of its jobs start")
        self.limits = in_force
        self.controls_current = True

    async def _meet_unplaceable(self, picked: Picked, ids: list[object]) -> None:
        """Jobs whose keys the read-ahead could not place, read whole to be quarantined by this round."""
        if ids:
            for doc in await scheduled.read_unlocked_jobs(self.c.scheduled, ids):
                if (m := check_job(doc)) is not None:
                    picked.malformed.append(m)
