"""The reads and conditional writes of jobs that wait for other jobs (:mod:`recruiter.domain.dependencies`).

Invariant: every write is conditional on the dependent still held (``after.held: true``),
so releasing or archiving one happens once whoever tries it, however often; a dependent
is archived (an ``$setOnInsert`` upsert) before it is deleted from ``scheduled``. The
leader's writes take the collections of its fenced transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from bson import ObjectId
from pymongo import ReturnDocument

from recruiter.domain.dependencies import (
    GONE,
    Archive,
    Release,
    Wait,
    decide,
    failures,
    parse_after,
    pending_of,
    waited_for,
)
from recruiter.domain.dependency_results import KEY, PROJECTION, results_of
from recruiter.domain.edges import is_counted
from recruiter.domain.outcome import MALFORMED, archived_document
from recruiter.store.edges import any_left, count_down, drop_edges, manifest
from recruiter.store.layout import Collections, Document, SyncCollections

HELD: Document = {"after.held": True}
# Most dependents one call resolves, cascades included; the sweep takes up the rest.
MAX_RESOLVED = 1_000


def archived_copy(job: Document, why: str, reason: str, now: datetime) -> Document:
    """The ``archived`` copy of a held job decided ``why`` (its upstream named in ``reason``)."""
    doc = archived_document(job, {"decision": {"archive": why, "reason": reason}, "executed": False}, now)
    doc["attempts"] = job.get("attempts", 0)
    after = job.get("after")
    if isinstance(after, dict):  # archived while held: its own due time, and no longer held
        kept = {k: v for k, v in after.items() if k != "held"}
        if isinstance(after.get("pending"), list):  # without its guard (its own id)
            kept["pending"] = [i for i in after["pending"] if i != job.get("_id")]
        doc["after"] = kept
        if isinstance(after.get("due_at"), datetime):
            doc["scheduled_at"] = after["due_at"]
    return doc


async def release_dependents(c: Collections, ended: Mapping[object, object], now: datetime) -> list[Document]:
    """Jobs ``ended`` (id -> why) were archived: pull them from their dependents' ``pending``
    and resolve each dependent that waits for nothing more (cascading to the dependents of
    those archived in turn). Returns the dependents archived (id, why)."""
    archived_now: list[Document] = []
    todo = {k: v for k, v in ended.items() if isinstance(k, ObjectId)}
    while todo and len(archived_now) < MAX_RESOLVED:
        found = [d async for d in c.scheduled.find({"after.pending": {"$in": list(todo)}, **HELD},
                                                   {"after.pending": 1}).limit(MAX_RESOLVED)]
        nxt: dict[object, object] = {}
        for dep in found:
            pending = pending_of(dep.get("after"))
            if isinstance(pending, str):  # set aside: a $pullAll on it would fail, and every release with it
                if (done := await _archive(c, dep, MALFORMED, pending, now)) is not None:
                    archived_now.append(done)
                    nxt[done["_id"]] = done["why"]
                continue
            pulled = [i for i in pending if isinstance(i, ObjectId) and i in todo]
            after = await c.scheduled.find_one_and_update(
                {"_id": dep["_id"], **HELD},
                {"$pullAll": {"after.pending": pulled},
                 "$addToSet": {"after.failed": {"$each": failures({i: todo[i] for i in pulled})}}},
                return_document=ReturnDocument.AFTER)
            if after is not None and (done := await resolve(c, after, now)) is not None:
                archived_now.append(done)
                nxt[done["_id"]] = done["why"]
        for dep_id in await count_down(c, todo):  # dependents stored with edges (recruiter.domain.edges)
            whole = await c.scheduled.find_one({"_id": dep_id, **HELD})
            if whole is not None and (done := await resolve(c, whole, now)) is not None:
                archived_now.append(done)
                nxt[done["_id"]] = done["why"]
        todo = {k: v for k, v in nxt.items() if isinstance(k, ObjectId)}
    return archived_now


async def resolve(c: Collections, job: Document, now: datetime) -> Document | None:
    """Release ``job`` (held, as read) or archive it, if it waits for nothing more; the archived
    copy (id, why) when it was archived, else None. Conditional: a job no longer held is left."""
    after = parse_after(job.get("after"), job["_id"])
    if isinstance(after, str):
        return await _archive(c, job, MALFORMED, after, now)
    ids: list[ObjectId] | None = None
    if after.counted is not None:  # decided once no edge of it is left (recruiter.domain.edges)
        if await any_left(c, job["_id"]):
            return None
        after = replace(after, counted=replace(after.counted, left=0))
        if isinstance(listed := await manifest(c, job["_id"]), str):
            return await _archive(c, job, MALFORMED, listed, now)
        ids = listed
    decision = decide(after)
    if isinstance(decision, Wait):
        return None
    if isinstance(decision, Release):
        if (await c.scheduled.update_one(release_filter(job), release_update(decision, now, ids))).modified_count \
                and ids is not None:
            await drop_edges(c, job["_id"])
        return None
    assert isinstance(decision, Archive)
    return await _archive(c, job, decision.why, decision.reason, now)


def release_filter(job: Document) -> Document:
    """A held job with nothing pending but, for a guarded one, its own id (recruiter.domain.dependency_policy)."""
    return {"_id": job["_id"], **HELD, "locked": False,
            "$or": [{"after.pending": {"$size": 0}}, {"after.pending": [job["_id"]]}]}


def release_update(decision: Release, now: datetime, ids: list[ObjectId] | None = None) -> Document:
    """Released: due at its own time. One stored with edges gets its ``ids`` (read from its list:
    recruiter.domain.edges) in place of its own id, as 0.2.0 would have stored it released."""
    fields = {"scheduled_at": decision.due_at, "after.released_at": now, "after.pending": []}
    return {"$set": fields | ({"after.ids": ids} if ids is not None else {}), "$unset": {"after.held": ""}}


async def archive_held(c: Collections, job: Document, why: str, reason: str, now: datetime) -> Document | None:
    """Archive the held ``job`` ``why`` (conditional on it still held and not locked): its archived
    copy's (id, why), or None when it was not."""
    return await _archive(c, job, why, reason, now)


