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

Invariant: a stream is only a shortcut. It is read only while a slot waits for work,
and nothing waits on it alone: a worker's slots read their entries whenever a stream
(re)opens, and the process reads all its entries at once every ``safety_poll_s`` (a slot
whose entry shows something for it then reads its own).

What every change stream shares (pacing, refusal, closing) is in
:mod:`recruiter.store.change_streams`; the leader's own stream, in :mod:`recruiter.store.doorbell`.
"""

from __future__ import annotations

import asyncio
import enum
import os
import re
from collections.abc import Callable, Sequence

import structlog
from pymongo.errors import OperationFailure, PyMongoError

from recruiter.domain.records import Query, Raw

# Moved to change_streams and doorbell; still importable from here.
from recruiter.store.change_streams import CLOSE_TIMEOUT_S as CLOSE_TIMEOUT_S
from recruiter.store.change_streams import QUICK_EMPTY_PACE_CAP_S as QUICK_EMPTY_PACE_CAP_S
from recruiter.store.change_streams import QUICK_EMPTY_PACE_S as QUICK_EMPTY_PACE_S
from recruiter.store.change_streams import QUICK_EMPTY_S as QUICK_EMPTY_S
from recruiter.store.change_streams import STREAMS_UNSUPPORTED as STREAMS_UNSUPPORTED
from recruiter.store.change_streams import Stream as Stream
from recruiter.store.change_streams import StreamEnded as StreamEnded
from recruiter.store.change_streams import close_quietly as close_quietly
from recruiter.store.change_streams import closing as closing
from recruiter.store.change_streams import quick_empty_pause as quick_empty_pause
from recruiter.store.change_streams import unless_ended as unless_ended
from recruiter.store.connection import first_line
from recruiter.store.doorbell import READ_BY_ROUNDS as READ_BY_ROUNDS
from recruiter.store.doorbell import Doorbell as Doorbell
from recruiter.store.doorbell import doorbell_pipeline as doorbell_pipeline
from recruiter.store.layout import AsyncColl

log = structlog.get_logger("recruiter.worker")


class Wake(enum.StrEnum):
    AUTO = "auto"
    CHANGE_STREAM = "change-stream"
    POLL = "poll"


# While every slot of a process runs a job, only look-ahead lanes wait: the stream is then
# read at most this often (a held job need only arrive before the running one ends).
BUSY_READ_PAUSE_S = 0.05


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

