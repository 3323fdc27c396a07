"""How a worker process learns of its work by default: one poller reads all its entries.

While any slot of the process waits for work (:attr:`Inboxes.idle`), the poller reads
every roster entry of the process with ONE ``find`` by ``_id``
(:func:`recruiter.store.hot.read_process_entries`) and hands each waiting slot what
its entry shows, through the inboxes: the job copy the assignment carries
(:meth:`Inboxes.delivered`, as a change stream event would), so the slot starts it
without reading again; or a reminder to read its entry (:meth:`Inboxes.swept`) when
it shows something else for the slot (a cancelled assignment, a stop request,
another session, no entry). Slots never poll one by one.

The pace adapts (:class:`Pace`): ``poll_from_s`` after a read that reminded a slot to read
its entry, ``HOT_POLL_S`` while one of its entries is hot and that entry's slot runs nothing
(:mod:`recruiter.domain.hot`), doubling up to ``poll_to_s`` while idle. After an outcome, the
first read waits for most of the process's learnt turnaround (how long the leader's round took to hand out the next job
after its last outcomes), not ``poll_from_s``: a read before the round finds nothing, and on a
busy server those reads were most of a worker's commands (5.6 reads per 100 ms job at 16
single-slot processes), and with a backlog on a busy server the round takes seconds, longer than
``poll_to_s``. An idle process that holds no hot entry costs the server one read every
``poll_to_s`` at most, whatever its number of slots and whatever the write rate of the
deployment; a hot one, one read every ``HOT_POLL_S`` while it is hot.

Invariant: the poller only fills inboxes; a slot acts on what its inbox holds as it
would on a change stream's event (:mod:`recruiter.processes.worker.inbox`: a copy
is run at most once per lock token), and a failed read is read again at ``poll_to_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import structlog

from recruiter.domain.clock import Clock
from recruiter.domain.hot import HOT, HOT_POLL_S, hot_until
from recruiter.domain.records import Raw
from recruiter.processes.worker.inbox import Inboxes
from recruiter.processes.worker.slots import needs_read
from recruiter.processes.worker.state import Slot
from recruiter.store import hot as hot_store
from recruiter.store.connection import StoreError, first_line
from recruiter.store.layout import AsyncColl

log = structlog.get_logger("recruiter.worker")


class Pace:
    """The poller's wait before its next read: ``fast_s`` while work is expected, doubling up to ``slow_s``.

    It also learns the process's *turnaround*: how long after one of its outcomes (not quiet) a
    read delivers the next job, a moving average of what it saw (:meth:`delivered`). The first
    read after an outcome then waits ``LEAD`` of that (:meth:`after_outcome`) instead of
    ``fast_s``: the leader's round that hands out the next job takes about the same time each
    round, and a read before it finds nothing. Reads from there are ``STEP`` of it apart until
    ``SPAN`` of it has passed, then double (:meth:`slower`). A turnaround is learnt up to
    ``LONGEST_S`` (or ``slow_s``, if longer), not ``slow_s``: a leader whose round takes seconds (a
    backlog on a busy server) would otherwise be read for every ``slow_s`` from each outcome on
    (1.0 read per job at 200 slots of no-op jobs, 0.7 with it). An outcome followed by no job for
    ``FORGET`` turnarounds teaches nothing (the queue was empty), and a job already there at the
    first read brings the turnaround down fast (:meth:`delivered`).
    """

    # The first read after an outcome comes at this share of the learnt turnaround (early rather than late).
    LEAD = 0.75
    # The weight of the newest turnaround seen in the moving average.
    WEIGHT = 0.25
    # After an outcome, until SPAN turnarounds have passed, reads that find nothing are STEP of it apart.
    SPAN = 1.5
    STEP = 1 / 6
    # The longest turnaround learnt (or poll_to, if longer): a leader whose round takes seconds (a
    # backlog on a busy server) hands out each slot's next job seconds after its outcome.
    LONGEST_S = 5.0
    # An outcome followed by no job for this many turnarounds teaches nothing (the queue was empty).
    FORGET = 3.0
    # The weight of a turnaround seen by the first read after an outcome (see delivered).
    WEIGHT_EARLY = 0.5

    def __init__(self, fast_s: float, slow_s: float) -> None:
        self.fast_s = fast_s
        self.slow_s = slow_s
        self.wait_s = fast_s
        self.turnaround_s: float | None = None  # learnt; None: nothing seen yet
        self.outcome_at: float | None = None  # the earliest outcome no delivery has followed yet
        self.missed = False  # whether a read found nothing since that outcome
        self.longest_s = max(slow_s, self.LONGEST_S)

    def fast(self) -> None:
        self.wait_s = self.fast_s

    def hot(self) -> None:
        """One of the process's entries is hot and its slot idle: read every ``HOT_POLL_S`` (or
        ``fast_s``, if longer) while it stays so."""
        self.wait_s = max(self.fast_s, HOT_POLL_S)

    def slower(self, now: float) -> None:
        """After a read (at ``now``) that found nothing, or delivered: double the wait, up to ``slow_s``.
        While an outcome waits for its next job, until ``SPAN`` turnarounds after it, the reads
        come every ``STEP`` of the turnaround instead: the job is due about then, and doubling
        would read long after it came."""
        t, since = self.turnaround_s, self.outcome_at
        if t is not None and since is not None and now - since < self.SPAN * t:
            self.wait_s = min(max(self.fast_s, self.STEP * t), self.slow_s)
            return
        self.wait_s = min(self.wait_s * 2, self.slow_s)

    def after_outcome(self, now: float) -> float:
        """An outcome was recorded at ``now``: the wait before the read that may find the next job."""
        if self.outcome_at is None:
            self.outcome_at = now
        self.fast()
        if self.turnaround_s is None:
            return self.fast_s
        return max(self.fast_s, self.LEAD * self.turnaround_s - (now - self.outcome_at))

    def delivered(self, now: float) -> None:
        """A read at ``now`` delivered a job: learn the turnaround from the outcome it followed. When
        the first read after the outcome delivered, the job may have come long before it: a
        turnaround learnt longer than ``slow_s`` is then learnt as half that wait, with
        ``WEIGHT_EARLY``, so that one learnt too long (a leader slow for a while, or a quiet spell)
        comes down in a few jobs; a shorter one as usual (halving it on every early job made a
        process of 100 ms jobs read more often, as its turnaround varies by a round)."""
        if self.outcome_at is None:
            return
        seen = min(max(0.0, now - self.outcome_at), self.longest_s)
        first, self.outcome_at, self.missed = not self.missed, None, False
        if self.turnaround_s is None:
            self.turnaround_s = seen
        elif first and self.turnaround_s > self.slow_s:
            self.turnaround_s = (1 - self.WEIGHT_EARLY) * self.turnaround_s + self.WEIGHT_EARLY * seen / 2
        else:
            self.turnaround_s = (1 - self.WEIGHT) * self.turnaround_s + self.WEIGHT * seen

    def found_nothing(self, now: float) -> None:
        """A read at ``now`` delivered nothing. An outcome older than ``FORGET`` turnarounds (or than
        ``longest_s``, with none learnt) is followed by no job, the queue was empty: it teaches nothing."""
        if self.outcome_at is None:
            return
        self.missed = True
        t = self.turnaround_s
        if now - self.outcome_at > (self.longest_s if t is None else max(self.slow_s, self.FORGET * t)):
            self.outcome_at, self.missed = None, False


def delivery(entry: Raw | None, slot: Slot) -> Raw | None:
    """The job copy (or reference) ``entry`` carries for ``slot``, if it is an assignment to it of
    this session, with no stop asked: what a change stream event would have delivered."""
    if entry is None or entry.get("session") != slot.session or entry.get("stop_requested"):
        return None
    if entry.get("available") is not False:
        return None
    assigned, job = entry.get("assigned_to"), entry.get("job")
    if not isinstance(assigned, dict) or not isinstance(job, dict) or "_id" not in job:
        return None
    return job if assigned.get(slot.id) == job["_id"] else None


class Poller:
    """The one reader of a worker process's entries (see the module doc)."""

    def __init__(self, roster: AsyncColl, slots: Sequence[Slot], inboxes: Inboxes, clock: Clock, *,
                 poll_from_s: float, poll_to_s: float) -> None:
        self.roster = roster
        self.slots = list(slots)
        self.ids = [s.id for s in self.slots]
        self.inboxes = inboxes
        self.clock = clock
        self.pace = Pace(poll_from_s, poll_to_s)
        self.reads = 0  # how many reads this poller sent (tests, the bench)
        self.hot = False  # whether one of the entries was hot at the last read

    async def run(self) -> None:
        """Read while a slot waits, at the pace; a slot recording an outcome (:meth:`Inboxes.expect`)
        sets the pace fast (the next job comes within a round) and brings the next read that close."""
        expected = self.inboxes.expected
        loop = asyncio.get_running_loop()
        while True:
            await self.inboxes.idle.wait()
            deadline = loop.time() + self.pace.wait_s
            # An outcome brings the read closer, never pushes it back: slots recording one after
            # another more often than poll_from would otherwise keep the read from ever coming.
            while (left := deadline - loop.time()) > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(expected.wait(), timeout=left)
                if expected.is_set():
                    expected.clear()
                    deadline = min(deadline, loop.time() + self.pace.after_outcome(loop.time()))
            if self.inboxes.idle.is_set():
                await self.read_once()

    async def read_once(self) -> int:
        """One read of every entry; hand each waiting slot what its entry shows. How many slots
        it delivered a job to (or reminded to read)."""
        self.reads += 1
        try:
            entries = {d.get("_id"): d for d in await hot_store.read_process_entries(self.roster, self.ids)}
        except StoreError as exc:
            log.warning("worker.poll_failed", error=first_line(exc))
            self.pace.wait_s = self.pace.slow_s
            return 0
        now = self.clock.now()
        # A hot entry keeps the pace fast only while its slot is idle here: a slot running a job (a
        # batch, or one held ahead) reads fast after its outcomes anyway, and is handed nothing more
        # before its last one, so polling fast for its mark would be reads for nothing.
        busy = {s.runner_id for s in self.slots if s.running is not None}
        self.hot = any(hot_until(e.get(HOT), now) is not None and e.get("available") is True
                       and e.get("_id") not in busy for e in entries.values())
        acted = delivered = 0
        for slot in self.slots:
            if not slot.inbox.waiting:
                continue
            entry = entries.get(slot.id)
            job = delivery(entry, slot)
            if job is not None and job.get("lock_token") == slot.inbox.last_token:
                # A read that left before this slot recorded the job it shows: nothing new (handed
                # on, it would read as a cancelled assignment, and the slot would read its entry).
                continue
            if job is not None:
                self.inboxes.delivered(slot.id, job, entry.get("ahead", False) if entry else False)
                acted += 1
                delivered += 1
            elif needs_read(entry, slot):
                self.inboxes.swept([slot.id])
                acted += 1
        at = asyncio.get_running_loop().time()
        if delivered:
            self.pace.delivered(at)
        else:
            self.pace.found_nothing(at)
        if self.hot:
            self.pace.hot()
        elif acted > delivered:
            self.pace.fast()
        else:
            # A delivery slows the pace as a read that found nothing does: the round that handed it
            # out filled every lane it had work for, so this process's next job comes after its
            # next outcome (which brings a read at its turnaround) or an enqueue (the backoff's case).
            self.pace.slower(at)
        return acted
