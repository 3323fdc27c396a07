"""The producer's part in jobs that wait for other jobs: check what they wait for before the write.

The ids in ``after`` must be jobs (queued or archived) or jobs of the same batch, without a
cycle; those archived already count at once (:func:`recruiter.domain.dependencies.settle`).
A refusal is a one-line :class:`~recruiter.domain.job.JobRefused`, nothing written.
"""

from __future__ import annotations

from typing import Any

from recruiter.domain.dependencies import settle
from recruiter.domain.job import JobRefused
from recruiter.store import batches, scheduled
from recruiter.store.dependencies import archived_whys, archived_whys_async, existing_ids, existing_ids_async
from recruiter.store.layout import Collections, Document, SyncCollections


def _wanted(docs: list[Document]) -> list[Any]:
    return list({i: None for d in docs if isinstance(d.get("after"), dict) for i in d["after"]["ids"]})


def settled(c: SyncCollections, docs: list[Document], session: Any = None) -> list[Document]:
    """``docs``, their ``after`` checked and settled (see the module)."""
    wanted = _wanted(docs)
    if wanted:
        known = existing_ids(c, wanted, session)
        _refuse(settle(docs, known, archived_whys(c, [i for i in wanted if i in known], session)))
    return docs


async def settled_async(c: Collections, docs: list[Document], session: Any = None) -> list[Document]:
    """:func:`settled` for the asyncio client."""
    wanted = _wanted(docs)
    if wanted:
        known = await existing_ids_async(c, wanted, session)
        _refuse(settle(docs, known, await archived_whys_async(c, [i for i in wanted if i in known], session)))
    return docs


def _refuse(problem: str | None) -> None:
    if problem:
        raise JobRefused(problem)


def insert_job(c: SyncCollections, doc: Document, session: Any = None) -> None:
    """Store one job built by the producer, its ``after`` settled first."""
    scheduled.insert_job(c.scheduled, settled(c, [doc], session)[0], session)


def insert_batch(c: SyncCollections, docs: list[Document], session: Any = None) -> None:
    """Store a batch all or nothing (:func:`recruiter.store.batches.insert_batch`), its ``after`` settled first."""
    batches.insert_batch(c.scheduled, settled(c, docs, session), session)


async def insert_job_async(c: Collections, doc: Document, session: Any = None) -> None:
    """:func:`insert_job` for the asyncio client."""
    await scheduled.insert_job_async(c.scheduled, (await settled_async(c, [doc], session))[0], session)


async def insert_batch_async(c: Collections, docs: list[Document], session: Any = None) -> None:
    """:func:`insert_batch` for the asyncio client."""
    await batches.insert_batch_async(c.scheduled, await settled_async(c, docs, session), session)
