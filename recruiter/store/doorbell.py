"""The leader's doorbell: one change stream on the database that wakes an idle recruiter.

The recruiter sleeps between rounds until an event that may give a round work (:func:`doorbell_pipeline`:
a job enqueued or changed but by the leader's own locks, a worker registered or recording an
outcome, the pause switches, the limits or a schedule changed), instead of polling. An enqueue's
event carries the job, so a round woken by enqueues alone can answer from what it knows
(:meth:`Doorbell.take_arrivals`, :mod:`recruiter.processes.known_jobs`).

Invariant: the doorbell is only a shortcut. It is read only while the recruiter is idle, nothing
waits on it alone (the recruiter's backoff bounds its sleep: jobs due by the clock raise no event),
and whenever events may have been missed (the stream opened, failed or closed) it reports
``scheduled`` as disturbed, so the next round reads instead of trusting what it knows.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

import structlog
from bson import ObjectId
from pymongo.errors import OperationFailure, PyMongoError

from recruiter.domain.batching import QUIET
from recruiter.domain.clock import utc
from recruiter.domain.control import PAUSED_ID
from recruiter.domain.limits import LIMITS_ID
from recruiter.domain.records import Query
from recruiter.store.change_streams import (
    QUICK_EMPTY_S,
    STREAMS_UNSUPPORTED,
    Stream,
    close_quietly,
    quick_empty_pause,
    unless_ended,
)
from recruiter.store.connection import first_line
from recruiter.store.layout import AsyncDb, Document

log = structlog.get_logger("recruiter.worker")


def doorbell_pipeline() -> list[Query]:
    """Events after which a round may find work: a job enqueued, unlocked or changed, a
    worker registered (its entry, then its heartbeat document) or recording an outcome, the
    pause switches or limits changed. The recruiter's own locks and assignments do not
    match, so its rounds do not ring its own bell (a retry it applies does, once)."""
    return [
        {"$match": {"$or": [
            {"ns.coll": "scheduled", "operationType": "insert"},
            # Any other change to a job but a lock (the leader's own): an unlock by the cleaner
            # (crashed or returned), a resubmit, a retry applied, an edit. A round woken by
            # enqueues alone answers from what it knows (recruiter.processes.known_jobs); these
            # make that knowledge void.
            {"ns.coll": "scheduled", "operationType": "update",
             "updateDescription.updatedFields.locked": {"$ne": True}},
            {"ns.coll": "scheduled", "operationType": "replace", "fullDocument.locked": {"$ne": True}},
            # The pause switches and the limits: a round reads them again.
            {"ns.coll": "metadata", "documentKey._id": {"$in": [PAUSED_ID, LIMITS_ID]}},
            {"ns.coll": "roster", "operationType": "insert"},
            # A registration's heartbeat document: the entry may be given work from now on.
            {"ns.coll": "heartbeats", "operationType": {"$in": ["insert", "replace"]}},
            # A slot's registration in its process's heartbeat document (which it may have created).
            {"ns.coll": "heartbeats", "operationType": "update",
             "updateDescription.updatedFields.registered_at": {"$exists": True}},
            # Not an outcome written quietly (recruiter.domain.batching.quiet_outcome): its slot goes
            # on with a job it holds, and the batch's last outcome rings.
            {"ns.coll": "roster", "operationType": "update",
             "updateDescription.updatedFields.outcome": {"$exists": True},
             f"updateDescription.updatedFields.{QUIET}": {"$exists": False}},
            {"ns.coll": "roster", "operationType": "replace", "fullDocument.outcome": {"$exists": True}},
            # A schedule declared, edited, paused, resumed, removed or asked to run now: the
            # leader reads its next fire time again (its own firing writes do not ring).
            {"ns.coll": "schedules", "operationType": {"$in": ["insert", "replace", "delete"]}},
            {"ns.coll": "schedules", "operationType": "update", "$or": [
                {"updateDescription.updatedFields.declared_at": {"$exists": True}},
                {"updateDescription.updatedFields.paused": {"$exists": True}},
                {"updateDescription.updatedFields.run_now": {"$type": "date"}}]},
        ]}},
        # An enqueue's event carries the job (the whole document, as inserted); no other does.
        {"$project": {"operationType": 1, "ns": 1, "wallTime": 1, "fullDocument": {"$cond": [
            {"$and": [{"$eq": ["$operationType", "insert"]}, {"$eq": ["$ns.coll", "scheduled"]}]},
            "$fullDocument", "$$REMOVE"]}}},
    ]


# The doorbell's longest pause between quick empty batches (change_streams.quick_empty_pause; other
# streams pause up to 160 ms). A batch's quiet outcomes each end a getMore with an empty batch on the
# embedded server, so by the batch's last outcome, which rings, the pause had grown to 160 ms: the
# round came that much later. With 40 ms a worker of no-op jobs in batches of 17 ran 21.5 jobs/s
# where it ran 19.6 (four runs each), for at most 25 getMores a second from the one leader while
# writes go on; on MongoDB a getMore waits for a matching event, so none comes back empty.
DOORBELL_PACE_CAP_S = 0.04

# The collections whose changes a reading round sees (the roster's changed entries, the beats it
# needs, the candidates): not the schedules, the pause switches or the limits, which only rung
# events make the leader read again.
READ_BY_ROUNDS = frozenset({"scheduled", "roster", "heartbeats"})


class Doorbell:
    """Lets an idle recruiter sleep until something happens, instead of polling.

    One change stream on the database, read only while the recruiter is idle:
    a busy recruiter runs rounds back to back and sends no ``getMore``. Events
    that arrived while it was busy ring at once, which costs at most one extra
    round. Jobs that become due by the clock raise no event, so the recruiter
    keeps its backoff as the longest wait.
    """

    def __init__(self, db: AsyncDb, *, max_await_s: float = 1.0) -> None:
        self.db = db
        self.max_await_ms = max(1, int(max_await_s * 1000))
        self.stream: Stream | None = None
        self.supported = True
        self.heard: set[str] = set()  # collections whose events rang since the last take()
        # Since the last take_arrivals(): the jobs enqueued (by _id, as inserted), and whether
        # anything else may have changed ``scheduled`` (another event on it, or a stream that
        # was (re)opened or failed, so events may have been missed).
        self.arrivals: dict[object, Document] = {}
        self.disturbed = True
        # How many times the stream was found with no event left (a getMore came back empty):
        # after a busy spell, the events of the jobs it handled are read one wait at a time.
        self.caught_up = 0
        # Set by the leader: events committed before this server time (``wallTime``, MongoDB 6.0+)
        # to a collection its rounds read are reflected in its last reading round, so they wake
        # no round. A busy spell leaves the events of every job it handled unread; read one per
        # wait, they woke an idle round each (1 071 rounds in the 8 s after 1 000 jobs).
        self.seen_until: datetime | None = None

    def take(self, collection: str) -> bool:
        """Whether an event of ``collection`` rang since the last call."""
        heard = collection in self.heard
        self.heard.discard(collection)
        return heard

    def drain(self) -> set[str]:
        """The collections whose events rang since the last call (or :meth:`take`)."""
        heard, self.heard = self.heard, set()
        return heard

    def take_arrivals(self) -> tuple[list[Document], bool]:
        """The jobs enqueued since the last call (documents whose ``_id`` is a string, an integer or
        an ObjectId; an insert of any other is reported as a disturbance), and whether ``scheduled``
        may have changed otherwise."""
        arrivals, disturbed = list(self.arrivals.values()), self.disturbed
        self.arrivals, self.disturbed = {}, False
        return arrivals, disturbed

    def _heard(self, event: Document) -> None:
        ns = event.get("ns")
        coll = str(ns.get("coll")) if isinstance(ns, dict) else ""
        self.heard.add(coll)
        if coll != "scheduled":
            return
        doc = event.get("fullDocument")
        job_id = doc.get("_id") if isinstance(doc, dict) else None
        if event.get("operationType") == "insert" and isinstance(job_id, (str, int, ObjectId)):
            self.arrivals[job_id] = doc  # type: ignore[assignment]
        else:
            self.disturbed = True

    def _stale(self, event: Document) -> bool:
        ns, wall = event.get("ns"), event.get("wallTime")
        return (self.seen_until is not None and isinstance(wall, datetime) and isinstance(ns, dict)
                and ns.get("coll") in READ_BY_ROUNDS and utc(wall) < self.seen_until)

    async def open(self) -> None:
        """Open the stream, unless the server has shown it has no change streams."""
        if self.stream is not None or not self.supported:
            return
        try:
            self.stream = await self.db.watch(doorbell_pipeline(), max_await_time_ms=self.max_await_ms)
            self.disturbed = True  # what changed before the stream opened raised no event
        except OperationFailure as exc:
            if exc.code not in STREAMS_UNSUPPORTED:
                raise
            log.info("doorbell.unavailable", reason=first_line(exc))
            self.supported = False

    async def wait(self, timeout_s: float) -> bool:
        """Wait for an event, about ``timeout_s`` (at most the stream's own wait more); True if one came."""
        try:
            await self.open()
        except PyMongoError as exc:
            log.warning("doorbell.failed", error=first_line(exc))
        if self.stream is None:
            await asyncio.sleep(timeout_s)
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        streak = 0
        while loop.time() < deadline:
            try:
                asked_at = loop.time()
                # A stream the server ended (a database dropped) fails as any other: the next wait opens another.
                event = unless_ended(await self.stream.try_next(), self.stream.alive)
                if event is not None and self._stale(event):
                    continue  # a write the last reading round saw
                if event is not None:
                    self._heard(event)
                    return True
                self.caught_up += 1  # the server had no event left for this stream
                streak = streak + 1 if loop.time() - asked_at < QUICK_EMPTY_S else 0
                await asyncio.sleep(quick_empty_pause(streak, DOORBELL_PACE_CAP_S))
            except PyMongoError as exc:
                log.warning("doorbell.failed", error=first_line(exc))
                await self.close()
                await asyncio.sleep(max(0.0, deadline - loop.time()))
                return False
        return False

    async def wait_for_work(self, timeout_s: float, *, no_free_lane: bool, longest_s: float) -> bool:
        """:meth:`wait`, for an event that may give a round work. While the last round found no lane
        to fill (``no_free_lane``), an enqueue alone does not ring: a round could give the job to
        no one, and would read the roster for nothing. The wait is then at least ``longest_s``
        (the leader's longest backoff), as a lane becomes free by an outcome or a registration,
        which ring. The arrivals stay known for the next round. (A worker of short jobs in batches
        saw about 10 such rounds per batch.)"""
        if no_free_lane and self.stream is not None:
            timeout_s = max(timeout_s, longest_s)
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while True:
            rang = await self.wait(timeout_s)
            if not (rang and no_free_lane and self.heard == {"scheduled"} and not self.disturbed):
                return rang
            timeout_s = end - loop.time()
            if timeout_s <= 0:
                return False

    async def close(self) -> None:
        self.disturbed = True
        if self.stream is not None:
            stream, self.stream = self.stream, None
            await close_quietly(stream)