async def _archive(c: Collections, job: Document, why: str, reason: str, now: datetime) -> Document | None:
    whole = await c.scheduled.find_one({"_id": job["_id"], **HELD, "locked": False})
    if whole is None:
        return None
    doc = archived_copy(whole, why, reason, now)
    counted = is_counted(whole.get("after"))
    if counted:  # its ids from its list (recruiter.domain.edges), for its history
        doc["after"]["ids"] = listed if isinstance(listed := await manifest(c, whole["_id"]), list) else []
    await c.archived.update_one({"_id": whole["_id"]}, {"$setOnInsert": doc}, upsert=True)
    if (await c.scheduled.delete_one({"_id": whole["_id"], **HELD, "locked": False})).deleted_count != 1:
        return None
    if counted:
        await drop_edges(c, whole["_id"])
    return {"_id": whole["_id"], "why": why, "reason": reason, "attempts": whole.get("attempts"),
            "group": whole.get("group"), "workflow": whole.get("workflow")}


async def read_held(c: Collections, after_id: object, limit: int) -> list[Document]:
    """Up to ``limit`` held jobs by ``_id`` past ``after_id`` (None: from the start); the
    ``waiting_for`` index serves it (only held jobs are in it)."""
    where: Document = dict(HELD)
    if after_id is not None:
        where["_id"] = {"$gt": after_id}
    return [d async for d in c.scheduled.find(where, {"after": 1, "locked": 1}).sort("_id", 1).limit(limit)]


