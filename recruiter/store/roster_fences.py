"""The fenced roster filters: which registration of an entry a write may land on.

Invariant: every fenced roster filter (an entry matched by ``_id`` and ``session``, so a write
never lands on a newer registration of the same id) is written once, here; every roster write
that must not land on another registration builds its filter from these.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from bson import ObjectId

from recruiter.domain.records import Query


def entry_as_read(worker_id: object, session: object) -> Query:
    """The fenced roster filter: this registration of the entry, not a newer one with the same id."""
    return {"_id": worker_id, "session": session}


def registration_as_read(entry: Mapping[str, object]) -> Query:
    """:func:`entry_as_read` for an ``entry`` read from the roster (untrusted): its ``_id`` and
    ``session`` compared as values (``$eq``), so that one written as a document shaped like an
    operator is not read as one."""
    return {"_id": {"$eq": entry.get("_id")}, "session": {"$eq": entry.get("session")}}


def mark_as_read(entry: Mapping[str, object]) -> Query:
    """The ``started`` mark of ``entry`` as read (none, or the same value): a write that decides
    from the entry whether its job held ahead had started (:func:`recruiter.domain.lanes.held_ahead`)
    must miss if the worker wrote the mark, and then started the job, since the entry was read;
    else a job that ran would be given back as never started, its run counted nowhere."""
    if "started" not in entry:
        return {"started": {"$exists": False}}
    return {"started": {"$eq": entry["started"]}}


def holding_as_read(entry: Mapping[str, object]) -> Query:
    """The filter of a write that replaces ``entry`` as read: the same registration (``session``),
    still holding what it held then. Its ``available`` and ``assigned_since`` as read, and its
    outcome's token (or no outcome) as read: a round that handed it a job since (the leader
    may still take the previous process for live), or an outcome written since, makes the write
    miss, so that the caller reads the entry again rather than drop that job; so does a
    ``started`` mark written since (:func:`mark_as_read`). A field of a
    type no write gives it is not fenced (the session still is, as a value: ``$eq``, so that a
    session written as a document is not read as an operator)."""
    fence = registration_as_read(entry)
    for field, kinds in (("available", bool), ("assigned_since", datetime)):
        if field not in entry:
            fence[field] = {"$exists": False}
        elif isinstance(entry[field], kinds):
            fence[field] = {"$eq": entry[field]}
    fence.update(mark_as_read(entry))
    outcome = entry.get("outcome")
    if "outcome" not in entry:
        fence["outcome"] = {"$exists": False}
    elif isinstance(outcome, Mapping) and isinstance(outcome.get("token"), ObjectId):
        fence["outcome.token"] = {"$eq": outcome["token"]}
    return fence
