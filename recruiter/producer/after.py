"""The producer's part in jobs that wait for other jobs: check what they wait for before the write.

The ids in ``after`` must be jobs (queued or archived) or jobs of the same batch, without a
cycle; those archived already count at once (:func:`recruiter.domain.dependencies.settle`).
A refusal is a one-line :class:`~recruiter.domain.job.JobRefused`, nothing written.

A job still held that waits for more than :data:`~recruiter.domain.edges.INLINE_MAX` jobs is
stored with its dependencies as edges of their own (:mod:`recruiter.domain.edges`), written in
the same transaction as the jobs: all or nothing.
"""

from __future__ import annotations

from typing import Any

from recruiter.domain.dependencies import settle
from recruiter.domain.edges import INLINE_MAX, counted_form
from recruiter.domain.job import JobRefused
from recruiter.store import batches, scheduled
from recruiter.store.batches import BatchRefused
from recruiter.store.dependencies import archived_whys, archived_whys_async, existing_ids, existing_ids_async
from recruiter.store.edges import insert_with_edges, insert_with_edges_async
from recruiter.store.layout import Collections, Document, SyncCollections


def _wanted(docs: list[Document]) -> list[Any]:
    return list({i: None for d in docs if isinstance(d.get("after"), dict) for i in d["after"]["ids"]})


def settled(c: SyncCollections, docs: list[Document], session: Any = None) -> list[Document]:
    """``docs``, their ``after`` checked and settled (see the module)."""
    return _settled(c, docs, session)[0]


def _settled(c: SyncCollections, docs: list[Document], session: Any = None) -> tuple[list[Document], list[Document]]:
    """``docs`` settled, and the edges of those stored with edges."""
    wanted = _wanted(docs)
    if not wanted:
        return docs, []
    known = existing_ids(c, wanted, session)
    ended = archived_whys(c, [i for i in wanted if i in known], session)
    _refuse(settle(docs, known, ended))
    return docs, _to_edges(docs, ended)


async def _settled_async(c: Collections, docs: list[Document], session: Any = None
                         ) -> tuple[list[Document], list[Document]]:
    """:func:`_settled` for the asyncio client."""
    wanted = _wanted(docs)
    if not wanted:
        return docs, []
    known = await existing_ids_async(c, wanted, session)
    ended = await archived_whys_async(c, [i for i in wanted if i in known], session)
    _refuse(settle(docs, known, ended))
    return docs, _to_edges(docs, ended)


def _to_edges(docs: list[Document], ended: dict[object, object]) -> list[Document]:
    """Store the held jobs of more than INLINE_MAX dependencies with edges: their edges."""
    edges: list[Document] = []
    for d in docs:
        after = d.get("after")
        if isinstance(after, dict) and after.get("held") and len(after["ids"]) > INLINE_MAX:
            d["after"], mine = counted_form(d, ended)
            edges += mine
    return edges


def _refuse(problem: str | None) -> None:
    if problem:
        raise JobRefused(problem)


def insert_job(c: SyncCollections, doc: Document, session: Any = None) -> None:
    """Store one job built by the producer, its ``after`` settled first."""
    docs, edges = _settled(c, [doc], session)
    if edges:
        _refused(lambda: insert_with_edges(c, docs, edges, session))
    else:
        scheduled.insert_job(c.scheduled, docs[0], session)


def insert_batch(c: SyncCollections, docs: list[Document], session: Any = None) -> None:
    """Store a batch all or nothing (:func:`recruiter.store.batches.insert_batch`), its ``after`` settled first."""
    docs, edges = _settled(c, docs, session)
    if edges:
        insert_with_edges(c, docs, edges, session)
    else:
        batches.insert_batch(c.scheduled, docs, session)


async def insert_job_async(c: Collections, doc: Document, session: Any = None) -> None:
    """:func:`insert_job` for the asyncio client."""
    docs, edges = await _settled_async(c, [doc], session)
    if not edges:
        await scheduled.insert_job_async(c.scheduled, docs[0], session)
        return
    try:
        await insert_with_edges_async(c, docs, edges, session)
    except BatchRefused as exc:
        raise JobRefused(str(exc)) from None


async def insert_batch_async(c: Collections, docs: list[Document], session: Any = None) -> None:
    """:func:`insert_batch` for the asyncio client."""
    docs, edges = await _settled_async(c, docs, session)
    if edges:
        await insert_with_edges_async(c, docs, edges, session)
    else:
        await batches.insert_batch_async(c.scheduled, docs, session)


def _refused(write: Any) -> None:
    try:
        write()
    except BatchRefused as exc:
        raise JobRefused(str(exc)) from None
