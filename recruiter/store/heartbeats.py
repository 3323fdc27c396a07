"""The ``heartbeats`` collection: when each worker slot was last seen, and what it runs.

Invariant: A slot writes only its own heartbeat, fenced by its ``session``; the recruiter
and the cleaner only read heartbeats and delete those of entries they removed.
"""

from __future__ import annotations

from collections.abc import Sequence

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


# -- liveness, quarantine and the fairness cursor (moved from domain/) -----------------


# -- the producer and the operator's commands (producer/, cli/) ------------------------
