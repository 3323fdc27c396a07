"""When a worker starts a job handed out under a rate: at its start time, and with a start token.

A paced job's copy says when its token is due (``start_at``, :mod:`recruiter.domain.pacing`): the
worker waits for it, as before, so the starts keep the leader's spacing. A copy made by a 0.3.0
leader also names the job's gates (``start_gate``, :mod:`recruiter.domain.start_gate`): the worker
then takes a start token from them (:mod:`recruiter.store.start_gates`), waiting while the gate
refuses, and the job's recorded start is the token's time (the server's). A copy with no gates
(a 0.2.0 leader's, or a job no rate holds) starts when its start time comes, at this clock's time.

A copy whose gates are malformed is not started: it is given back with its reason (fail closed),
and the next round hands it out again with the gates of the limits then in force.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import datetime

import structlog

from recruiter.domain.clock import Clock
from recruiter.domain.pacing import MAX_START_WAIT_S, START_AT
from recruiter.domain.start_gate import GATE_FIELD, Gate, Reply, read_spec, reply_of
from recruiter.store import start_gates
from recruiter.store.connection import StoreError
from recruiter.store.layout import AsyncColl, Document

log = structlog.get_logger("recruiter.worker")

# A refused worker asks again once the window frees, at least this long after its last request
# (its estimate of the server's time may be off by that much), and at most this long after it
# (so a stop is seen, and a limit that was raised is used, soon).
MIN_RETRY_S = 0.002
MAX_RETRY_S = 1.0
# A write that returns no answer is asked again this many times, then is a database error.
MAX_UNANSWERED = 5


@dataclass(frozen=True)
class NotStarted:
    """The job must not start now: the worker stops, or its gates are malformed (``reason``)."""

    reason: str


class StartGate:
    """Starts a worker's paced jobs (see the module doc)."""

    def __init__(self, gates: AsyncColl, clock: Clock, stopping: asyncio.Event) -> None:
        self.gates = gates  # the start_gates collection
        self.clock = clock
        self.stopping = stopping

    async def start(self, job: Document) -> datetime | NotStarted:
        """Wait until ``job`` may start; its recorded start time, or why it must not start."""
        await self._start_time(job)
        if GATE_FIELD not in job:
            return self.clock.now()
        gates, problem = read_spec(job.get(GATE_FIELD))
        if problem is not None:
            return NotStarted(problem)
        return await self._token(gates, str(job.get("_id")))

    async def _start_time(self, job: Document) -> None:
        """The leader's start time (``start_at``); never waits longer than ``MAX_START_WAIT_S``,
        whatever the value says."""
        start_at = job.get(START_AT)
        if isinstance(start_at, datetime):
            wait_s = (start_at - self.clock.now()).total_seconds()
            if wait_s > 0:
                await asyncio.sleep(min(wait_s, MAX_START_WAIT_S))

    async def _token(self, gates: list[Gate], job_id: str) -> datetime | NotStarted:
        """A start token of ``gates``: its time. Asks until granted; a stop first gives the job back."""
        refused = unanswered = 0
        loop = asyncio.get_running_loop()
        while True:
            nonce = uuid.uuid4().hex
            sent = loop.time()
            reply = reply_of(await start_gates.take(self.gates, gates, nonce), gates, nonce)
            if reply is None:
                # No document came back (the embedded server answers so to one of two upserts that
                # create the document at once): ask again. A token the write took all the same is
                # one start more in the log, which only holds the next starts back.
                unanswered += 1
                if unanswered >= MAX_UNANSWERED:
                    raise StoreError(f"the start gate's write did not answer {unanswered} times "
                                     "(its document is not as the write leaves it)")
                continue
            if reply.granted:
                if refused:
                    log.debug("job.start_gate_waited", job_id=job_id, refused=refused)
                return reply.at
            refused += 1
            self._said(reply, gates, job_id)
            if await self._wait(reply, sent):
                return NotStarted("the worker is stopping")

    def _said(self, reply: Reply, gates: list[Gate], job_id: str) -> None:
        if reply.problem is not None:
            log.warning("limits.start_gate_repaired", group=gates[0].group[:100], job_id=job_id,
                        problem=reply.problem, detail="the malformed start log was replaced by a full window as "
                        "of now: no start of this limit for one window (fail closed)")

    async def _wait(self, reply: Reply, sent: float) -> bool:
        """Sleep until the window frees (bounded: see ``MAX_RETRY_S``); True if a stop came first.

        Counted from when the refused request was sent (``sent``, event loop time), not from when
        its reply came: the server's ``at`` was about half a round trip after the send, so the
        next request reaches it about when the window frees, instead of a whole round trip late.
        Each start that waited is otherwise late by that much, and every ``entries``-th start after
        it with it: the rate would deliver that much less."""
        frees_in = (reply.free_at - reply.at).total_seconds()
        loop = asyncio.get_running_loop()
        wait_s = min(MAX_RETRY_S, max(MIN_RETRY_S, sent + frees_in - loop.time()))
        try:
            await asyncio.wait_for(self.stopping.wait(), wait_s)
        except TimeoutError:
            return False
        return True
