"""The ``heartbeats`` collection: when each worker slot was last seen, and what it runs.

Invariant: A slot writes only its own heartbeat, fenced by its ``session``; the recruiter
and the cleaner only read heartbeats and delete those of entries they removed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from bson import ObjectId
from pymongo import UpdateOne

from recruiter.domain.records import Query
from recruiter.store.layout import AsyncColl, Document, SyncColl

# -- the worker: its own entry, its job, its heartbeat (processes/worker) --------------

async def write_first_beat(heartbeats: AsyncColl, beat: Query) -> None:
    """A registration's heartbeat document, replacing whatever an earlier one left."""
    await heartbeats.replace_one({"_id": beat["_id"]}, beat, upsert=True)


async def read_beat(heartbeats: AsyncColl, slot_id: str) -> Document | None:
    return await heartbeats.find_one({"_id": slot_id})


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


async def read_round_beats(heartbeats: AsyncColl, ids: Sequence[object], now: datetime) -> list[Document]:
    """The beats of entries ``ids`` and every beat no longer fresh at ``now``: one read, both indexed."""
    return await heartbeats.find({"$or": [{"_id": {"$in": list(ids)}}, {"fresh_until": {"$lte": now}}]},
                                 BEAT_FIELDS).to_list()


async def read_stale(heartbeats: AsyncColl, now: datetime, cutoff: datetime) -> list[Document]:
    """Beats no longer fresh at ``now``, or last seen before ``cutoff``."""
    return await heartbeats.find({"$or": [{"fresh_until": {"$lte": now}}, {"last_seen_at": {"$lt": cutoff}}]}).to_list()


async def read_dated(heartbeats: AsyncColl, ids: Sequence[object]) -> set[object]:
    """Which of ``ids`` have a heartbeat with a date in ``last_seen_at`` (one without counts as none)."""
    return {b["_id"] for b in await heartbeats.find({"_id": {"$in": list(ids)}}, {"last_seen_at": 1}).to_list()
            if isinstance(b.get("last_seen_at"), datetime)}


async def delete_beat(heartbeats: AsyncColl, beat: Mapping[str, object]) -> bool:
    """Delete a heartbeat as it was read (same ``last_seen_at``); whether it was deleted."""
    gone = await heartbeats.delete_one({"_id": beat["_id"], "last_seen_at": beat.get("last_seen_at")})
    return bool(gone.deleted_count)


async def delete_undated(heartbeats: AsyncColl, worker_id: object) -> None:
    """Delete an unreadable heartbeat (no date in ``last_seen_at``), which goes with its entry."""
    await heartbeats.delete_one({"_id": worker_id, "last_seen_at": {"$not": {"$type": "date"}}})



# -- liveness, quarantine and the fairness cursor (moved from domain/) -----------------


# -- the producer and the operator's commands (producer/, cli/) ------------------------


def heartbeats_by_worker(heartbeats: SyncColl, fields: Query | None = None) -> dict[object, Document]:
    """Every heartbeat by its worker id, with ``fields`` only if given (the operator's reads)."""
    return {b["_id"]: b for b in heartbeats.find({}, fields)}
