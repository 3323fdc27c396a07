"""The reads and writes of a large fan-in's dependency edges (:mod:`recruiter.domain.edges`).

Invariant: an edge counts once for its dependent, because only the write that deletes it
decrements the dependent's ``left``; the fate an edge brings is folded into the dependent
(a conditional, idempotent write) before the edge is deleted, so a crash never loses it.
Whether a dependent is decided is read from its edges (none left), never from ``left`` alone.
Every write to a dependent is conditional on it still held. A malformed edge is set aside:
logged with its reason, never counted (so it never releases its dependent early); the sweep
archives a dependent whose edge is malformed (:func:`front`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import structlog
from bson import ObjectId
from pymongo import WriteConcern
from pymongo.errors import OperationFailure, PyMongoError

from recruiter.domain.edges import (
    FRONT,
    FRONT_SHOWN,
    MANIFEST,
    NONE_FAILED,
    Edge,
    Fold,
    default_policy_of,
    is_counted,
    parse_edge,
    parse_manifest,
)
from recruiter.store.batches import NO_TRANSACTIONS, BatchRefused
from recruiter.store.connection import first_line
from recruiter.store.layout import Collections, Document, SyncCollections

log = structlog.get_logger("recruiter.dependencies")

COUNTED: Document = {"after.held": True, "after.edges": {"$exists": True}}
# Its counters numbers (a malformed one is left as it is: the sweep archives it as malformed).
COUNTERS: Document = {**COUNTED, "after.left": {"$type": "number"}, "after.failed_count": {"$type": "number"}}
# Most edges one call reads (the rest: the next round or look).
MAX_EDGES = 10_000
CHUNK = 1_000  # edges per insert_many
READ_CHUNK = 100  # ids per `$in` of a read


def _chunks(ids: list[ObjectId]) -> list[list[ObjectId]]:
    """``ids`` in `$in` of at most READ_CHUNK (the embedded server's `$in` costs more than in
    proportion to its size: recruiter.store.dependencies.CHUNK)."""
    return [ids[k:k + READ_CHUNK] for k in range(0, len(ids), READ_CHUNK)]


def _grouped(raws: Iterable[Document]) -> dict[ObjectId, list[Edge]]:
    out: dict[ObjectId, list[Edge]] = {}
    for raw in raws:
        edge = parse_edge(raw)
        if isinstance(edge, str):
            log.warning("dependencies.edge_set_aside", edge_id=str(raw.get("_id")), reason=edge)
            continue
        out.setdefault(edge.dependent, []).append(edge)
    return out


def _fold(edges: Sequence[Edge], ended: Mapping[ObjectId, object], if_failed: object) -> Fold:
    default = default_policy_of(if_failed if if_failed in ("cancel", "run") else "cancel")
    fold = Fold()
    for e in edges:
        fold = fold.plus(e.upstream, ended[e.upstream], e.policy or default)
    return fold


def _severity_write(dep: ObjectId, fold: Fold) -> tuple[Document, Document] | None:
    if fold.severity == NONE_FAILED:
        return None
    return ({"_id": dep, **COUNTED, "after.severity": {"$lt": fold.severity}},
            {"$set": {"after.severity": fold.severity, "after.by": fold.by, "after.by_why": fold.by_why}})


def _failed(edges: Sequence[Edge], ended: Mapping[ObjectId, object]) -> tuple[list[object], list[object]]:
    """The ids of the edges whose upstream ended done, and of the others."""
    done = [e.id for e in edges if ended[e.upstream] == "done"]
    return done, [e.id for e in edges if ended[e.upstream] != "done"]


_NOT_A_DOCUMENT = object()


def _if_failed(held: Document) -> object:
    """The ``after.if_failed`` of a held dependent as read, or :data:`_NOT_A_DOCUMENT` when its ``after``
    is not a document (an array of them matches the dotted filters all the same: a hand edit)."""
    after = held.get("after")
    return after.get("if_failed") if isinstance(after, Mapping) else _NOT_A_DOCUMENT


def _may_be_last(before: Document, counted: int) -> bool:
    """Whether the dependent (as it was before its ``left`` lost ``counted``) may have no edge left."""
    after = before.get("after")
    left = after.get("left") if isinstance(after, Mapping) else None
    return not isinstance(left, int) or left - counted <= 0


async def count_down(c: Collections, ended: Mapping[ObjectId, object]) -> list[ObjectId]:
    """Upstreams ``ended`` (id -> why): count their edges down (see the module). Returns the
    dependents that may be decided now (their ``left`` reached 0 and no edge of them is left)."""
    raws = [e for ids in _chunks(list(ended)) async for e in c.edges.find({"upstream": {"$in": ids}}).limit(MAX_EDGES)]
    ready: list[ObjectId] = []
    for dep, edges in _grouped(raws).items():
        held = await c.scheduled.find_one({"_id": dep, **COUNTED}, {"after.if_failed": 1})
        if held is None:  # its dependent decided or cancelled: the edges are left over
            if await c.archived.find_one({"_id": dep}, {"_id": 1}) is not None:
                await drop_edges(c, dep)
            continue
        if (if_failed := _if_failed(held)) is _NOT_A_DOCUMENT:
            continue  # its writes would fail (and the round with them): the sweep archives it as malformed
        fold = _fold(edges, ended, if_failed)
        if (write := _severity_write(dep, fold)) is not None:
            await c.scheduled.update_one(*write)
        done, failed = _failed(edges, ended)
        gone = (await c.edges.delete_many({"_id": {"$in": done}})).deleted_count if done else 0
        fails = sum([(await c.edges.delete_one({"_id": i})).deleted_count for i in failed])
        if gone + fails == 0:
            continue
        after = await c.scheduled.find_one_and_update(
            {"_id": dep, **COUNTERS}, {"$inc": {"after.left": -(gone + fails), "after.failed_count": fails}},
            projection={"after.left": 1})
        if after is not None and _may_be_last(after, gone + fails) and not await any_left(c, dep):
            ready.append(dep)
    return ready


def count_down_sync(c: SyncCollections, ended: Mapping[ObjectId, object]) -> list[ObjectId]:
    """:func:`count_down` with the synchronous client."""
    raws = [e for ids in _chunks(list(ended)) for e in c.edges.find({"upstream": {"$in": ids}}).limit(MAX_EDGES)]
    ready: list[ObjectId] = []
    for dep, edges in _grouped(raws).items():
        held = c.scheduled.find_one({"_id": dep, **COUNTED}, {"after.if_failed": 1})
        if held is None:  # (not yet written, where the server has no transactions: left alone)
            if c.archived.find_one({"_id": dep}, {"_id": 1}) is not None:
                drop_edges_sync(c, dep)
            continue
        if (if_failed := _if_failed(held)) is _NOT_A_DOCUMENT:
            continue  # as in count_down
        fold = _fold(edges, ended, if_failed)
        if (write := _severity_write(dep, fold)) is not None:
            c.scheduled.update_one(*write)
        done, failed = _failed(edges, ended)
        gone = c.edges.delete_many({"_id": {"$in": done}}).deleted_count if done else 0
        fails = sum(c.edges.delete_one({"_id": i}).deleted_count for i in failed)
        if gone + fails == 0:
            continue
        after = c.scheduled.find_one_and_update(
            {"_id": dep, **COUNTERS}, {"$inc": {"after.left": -(gone + fails), "after.failed_count": fails}},
            projection={"after.left": 1})
        if after is not None and _may_be_last(after, gone + fails) and not any_left_sync(c, dep):
            ready.append(dep)
    return ready


async def any_left(c: Collections, dependent: object) -> bool:
    """Whether an edge of ``dependent`` is left."""
    return await c.edges.find_one({"dependent": dependent}, {"_id": 1}) is not None


def any_left_sync(c: SyncCollections, dependent: object) -> bool:
    return c.edges.find_one({"dependent": dependent}, {"_id": 1}) is not None


async def front(c: Collections, dependent: object, limit: int) -> tuple[list[ObjectId], str | None]:
    """The upstreams of the first ``limit`` edges left of ``dependent``, and the reason the first
    malformed one among them is (None: none is)."""
    ups: list[ObjectId] = []
    async for raw in c.edges.find({"dependent": dependent}).sort("_id", 1).limit(limit):
        edge = parse_edge(raw)
        if isinstance(edge, str):
            return ups, f"its dependency edge {raw.get('_id')}: {edge}"
        ups.append(edge.upstream)
    return ups, None


def front_sync(c: SyncCollections, dependent: object, limit: int) -> list[ObjectId]:
    """The upstreams of the first ``limit`` well-formed edges left of ``dependent`` (the views)."""
    out: list[ObjectId] = []
    for raw in c.edges.find({"dependent": dependent}, {"upstream": 1}).sort("_id", 1).limit(limit):
        if isinstance(raw.get("upstream"), ObjectId):
            out.append(raw["upstream"])
    return out


async def drop_edges(c: Collections, dependent: object) -> None:
    """Delete what is left of the edges of a decided dependent, and its list."""
    await c.edges.delete_many({"dependent": dependent})
    await c.edges.delete_one({"_id": dependent, MANIFEST: dependent})


def drop_edges_sync(c: SyncCollections, dependent: object) -> None:
    """:func:`drop_edges` with the synchronous client."""
    c.edges.delete_many({"dependent": dependent})
    c.edges.delete_one({"_id": dependent, MANIFEST: dependent})


async def manifest(c: Collections, dependent: object) -> list[ObjectId] | str:
    """Every id ``dependent`` waits for (its list), or the reason it cannot be read."""
    return parse_manifest(await c.edges.find_one({"_id": dependent, MANIFEST: dependent}), dependent)


def manifest_sync(c: SyncCollections, dependent: object) -> list[ObjectId] | str:
    """:func:`manifest` with the synchronous client."""
    return parse_manifest(c.edges.find_one({"_id": dependent, MANIFEST: dependent}), dependent)


def insert_edges(c: SyncCollections, edges: Sequence[Document], session: Any = None) -> None:
    """Write ``edges`` (in ``session``'s transaction when given), in chunks."""
    for k in range(0, len(edges), CHUNK):
        c.edges.insert_many(list(edges[k:k + CHUNK]), ordered=True, session=session)


async def insert_edges_async(c: Collections, edges: Sequence[Document], session: Any = None) -> None:
    """:func:`insert_edges` for the asyncio client."""
    for k in range(0, len(edges), CHUNK):
        await c.edges.insert_many(list(edges[k:k + CHUNK]), ordered=True, session=session)


def insert_with_edges(c: SyncCollections, docs: Sequence[Document], edges: Sequence[Document],
                      session: Any = None) -> None:
    """Store jobs and the edges of those stored with edges, all or nothing: in ``session``'s
    transaction, else one of its own; the edges first, so that no dependent is ever seen without
    them (where the server has no transactions, a failure leaves at most edges of no held job,
    which the first end of their upstream deletes). :class:`BatchRefused` if the server refuses."""
    if session is not None:
        insert_edges(c, edges, session)
        c.scheduled.insert_many(list(docs), ordered=True, session=session)
        return
    plain = SyncCollections.of(c.scheduled.database.with_options(write_concern=WriteConcern()))

    def write(s: Any) -> None:
        insert_edges(plain, edges, s)
        plain.scheduled.insert_many(list(docs), ordered=True, session=s)

    try:
        with c.scheduled.database.client.start_session() as own:
            own.with_transaction(write, write_concern=WriteConcern("majority"))
    except PyMongoError as exc:
        if not (isinstance(exc, OperationFailure) and exc.code == NO_TRANSACTIONS):
            raise BatchRefused(-1, len(docs), first_line(exc), 0) from None
        write(None)


async def insert_with_edges_async(c: Collections, docs: Sequence[Document], edges: Sequence[Document],
                                  session: Any = None) -> None:
    """:func:`insert_with_edges` for the asyncio client."""
    if session is not None:
        await insert_edges_async(c, edges, session)
        await c.scheduled.insert_many(list(docs), ordered=True, session=session)
        return
    plain = Collections.of(c.scheduled.database.with_options(write_concern=WriteConcern()))

    async def write(s: Any) -> None:
        await insert_edges_async(plain, edges, s)
        await plain.scheduled.insert_many(list(docs), ordered=True, session=s)

    try:
        async with c.scheduled.database.client.start_session() as own:
            await own.with_transaction(write, write_concern=WriteConcern("majority"))
    except PyMongoError as exc:
        if not (isinstance(exc, OperationFailure) and exc.code == NO_TRANSACTIONS):
            raise BatchRefused(-1, len(docs), first_line(exc), 0) from None
        await write(None)


def with_front(c: SyncCollections, doc: Document | None) -> Document | None:
    """``doc`` (a copy, for a view) with, if it is a held dependent stored with edges, the upstreams
    of its first edges left in ``after.front`` (recruiter.domain.edges.FRONT); else ``doc``."""
    after = doc.get("after") if doc is not None else None
    if doc is None or not (isinstance(after, dict) and after.get("held") is True and is_counted(after)):
        return doc
    return {**doc, "after": {**after, FRONT: front_sync(c, doc["_id"], FRONT_SHOWN)}}


async def with_front_async(c: Collections, doc: Document | None) -> Document | None:
    """:func:`with_front` for the asyncio client."""
    after = doc.get("after") if doc is not None else None
    if doc is None or not (isinstance(after, dict) and after.get("held") is True and is_counted(after)):
        return doc
    ups, _ = await front(c, doc["_id"], FRONT_SHOWN)
    return {**doc, "after": {**after, FRONT: ups}}
