"""Reading the documents that tell where one job is: its job document in ``scheduled``
or ``archived``, and the heartbeat of the worker holding it.

Invariant: reads only. The three reads are by ``_id`` (no scan); the heartbeat is
read only for a job that is locked, from the ``locked_by`` its document names.
:func:`recruiter.domain.following.view_of` turns what they return into a view.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from recruiter.domain.following import JobView, view_of
from recruiter.store.layout import Collections, Document, SyncCollections


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
    scheduled = c.scheduled.find_one({"_id": {"$eq": job_id}})
    holder = _holder(scheduled)
    beat = c.heartbeats.find_one({"_id": holder}) if holder is not None else None
    if scheduled is None:  # archived between the two reads
        archived = c.archived.find_one({"_id": {"$eq": job_id}})
    return JobDocuments(job_id, scheduled, archived, beat)


async def read_job_documents_async(c: Collections, job_id: object) -> JobDocuments:
    """:func:`read_job_documents` for asyncio code."""
    archived = await c.archived.find_one({"_id": {"$eq": job_id}})
    if archived is not None:
        return JobDocuments(job_id, None, archived, None)
    scheduled = await c.scheduled.find_one({"_id": {"$eq": job_id}})
    holder = _holder(scheduled)
    beat = await c.heartbeats.find_one({"_id": holder}) if holder is not None else None
    if scheduled is None:
        archived = await c.archived.find_one({"_id": {"$eq": job_id}})
    return JobDocuments(job_id, scheduled, archived, beat)


def read_archived(c: SyncCollections, job_ids: Sequence[object]) -> list[Document]:
    """The archived copies of those of ``job_ids`` that have one (one ``find`` by ``_id``)."""
    return list(c.archived.find({"_id": {"$in": list(job_ids)}}))


async def read_archived_async(c: Collections, job_ids: Sequence[object]) -> list[Document]:
    return await c.archived.find({"_id": {"$in": list(job_ids)}}).to_list()
