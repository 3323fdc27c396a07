"""The ``metadata`` collection: the fairness cursor and the pause switches.

Invariant: The leases live here too (:mod:`recruiter.store.leases`).
"""

from __future__ import annotations

from collections.abc import Mapping

from recruiter.domain.control import CURSOR_ID, KINDS, PAUSED_ID, Paused, paused_from_document
from recruiter.domain.limits import LIMITS_ID, Limit
from recruiter.domain.records import Query
from recruiter.domain.stored_limits import limit_path
from recruiter.store import archived, roster, scheduled
from recruiter.store.layout import AsyncColl, Document, SyncColl, SyncDb

# -- the worker: its own entry, its job, its heartbeat (processes/worker) --------------


# -- the recruiter and the cleaner (processes/recruiter.py, processes/cleaner.py) ------


# -- liveness, quarantine and the fairness cursor (moved from domain/) -----------------


async def read_cursor(metadata: AsyncColl) -> Document | None:
    """The stored fairness cursor document, as stored (recruiter.domain.control.read_cursor checks it)."""
    return await metadata.find_one({"_id": CURSOR_ID})


async def replace_cursor(metadata: AsyncColl, document: Mapping[str, object]) -> None:
    await metadata.replace_one({"_id": CURSOR_ID}, document, upsert=True)


async def update_cursor(metadata: AsyncColl, changes: Query) -> None:
    await metadata.update_one({"_id": CURSOR_ID}, changes, upsert=True)


async def read_switches(metadata: AsyncColl) -> Document | None:
    """The pause switches document, as stored (recruiter.domain.control.read_switches checks it)."""
    return await metadata.find_one({"_id": PAUSED_ID})


async def read_controls(metadata: AsyncColl) -> tuple[Document | None, Document | None]:
    """The pause switches and the limits documents, as stored, in one read (by ``_id``)."""
    docs = {d["_id"]: d for d in await metadata.find({"_id": {"$in": [PAUSED_ID, LIMITS_ID]}}).to_list()}
    return docs.get(PAUSED_ID), docs.get(LIMITS_ID)


# -- flow control: the limits document (recruiter.domain.limits) -------------------------

def set_limit(metadata: SyncColl, group: str, tenant: str | None, limit: Limit) -> None:
    """Set (replace) the limit of ``group``, or of ``tenant`` within it."""
    metadata.update_one({"_id": LIMITS_ID}, {"$set": {limit_path(group, tenant): limit.document()}}, upsert=True)


def clear_limit(metadata: SyncColl, group: str, tenant: str | None) -> bool:
    """Remove one limit; whether there was one (nothing is written otherwise)."""
    path = limit_path(group, tenant)
    result = metadata.update_one({"_id": LIMITS_ID, path: {"$exists": True}}, {"$unset": {path: ""}})
    return bool(result.modified_count)


def replace_limits(metadata: SyncColl, document: Mapping[str, object]) -> None:
    """Set the whole limits document (limits declared from Python: exactly these, no others)."""
    metadata.replace_one({"_id": LIMITS_ID}, {**document, "_id": LIMITS_ID}, upsert=True)


def read_limits_document(metadata: SyncColl) -> Document | None:
    return metadata.find_one({"_id": LIMITS_ID})


def read_cursor_document(metadata: SyncColl) -> Document | None:
    """The fairness cursor document (it holds the rate limits' token state too)."""
    return metadata.find_one({"_id": CURSOR_ID})


def switch_paused(metadata: SyncColl, kind: str, names: list[str], pause: bool) -> Paused:
    """Pause or resume groups or tenants (``kind``: group | tenant); returns the switches now."""
    field = KINDS[kind]
    # The document is untrusted: a list that is not an array (a hand edit) would fail $addToSet and
    # $pull, and the operator could pause or resume nothing. The switch is written as an array
    # operation over the list as it is, or over none when it is not a list, keeping its order.
    now_listed = {"$cond": [{"$isArray": f"${field}"}, f"${field}", []]}
    given = {"$literal": list(dict.fromkeys(names))}
    if pause:  # the names not listed yet, after those listed
        added = {"$filter": {"input": given, "cond": {"$not": [{"$in": ["$$this", now_listed]}]}}}
        metadata.update_one({"_id": PAUSED_ID}, [{"$set": {field: {"$concatArrays": [now_listed, added]}}}],
                            upsert=True)
    else:  # only where one of them is paused: resuming what is not paused writes nothing
        kept = {"$filter": {"input": now_listed, "cond": {"$not": [{"$in": ["$$this", given]}]}}}
        metadata.update_one({"_id": PAUSED_ID, field: {"$in": names}}, [{"$set": {field: kept}}])
    return read_paused(metadata)


def read_paused(metadata: SyncColl) -> Paused:
    return paused_from_document(metadata.find_one({"_id": PAUSED_ID}))


def unused_names(db: SyncDb, kind: str, names: list[str]) -> list[str]:
    """The ``names`` (of ``kind``: group | tenant) that no worker and no job, queued or archived,
    has used (recruiter.domain.control: pausing one is most likely a typo)."""
    return [name for name in names if not _used(db, kind, name)]


def _used(db: SyncDb, kind: str, name: str) -> bool:
    if kind == "group" and roster.names_group(db.roster, name):
        return True
    return scheduled.carries_name(db.scheduled, kind, name) or archived.carries_name(db.archived, kind, name)



# -- the producer and the operator's commands (producer/, cli/) ------------------------


def read_leases(metadata: SyncColl) -> list[Document]:
    """The recruiter's and the cleaner's lease documents (``recruiter status``)."""
    return list(metadata.find({"_id": {"$in": ["recruiter", "cleaner"]}}))


async def read_leases_async(metadata: AsyncColl) -> list[Document]:
    """:func:`read_leases` for asyncio code (a worker's check of the leaders' releases at its start)."""
    return await metadata.find({"_id": {"$in": ["recruiter", "cleaner"]}}).to_list()
