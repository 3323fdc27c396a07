"""Reading the documents that tell where one job is: its job document in ``scheduled``
or ``archived``, and the heartbeat of the worker holding it; and learning when jobs
finish, from a change stream on ``archived`` (:func:`open_archived_stream`).

Invariant: reads only. Every read is by ``_id`` (no scan); the heartbeat is read
only for a job that is locked, from the ``locked_by`` its document names.
:func:`recruiter.domain.following.view_of` turns what they return into a view. A
stream event carries only a job's ``_id``: the job itself is read by ``_id``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pymongo
from pymongo.errors import OperationFailure, PyMongoError
from pymongo.synchronous.change_stream import ChangeStream

from recruiter.domain.following import JobView, view_of
from recruiter.domain.records import Query
from recruiter.store.change_streams import CLOSE_TIMEOUT_S, STREAMS_UNSUPPORTED, Stream, unless_ended
from recruiter.store.connection import first_line
from recruiter.store.edges import with_front, with_front_async
from recruiter.store.heartbeats import beats_of, beats_of_async
from recruiter.store.layout import Collections, Document, SyncCollections

SyncStream = ChangeStream[Document]


@dataclass(frozen=True)
class JobDocuments:
    """What the store holds about one job (any part may be missing)."""

    job_id: object
    scheduled: Document | None
    archived: Document | None
    beat: Document | None

    def view(self, now: datetime) -> JobView | None:
        return view_of(self.job_id, self.scheduled, self.archived, self.beat, now)


def _holder(doc: Document | None) -> str | None:
    if doc is None or doc.get("locked") is not True:
        return None
    holder = doc.get("locked_by")
    return holder if isinstance(holder, str) else None


def read_job_documents(c: SyncCollections, job_id: object) -> JobDocuments:
    """The documents of job ``job_id``: archived first (a finished job needs no other read)."""
    # $eq: an _id that is itself a document is not read as operators.
    archived = c.archived.find_one({"_id": {"$eq": job_id}})
    if archived is not None:
        return JobDocuments(job_id, None, archived, None)
    scheduled = with_front(c, c.scheduled.find_one({"_id": {"$eq": job_id}}))
    holder = _holder(scheduled)
    beat = beats_of(c.heartbeats, [holder]).get(holder) if holder is not None else None
    if scheduled is None:  # archived between the two reads
        archived = c.archived.find_one({"_id": {"$eq": job_id}})
    return JobDocuments(job_id, scheduled, archived, beat)


async def read_job_documents_async(c: Collections, job_id: object) -> JobDocuments:
    """:func:`read_job_documents` for asyncio code."""
    archived = await c.archived.find_one({"_id": {"$eq": job_id}})
    if archived is not None:
        return JobDocuments(job_id, None, archived, None)
    scheduled = await with_front_async(c, await c.scheduled.find_one({"_id": {"$eq": job_id}}))
    holder = _holder(scheduled)
    beat = (await beats_of_async(c.heartbeats, [holder])).get(holder) if holder is not None else None
    if scheduled is None:
        archived = await c.archived.find_one({"_id": {"$eq": job_id}})
    return JobDocuments(job_id, scheduled, archived, beat)


def read_archived(c: SyncCollections, job_ids: Sequence[object]) -> list[Document]:
    """The archived copies of those of ``job_ids`` that have one (one ``find`` by ``_id``)."""
    return list(c.archived.find({"_id": {"$in": list(job_ids)}}))


async def read_archived_async(c: Collections, job_ids: Sequence[object]) -> list[Document]:
    return await c.archived.find({"_id": {"$in": list(job_ids)}}).to_list()


def read_waiting_ids(c: SyncCollections, job_ids: Sequence[object]) -> set[object]:
    """Which of ``job_ids`` are in ``scheduled`` (one ``find`` by ``_id``, ids only)."""
    return {d["_id"] for d in c.scheduled.find({"_id": {"$in": list(job_ids)}}, {"_id": 1})}


async def read_waiting_ids_async(c: Collections, job_ids: Sequence[object]) -> set[object]:
    return {d["_id"] for d in await c.scheduled.find({"_id": {"$in": list(job_ids)}}, {"_id": 1}).to_list()}


# -- waiting for jobs to finish: one change stream on archived per producer (producer/shared_stream.py)


def archived_pipeline() -> list[Query]:
    """Events of jobs archived, each cut to the job's ``_id`` (``documentKey``), whatever the job:
    one stream serves every wait of a producer, each event handed to the waits of its job.

    A job is archived by an upsert (reported as an ``insert``) or, by a cancel, an
    insert; ``replace`` and ``update`` are kept for servers that report an upsert so.
    The event carries no document: an archived job may be near the 16 MiB limit, an
    event bigger than that would break the stream, so the job is read by ``_id``.
    """
    return [{"$match": {"operationType": {"$in": ["insert", "replace", "update"]}}},
            {"$project": {"documentKey": 1}}]


def _job_id_of(event: Document | None) -> object:
    key = event.get("documentKey") if event is not None else None
    return key.get("_id") if isinstance(key, dict) else None


def open_archived_stream(c: SyncCollections, max_await_s: float,
                         resume_after: Mapping[str, Any] | None = None) -> SyncStream:
    """Open the stream of :func:`archived_pipeline` (after ``resume_after``, a resume token, if
    given). Raises :class:`StreamsRefused` when the server will not run it (a standalone mongod,
    a user without the ``changeStream`` action, a resume token it no longer has)."""
    try:
        return c.archived.watch(archived_pipeline(), max_await_time_ms=max(1, int(max_await_s * 1000)),
                                resume_after=resume_after)
    except OperationFailure as exc:
        raise StreamsRefused(exc) from exc


async def open_archived_stream_async(c: Collections, max_await_s: float,
                                     resume_after: Mapping[str, Any] | None = None) -> Stream:
    try:
        return await c.archived.watch(archived_pipeline(), max_await_time_ms=max(1, int(max_await_s * 1000)),
                                      resume_after=resume_after)
    except OperationFailure as exc:
        raise StreamsRefused(exc) from exc


def next_finished(stream: SyncStream) -> object:
    """The ``_id`` of the next job archived, or None if none was within the stream's wait;
    :class:`recruiter.store.change_streams.StreamEnded` once the server has ended the stream."""
    return _job_id_of(unless_ended(stream.try_next(), stream.alive))


async def next_finished_async(stream: Stream) -> object:
    return _job_id_of(unless_ended(await stream.try_next(), stream.alive))


def close_stream(stream: SyncStream) -> None:
    """Close a change stream, giving up after a second (see :func:`recruiter.store.change_streams.close_quietly`)."""
    try:
        with pymongo.timeout(CLOSE_TIMEOUT_S):
            stream.close()
    except PyMongoError:
        pass


class StreamsRefused(Exception):
    """The server refused to open a change stream; the message says why, in one line.

    ``for_good``: the server cannot run change streams at all (a standalone mongod),
    as opposed to a refusal that may pass (the server shutting down, say).
    """

    def __init__(self, cause: OperationFailure) -> None:
        super().__init__(first_line(cause))
        self.for_good = cause.code in STREAMS_UNSUPPORTED
