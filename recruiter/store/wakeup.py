"""How a worker learns that it was given a job: a change stream, or polling.

With a change stream, one stream per worker process watches the roster
documents of its slots. The recruiter's assignment copies the job into the
worker's entry (see :meth:`recruiter.processes.rounds.RoundWrites.assign`), so
the event carries the job itself: the worker starts it without reading
anything. The stream's pipeline keeps only what the worker needs, so each
event costs the bytes of one job, not of the whole ``assigned_to`` map.

A job too big to copy travels as a reference instead (:func:`job_reference`:
its id and lock token, marked as such), in the same field, so the same event
wakes the worker at once and it reads the job by ``_id``: one read, for big
jobs only.

Streams need a replica set (or the embedded server). Where the server refuses
them, ``auto`` falls back to polling; a broken stream is reopened, and every
slot polls its entry once whenever a stream (re)opens, so nothing assigned
while no stream was open is missed.

Invariant: a stream is only a shortcut. It is read only while its owner is idle
(a slot waits for work, or the recruiter has no round to run), and nothing waits
on it alone: a worker's slots read their entries whenever a stream (re)opens, the
process reads all its entries at once every ``safety_poll_s`` (a slot whose entry
shows something for it then reads its own), and the recruiter's backoff bounds its sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import re
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime

import pymongo
import structlog
from bson import ObjectId
from pymongo.asynchronous.change_stream import AsyncChangeStream
from pymongo.errors import OperationFailure, PyMongoError

from recruiter.domain.clock import utc
from recruiter.domain.control import PAUSED_ID
from recruiter.domain.limits import LIMITS_ID
from recruiter.domain.records import Query, Raw
from recruiter.store.connection import first_line
from recruiter.store.layout import AsyncColl, AsyncDb, Document

Stream = AsyncChangeStream[Document]

log = structlog.get_logger("recruiter.worker")


class Wake(enum.StrEnum):
    AUTO = "auto"
    CHANGE_STREAM = "change-stream"
    POLL = "poll"


# An empty batch back sooner than this was not the server waiting out maxAwaitTimeMS:
# it woke the stream for a write the pipeline then filtered out. MongoDB keeps
# waiting in that case; SecantusDB returns, once per write on the whole server, so
# a waiting stream would ask again for every write. Quick empty batches in a row
# are therefore paced, from nothing up to QUICK_EMPTY_PACE_CAP_S.
QUICK_EMPTY_S = 0.05
QUICK_EMPTY_PACE_S = 0.005
QUICK_EMPTY_PACE_CAP_S = 0.16


# While every slot of a process runs a job, only look-ahead lanes wait: the stream is then
# read at most this often (a held job need only arrive before the running one ends).
BUSY_READ_PAUSE_S = 0.05


def quick_empty_pause(streak: int) -> float:
    """Pause before the next getMore after ``streak`` quick empty batches in a row."""
    if streak <= 1:
        return 0.0
    return float(min(QUICK_EMPTY_PACE_CAP_S, QUICK_EMPTY_PACE_S * 2.0 ** (streak - 2)))


# Codes a server gives when it cannot run a change stream at all
# (e.g. a standalone mongod: 40573 "only supported on replica sets").
STREAMS_UNSUPPORTED = frozenset({40573, 40324, 115, 136})


# The longest pattern ids_condition sends, in UTF-8 bytes. MongoDB refuses a regular expression
# of more than 16 KiB (error 51091, "pattern string is longer than the limit"); past this, well
# under it, the ids go as a list.
MAX_IDS_PATTERN = 8_000


def ids_condition(ids: Sequence[str]) -> Query:
    """A condition that holds for exactly the strings ``ids``: ``^<common prefix>(?:<rest of
    each>)`` then the end of the string, each part escaped. ``$`` would also match before a
    final newline (in PCRE, as in Python), so the end is "no character follows". Where the
    pattern would be too long, or there is no id, the ids go as a list (``$in``)."""
    if not ids:
        return {"$in": []}
    prefix = os.path.commonprefix(list(ids))  # noqa: RUF071 - character by character is what a pattern needs
    rests = "|".join(re.escape(i[len(prefix):]) for i in sorted(set(ids)))
    pattern = f"^{re.escape(prefix)}(?:{rests})(?![\\s\\S])"
    if len(pattern.encode("utf-8", "surrogatepass")) > MAX_IDS_PATTERN:
        return {"$in": list(ids)}
    return {"$regex": pattern}


def watch_pipeline(slot_ids: list[str]) -> list[Query]:
    """Events a worker acts on: its entry got a job, was asked to stop, was taken
    over by a restart with the same id (a new ``session``), or was removed.

    An assignment is reported as an ``update`` by MongoDB; some servers report
    an update pipeline as a ``replace`` with the full document, so both forms
    are kept. The worker's own writes (heartbeats, outcomes) do not match.
    """
    # The ids come first, as one anchored pattern (ids_condition): nearly every roster event is
    # another process's, and a server that matches in order, as the embedded one does, then drops
    # it at the first character past the common prefix, where a list of ids was searched one id
    # at a time and the kinds of event tried one after another before it.
    return [
        {"$match": {
            "documentKey._id": ids_condition(slot_ids),
            "$or": [
                {"operationType": "update", "updateDescription.updatedFields.job": {"$exists": True}},
                {"operationType": "update", "updateDescription.updatedFields.stop_requested": {"$exists": True}},
                {"operationType": "update", "updateDescription.updatedFields.session": {"$exists": True}},
                {"operationType": {"$in": ["replace", "delete"]}},
            ],
        }},
        {"$project": {
            "operationType": 1,
            "documentKey": 1,
            "updateDescription.updatedFields.job": 1,
            "updateDescription.updatedFields.ahead": 1,
            "fullDocument.job": 1,
            "fullDocument.ahead": 1,
        }},
    ]


# Marks a roster entry's ``job`` as a reference to the job, not a copy of it.
NOT_COPIED = "not_copied"


def job_reference(job_id: object, lock_token: object) -> Query:
    """What an assignment carries in place of a job too big to copy: the worker reads the job."""
    return {"_id": job_id, "lock_token": lock_token, NOT_COPIED: True}


def is_copy(job: object) -> bool:
    """Whether ``job`` (an entry's or an event's) is a copy of the job, not a reference to it."""
    return isinstance(job, dict) and job.get(NOT_COPIED) is not True


def job_of(event: Raw) -> Raw | None:
    """The job copy (or reference, :func:`job_reference`) an event carries, if any."""
    if event.get("operationType") == "update":
        fields = _field(_field(event, "updateDescription"), "updatedFields")
    else:
        fields = _field(event, "fullDocument")
    job = fields.get("job")
    return job if isinstance(job, dict) else None


def ahead_of(event: Raw) -> object:
    """The ``ahead`` value an event carries with its job (:mod:`recruiter.domain.lanes`): the
    job's lock token when it was handed out ahead. An assignment that leaves ``ahead`` false,
    as it was, is not in an update's fields: absent reads as false."""
    if event.get("operationType") == "update":
        fields = _field(_field(event, "updateDescription"), "updatedFields")
    else:
        fields = _field(event, "fullDocument")
    return fields.get("ahead", False)


