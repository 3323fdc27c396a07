"""The ``heartbeats`` collection: when each worker process was last seen, and what its slots run.

One document per worker process (``_id``: its registration token as an ObjectId, see
:mod:`recruiter.domain.liveness`), written by one update per beat; an older version's
document of one roster entry is still read. Every read here returns one beat per roster
entry (:func:`recruiter.domain.liveness.expand_beats`), so the callers judge entries as before.

Invariant: a process writes only its own document, never creating it in a beat (only a
registration creates it); the recruiter and the cleaner only read heartbeats, and the
cleaner removes the slots of the entries it removed (the document with its last slot).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime

from bson import ObjectId
from pymongo import UpdateOne

from recruiter.domain.liveness import (
    FROM_PROCESS,
    PROCESS_KIND,
    expand_beats,
    fresh_ahead,
    malformed_process_docs,
    pick_beats,
    seen_ahead,
    slot_key,
)
from recruiter.domain.records import Query, Raw
from recruiter.store.layout import AsyncClientSession, AsyncColl, ClientSession, Document, SyncColl


def process_key(token: object) -> ObjectId | None:
    """The ``_id`` of the heartbeat document of the process whose registration token is ``token``
    (a roster entry's ``process``); None when it is not one (an older or hand-written entry)."""
    return ObjectId(token) if isinstance(token, str) and ObjectId.is_valid(token) else None


def _naming(ids: Sequence[object]) -> dict[str, list[Query]]:
    """Documents that may hold the beat of an entry in ``ids``: an older one by ``_id``, a
    process's by its ``ids`` (both indexed)."""
    listed = list(ids)
    return {"$or": [{"_id": {"$in": listed}}, {"ids": {"$in": listed}}]}


def _projection(fields: Mapping[str, object] | None, slot_keys: Sequence[str] | None = None) -> Query | None:
    """``fields`` and what a process document's beats need; of its slots, all of them, or only
    those under ``slot_keys`` (:func:`recruiter.domain.liveness.slot_key`)."""
    if fields is None:
        return None
    slots = {"slots": 1} if slot_keys is None else {f"slots.{k}": 1 for k in dict.fromkeys(slot_keys)}
    return {**fields, "kind": 1, **slots, "last_seen_at": 1, "fresh_until": 1, "heartbeat_interval_s": 1}

# -- the worker: its own entry, its job, its heartbeat (processes/worker) --------------

async def write_first_beat(heartbeats: AsyncColl, beat: Query) -> None:
    """A registration's heartbeat document of one entry (a slot without a process token),
    replacing whatever an earlier one left."""
    await heartbeats.replace_one({"_id": beat["_id"]}, beat, upsert=True)


async def register_slots(heartbeats: AsyncColl, key: ObjectId, process: Query, slots: Sequence[Query]) -> None:
    """Slots' registration in their process's document, in one write; the document is created
    if missing (the first registration, or after the cleaner removed the process as dead): the
    process is seen now."""
    named = {str(slot["id"]): slot for slot in slots}
    sets = {**process, **{f"slots.{slot_key(i)}": slot for i, slot in named.items()}}
    await heartbeats.update_one({"_id": key}, {"$set": sets, "$addToSet": {"ids": {"$each": list(named)}}}, upsert=True)


def write_process_beat(heartbeats: SyncColl, key: ObjectId, fields: Query) -> bool:
    """One beat of a whole process (from its heartbeat thread): one update, never an insert;
    whether the document was there."""
    return bool(heartbeats.update_one({"_id": key, "kind": PROCESS_KIND}, {"$set": fields}).matched_count)


async def delete_process_beat(heartbeats: AsyncColl, key: ObjectId) -> None:
    """A process that stopped, every slot gone from the roster: its document goes."""
    await heartbeats.delete_one({"_id": key, "kind": PROCESS_KIND})


async def read_entry_beat(heartbeats: AsyncColl, entry: Raw) -> Document | None:
    """The beat of roster ``entry`` (same session): from its process's document, else its own."""
    key = process_key(entry.get("process"))
    docs = await heartbeats.find({"$or": [{"_id": entry.get("_id")}, *([{"_id": key}] if key else [])]}).to_list()
    beat = pick_beats([b for b in expand_beats(docs) if b["_id"] == entry.get("_id")],
                      {entry.get("_id"): entry}).get(entry.get("_id"))
    return beat if beat is not None and beat.get("session") == entry.get("session") else None


async def delete_own_beat(heartbeats: AsyncColl, slot_id: str, session: ObjectId) -> None:
    await heartbeats.delete_one({"_id": slot_id, "session": session})


def beat_writes(beats: Sequence[tuple[str, object, Query]]) -> list[UpdateOne]:
    """One update per ``(slot id, session, fields)``, fenced by the session."""
    return [UpdateOne({"_id": slot_id, "session": session}, {"$set": fields}) for slot_id, session, fields in beats]


def write_beats(heartbeats: SyncColl, beats: Sequence[tuple[str, object, Query]]) -> None:
    """Every slot's beat in one write (from the heartbeat thread)."""
    heartbeats.bulk_write(beat_writes(beats), ordered=False)



# -- the recruiter and the cleaner (processes/recruiter.py, processes/cleaner.py) ------


# What a round needs of a heartbeat (recruiter.domain.liveness).
BEAT_FIELDS = {"session": 1, "fresh_until": 1, "last_seen_at": 1, "heartbeat_interval_s": 1, "working_token": 1}


async def read_round_beats(heartbeats: AsyncColl, entries: Sequence[Raw], now: datetime, *,
                           stale: bool = True) -> tuple[list[Document], list[object]]:
    """The beats of the roster ``entries`` and, with ``stale``, every beat no longer fresh at
    ``now`` or dated too far ahead (:func:`recruiter.domain.liveness.dated_ahead`); an entry may
    have several: pick by session, :func:`recruiter.domain.liveness.pick_beats`;
    and the ``_id`` of the process documents read that are malformed (they name no entry).

    An entry's beat is in its process's document (``_id``: :func:`process_key` of the entry's
    ``process``) or, from an older version, in a document of its own (``_id``: the entry's):
    one read by ``_id``, served by point lookups. It is not read by the documents' ``ids``
    arrays, which the embedded server matches by scanning every document and comparing
    each listed id with each asked one: at 800 slots that was about a third of its time.
    The stale beats are a second, indexed read, and those dated too far ahead a third (not an ``$or``
    of the two, which the embedded server would serve by a scan), at the same time. Nothing to read:
    no round trip."""
    ids = [e["_id"] for e in entries]
    keys = [k for k in dict.fromkeys(process_key(e.get("process")) for e in entries) if k is not None]
    stale_docs, ahead_docs, named_docs = await asyncio.gather(
        heartbeats.find({"fresh_until": {"$lte": now}}, _projection(BEAT_FIELDS)).to_list() if stale else _none(),
        heartbeats.find(fresh_ahead(now), _projection(BEAT_FIELDS)).to_list() if stale else _none(),
        heartbeats.find({"_id": {"$in": [*ids, *keys]}}, _slots_projection(ids)).to_list() if ids else _none())
    stale_docs += ahead_docs
    # A document both named and stale is read twice: the stale read has all its slots, keep that one
    # (by repr: a malformed _id may not be hashable).
    whole = {repr(d.get("_id")) for d in stale_docs}
    docs = [*stale_docs, *(d for d in named_docs if repr(d.get("_id")) not in whole)]
    return expand_beats(docs), malformed_process_docs(docs)


async def _none() -> list[Document]:
    return []


# Past this many entries a round's read of named beats takes the process documents' whole ``slots``.
SLOTS_PROJECTED_MAX = 64


def _slots_projection(ids: Sequence[object]) -> Query | None:
    """What a round reads of the documents holding ``ids``' beats: the round's fields and, of a
    process document, only the slots of those entries (a process of 100 slots otherwise sends all
    100 for the one that was freed); every slot past :data:`SLOTS_PROJECTED_MAX` entries."""
    named = [i for i in ids if isinstance(i, str)]
    whole = len(named) > SLOTS_PROJECTED_MAX or len(named) < len(ids)
    return _projection(BEAT_FIELDS, None if whole else [slot_key(i) for i in named])


async def read_stale(heartbeats: AsyncColl, now: datetime, cutoff: datetime) -> list[Document]:
    """Beats no longer fresh at ``now``, last seen before ``cutoff``, or dated too far ahead to be
    believed (:func:`recruiter.domain.liveness.dated_ahead`): one per entry a document names."""
    return expand_beats(await heartbeats.find(
        {"$or": [{"fresh_until": {"$lte": now}}, {"last_seen_at": {"$lt": cutoff}},
                 seen_ahead(now), fresh_ahead(now)]}).to_list())


async def read_dated(heartbeats: AsyncColl, ids: Sequence[object]) -> set[object]:
    """Which of ``ids`` have a heartbeat with a date in ``last_seen_at`` (one without counts as none)."""
    wanted = set(ids)
    docs = await heartbeats.find(_naming(ids), _projection({"session": 1})).to_list()
    return {b["_id"] for b in expand_beats(docs)
            if b["_id"] in wanted and isinstance(b.get("last_seen_at"), datetime)}


async def delete_beat(heartbeats: AsyncColl, beat: Mapping[str, object]) -> bool:
    """Delete a heartbeat as it was read (same ``last_seen_at``); whether it was deleted.

    A slot's beat from a process document is removed from it (fenced on the process's
    ``last_seen_at`` and the slot's ``session``), and the document goes with its last slot."""
    if FROM_PROCESS not in beat:
        gone = await heartbeats.delete_one({"_id": beat["_id"], "last_seen_at": {"$eq": beat.get("last_seen_at")}})
        return bool(gone.deleted_count)
    key, entry_id = beat[FROM_PROCESS], str(beat["_id"])
    field = f"slots.{slot_key(entry_id)}"
    # The values as read compared as values ($eq): one written as a document shaped like an operator
    # ({"$x": 1}) is not read as one (the server refused it, and the cleaner's pass with it, at every pass).
    fence: Query = {"_id": {"$eq": key}, "kind": PROCESS_KIND, "last_seen_at": {"$eq": beat.get("last_seen_at")},
                    f"{field}.session": {"$eq": beat.get("session")}}
    changed = await heartbeats.update_one({**fence, "ids": {"$type": "array"}},
                                          {"$unset": {field: ""}, "$pull": {"ids": entry_id}})
    if not changed.modified_count:
        # An ``ids`` that is not an array (a hand edit) would fail ``$pull``, and with it the cleaner's
        # whole pass, at every pass: the slot goes without it (beats are read from ``slots``).
        changed = await heartbeats.update_one({**fence, "ids": {"$not": {"$type": "array"}}}, {"$unset": {field: ""}})
    if not changed.modified_count:
        return False
    await heartbeats.delete_one({"_id": key, "kind": PROCESS_KIND, "$or": [{"ids": {"$size": 0}}, {"slots": {}}]})
    return True


async def delete_undated(heartbeats: AsyncColl, worker_id: object) -> None:
    """Delete the unreadable heartbeats of entry ``worker_id`` (no beat of it could be read), which
    go with the entry: its own document without a date in ``last_seen_at``, every document naming it
    that cannot be read at all, and its slot in a process document where only that slot cannot."""
    await heartbeats.delete_one({"_id": worker_id, "last_seen_at": {"$not": {"$type": "date"}}})
    # A document that names it and cannot be read: a process's without a date or without slots (an
    # array of them too: ``$type`` "object" matches an array holding one), or one of no kind read
    # (neither a process's nor, by its string ``_id``, an older version's). No slot of it is.
    await heartbeats.delete_many({"ids": worker_id, "$or": [
        {"kind": PROCESS_KIND, "last_seen_at": {"$not": {"$type": "date"}}},
        {"kind": PROCESS_KIND, "slots": {"$not": {"$type": "object"}}},
        {"kind": PROCESS_KIND, "slots": {"$type": "array"}},
        {"kind": {"$ne": PROCESS_KIND}, "_id": {"$not": {"$type": "string"}}}]})
    if not isinstance(worker_id, str):
        return
    # A readable process document whose slot of it cannot be read (not a document, another id): that
    # slot goes, and the document with its last one. A slot readable again (its process beat since) is kept.
    field = f"slots.{slot_key(worker_id)}"
    unread: Query = {"kind": PROCESS_KIND, "$and": [{"ids": worker_id}, {"ids": {"$type": "array"}}],
                     "slots": {"$type": "object"}, f"{field}.id": {"$ne": worker_id}}
    keys = [d["_id"] for d in await heartbeats.find(unread, {"_id": 1}).to_list()]
    if keys:
        await heartbeats.update_many({**unread, "_id": {"$in": keys}},
                                     {"$unset": {field: ""}, "$pull": {"ids": worker_id}})
        await heartbeats.delete_many({"_id": {"$in": keys}, "kind": PROCESS_KIND,
                                      "$or": [{"ids": {"$size": 0}}, {"slots": {}}]})



# -- liveness, quarantine and the fairness cursor (moved from domain/) -----------------


# -- the producer and the operator's commands (producer/, cli/) ------------------------


def heartbeats_by_worker(heartbeats: SyncColl, fields: Query | None = None,
                         entries: Mapping[object, Raw] | None = None) -> dict[object, Document]:
    """Every roster entry's beat by its id, with ``fields`` only if given (the operator's reads);
    the one with the entry's session where ``entries`` are given."""
    return pick_beats(expand_beats(list(heartbeats.find({}, _projection(fields)))), entries)


def beats_of(heartbeats: SyncColl, ids: Sequence[object], entries: Mapping[object, Raw] | None = None,
             session: ClientSession | None = None) -> dict[object, Document]:
    """The beats of the entries ``ids`` (holders of locked jobs), by entry id: one read."""
    if not ids:
        return {}
    wanted = set(ids)
    docs = list(heartbeats.find(_naming(ids), session=session))
    return pick_beats([b for b in expand_beats(docs) if b["_id"] in wanted], entries)


async def beats_of_async(heartbeats: AsyncColl, ids: Sequence[object], entries: Mapping[object, Raw] | None = None,
                         session: AsyncClientSession | None = None) -> dict[object, Document]:
    """:func:`beats_of` for asyncio code."""
    if not ids:
        return {}
    wanted = set(ids)
    docs = await heartbeats.find(_naming(ids), session=session).to_list()
    return pick_beats([b for b in expand_beats(docs) if b["_id"] in wanted], entries)