async def read_ended(c: Collections, ids: Sequence[object]) -> dict[object, object]:
    """Of ``ids``, those that ended: id -> why (:data:`GONE` for one neither queued nor archived).
    ``scheduled`` is read first: a job moves there to ``archived`` (archived copy first), so one
    not found in ``scheduled`` and then not in ``archived`` was pruned or deleted."""
    queued = {d["_id"] for chunk in _chunks(ids) async for d in c.scheduled.find({"_id": {"$in": chunk}}, {"_id": 1})}
    rest = [i for i in ids if i not in queued]
    whys = {d["_id"]: d.get("why") for chunk in _chunks(rest)
            async for d in c.archived.find({"_id": {"$in": chunk}}, {"why": 1})}
    return {i: whys.get(i, GONE) for i in rest}


# Ids per `$in` of the reads by id (the producer's checks, the results, the sweep): the embedded
# server's `$in` costs more than in proportion to its size (2 000 ids read in 3.2 s as two `$in`
# of 1 000, 0.76 s as ten of 200, 0.52 s as forty of 50 on a loaded 2-core machine).
CHUNK = 100


def _chunks(ids: Sequence[object]) -> list[list[object]]:
    return [list(ids[k:k + CHUNK]) for k in range(0, len(ids), CHUNK)]


def existing_ids(c: SyncCollections, ids: Sequence[ObjectId], session: object = None) -> set[object]:
    """Of ``ids``, those of a job queued or archived (the producer's check of ``after``), read in
    chunks of :data:`CHUNK` ids."""
    kw = {"session": session} if session is not None else {}
    found: set[object] = set()
    for chunk in _chunks(ids):
        found |= {d["_id"] for d in c.scheduled.find({"_id": {"$in": chunk}}, {"_id": 1}, **kw)}
        rest = [i for i in chunk if i not in found]
        if rest:
            found |= {d["_id"] for d in c.archived.find({"_id": {"$in": rest}}, {"_id": 1}, **kw)}
    return found


async def existing_ids_async(c: Collections, ids: Sequence[ObjectId], session: object = None) -> set[object]:
    """:func:`existing_ids` for the asyncio client."""
    kw = {"session": session} if session is not None else {}
    found: set[object] = set()
    for chunk in _chunks(ids):
        found |= {d["_id"] async for d in c.scheduled.find({"_id": {"$in": chunk}}, {"_id": 1}, **kw)}
        rest = [i for i in chunk if i not in found]
        if rest:
            found |= {d["_id"] async for d in c.archived.find({"_id": {"$in": rest}}, {"_id": 1}, **kw)}
    return found


def archived_whys(c: SyncCollections, ids: Sequence[object], session: object = None) -> dict[object, object]:
    """Of ``ids``, those archived: id -> why (read in chunks)."""
    kw = {"session": session} if session is not None else {}
    return {d["_id"]: d.get("why") for chunk in _chunks(ids)
            for d in c.archived.find({"_id": {"$in": chunk}}, {"why": 1}, **kw)}


async def archived_whys_async(c: Collections, ids: Sequence[object], session: object = None) -> dict[object, object]:
    """:func:`archived_whys` for the asyncio client."""
    kw = {"session": session} if session is not None else {}
    out: dict[object, object] = {}
    for chunk in _chunks(ids):
        out |= {d["_id"]: d.get("why") async for d in c.archived.find({"_id": {"$in": chunk}}, {"why": 1}, **kw)}
    return out


async def with_dependency_results(c: Collections, job: Document) -> Document:
    """``job`` (a copy) with the results of the jobs it waited for beside it (one read of
    ``archived``, only for a job that waited for some): :mod:`recruiter.domain.dependency_results`."""
    ids = [ObjectId(i) for i in waited_for(job)]
    if not ids:
        return job
    found = {d["_id"]: d for chunk in _chunks(ids) async for d in c.archived.find({"_id": {"$in": chunk}}, PROJECTION)}
    return {**job, KEY: results_of(ids, found)}