def _field(doc: Raw, name: str) -> Raw:
    """``doc[name]`` if it is an embedded document, else an empty one."""
    value = doc.get(name)
    return value if isinstance(value, dict) else {}


class RosterWatch:
    """Runs the change stream of one worker process and reports each event.

    ``on_event(slot_id, job, ahead)`` is called for every matching event, with the job
    copy or ``None`` (the slot should read its entry) and the entry's ``ahead``. ``on_open()`` is called
    each time a stream opens, before any of its events.

    The stream is read only while ``idle`` is set (some slot waits for work), and
    at most every ``BUSY_READ_PAUSE_S`` while ``eager()`` says only look-ahead
    lanes of busy slots wait (:mod:`recruiter.domain.lanes`):
    the recruiter assigns only available workers, so a process whose slots are
    all busy has nothing to hear, and sends no ``getMore`` until one is free.
    Events are kept by the server meanwhile, and read when it resumes.
    """

    def __init__(self, roster: AsyncColl, slot_ids: list[str], on_event: Callable[[str, Raw | None, object], None],
                 on_open: Callable[[], None], idle: asyncio.Event, *, max_await_s: float = 2.0,
                 retry_s: float = 1.0, eager: Callable[[], bool] = lambda: True) -> None:
        self.roster = roster
        self.pipeline = watch_pipeline(slot_ids)  # the slots are the process's for its whole life
        self.on_event = on_event
        self.on_open = on_open
        self.idle = idle
        self.max_await_ms = int(max_await_s * 1000)
        self.retry_s = retry_s
        self.eager = eager  # whether some slot waits with nothing to run (else only look-ahead lanes wait)
        self.streaming = asyncio.Event()

    async def supported(self) -> bool:
        """Whether the server runs change streams. Every other error counts as yes: the
        stream is opened again and again by :meth:`run`, and slots poll meanwhile."""
        try:
            stream = await self.roster.watch(self.pipeline, max_await_time_ms=1)
            await stream.close()
        except OperationFailure as exc:
            if exc.code in STREAMS_UNSUPPORTED:
                log.info("wake.polling", reason=first_line(exc))
                return False
            log.warning("wake.stream_failed", error=first_line(exc))
        except PyMongoError as exc:
            log.warning("wake.stream_failed", error=first_line(exc))
        return True

    async def run(self) -> None:
        resume_after: Raw | None = None
        while True:
            try:
                async with closing(await self.roster.watch(
                    self.pipeline, max_await_time_ms=self.max_await_ms, resume_after=resume_after,
                )) as stream:
                    self.streaming.set()
                    self.on_open()
                    loop = asyncio.get_running_loop()
                    streak = 0
                    while stream.alive:
                        await self.idle.wait()
                        asked_at = loop.time()
                        event = await stream.try_next()
                        resume_after = stream.resume_token
                        if event is not None:
                            streak = 0
                            self.on_event(event["documentKey"]["_id"], job_of(event), ahead_of(event))
                        elif loop.time() - asked_at < QUICK_EMPTY_S:
                            streak += 1
                            await asyncio.sleep(quick_empty_pause(streak))
                        else:
                            streak = 0
                        if not self.eager():
                            await asyncio.sleep(BUSY_READ_PAUSE_S)
            except OperationFailure as exc:
                # A resume token the server no longer has: start afresh (slots poll on open).
                log.warning("wake.stream_failed", error=first_line(exc))
                resume_after = None
            except PyMongoError as exc:
                log.warning("wake.stream_failed", error=first_line(exc))
            self.streaming.clear()
            await asyncio.sleep(self.retry_s)


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
            {"ns.coll": "roster", "operationType": "update",
             "updateDescription.updatedFields.outcome": {"$exists": True}},
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
                await asyncio.sleep(quick_empty_pause(streak))
            except PyMongoError as exc:
                log.warning("doorbell.failed", error=first_line(exc))
                await self.close()
                await asyncio.sleep(max(0.0, deadline - loop.time()))
                return False
        return False

    async def close(self) -> None:
        self.disturbed = True
        if self.stream is not None:
            stream, self.stream = self.stream, None
            await close_quietly(stream)


class StreamEnded(PyMongoError):
    """The server ended a change stream without an error the driver resumes from: an
    invalidate (its collection or database dropped or renamed), or a cursor closed under a
    ``getMore`` that the server answered as exhausted rather than as killed. The driver
    then answers "no event" for ever."""


def unless_ended(event: Document | None, alive: bool) -> Document | None:
    """``event`` (what ``try_next`` gave), or :class:`StreamEnded` when there was none
    and the stream is no longer ``alive``."""
    if event is None and not alive:
        raise StreamEnded("the server ended the change stream (its collection or database dropped or renamed, "
                          "or its cursor closed)")
    return event


CLOSE_TIMEOUT_S = 1.0


async def close_quietly(stream: Stream) -> None:
    """Close a change stream, giving up after a second: with the server gone, closing
    (killCursors) would otherwise wait out server selection and hold up a shutdown."""
    try:
        with pymongo.timeout(CLOSE_TIMEOUT_S):
            await stream.close()
    except PyMongoError as exc:
        log.debug("stream.close_failed", error=first_line(exc))


@contextlib.asynccontextmanager
async def closing(stream: Stream) -> AsyncIterator[Stream]:
    try:
        yield stream
    finally:
        await close_quietly(stream)
