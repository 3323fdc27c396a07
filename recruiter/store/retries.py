"""Retrying archived jobs at most once each: the original names its copy in the transaction that inserts it.

``recruiter jobs retry``, ``rec.admin.retry`` and the dashboard's Retry all write
through :func:`retry_once`. For each copy (a ``scheduled`` document naming its
original in ``retry_of``), one transaction:

1. sets ``retried_as`` (the copy's id) and ``retried_at`` on the archived original,
   by an update conditional on it having no ``retried_as`` yet;
2. inserts the copies whose original that update matched.

Invariant: an archived job has at most one copy, however many retries run at once
and whatever they read before: the condition is checked by the server on the
original's document, and two transactions that both update it meet a write
conflict (the loser is run again by ``with_transaction``, then finds the first
one's ``retried_as``). A copy and its original's ``retried_as`` are written
together or not at all, so a crash leaves neither a copy its original does not name
nor a name without its copy. ``retried_as`` and ``retried_at`` are the only fields
ever written on an archived job after it is archived.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from pymongo import WriteConcern
from pymongo.synchronous.client_session import ClientSession

from recruiter.domain.records import JobDoc
from recruiter.store.layout import SyncCollections, SyncDb

RETRIED_AS = "retried_as"
RETRIED_AT = "retried_at"
NOT_RETRIED: dict[str, object] = {RETRIED_AS: {"$exists": False}}


@dataclass(frozen=True)
class RetryWritten:
    """What became of one retry: ``copy`` is the new job (``already``: False), the copy an
    earlier retry made (``already``: True), or None when the original is no longer archived."""

    original: object
    copy: object
    already: bool


def retry_once(db: SyncDb, copies: Sequence[JobDoc], now: datetime) -> list[RetryWritten]:
    """Insert each copy unless its original (``retry_of``) already names one; one result per copy, in order.

    One transaction for all of ``copies`` (keep them to a few hundred): one conditional
    update per original, one read of those already retried, one ``insert_many``.
    """
    if not copies:
        return []
    # A transaction's writes carry no write concern of their own.
    inside = SyncCollections.of(db.with_options(write_concern=WriteConcern()))

    def attempt(session: ClientSession) -> list[RetryWritten]:
        fresh: list[JobDoc] = []
        missed: list[object] = []
        for copy in copies:
            marked = inside.archived.update_one(
                {"_id": copy["retry_of"], **NOT_RETRIED},
                {"$set": {RETRIED_AS: copy["_id"], RETRIED_AT: now}}, session=session)
            if marked.matched_count:
                fresh.append(copy)
            else:
                missed.append(copy["retry_of"])
        earlier: dict[object, object] = {}
        if missed:
            for doc in inside.archived.find({"_id": {"$in": missed}}, {RETRIED_AS: 1}, session=session):
                earlier[doc["_id"]] = doc.get(RETRIED_AS)
        if fresh:
            inside.scheduled.insert_many([dict(d) for d in fresh], ordered=True, session=session)
        inserted = {id(d) for d in fresh}
        return [_written(c, id(c) in inserted, earlier) for c in copies]

    with db.client.start_session() as session:
        return session.with_transaction(attempt, write_concern=WriteConcern("majority"))


def _written(copy: JobDoc, inserted: bool, earlier: dict[object, object]) -> RetryWritten:
    original = copy["retry_of"]
    if inserted:
        return RetryWritten(original, copy["_id"], False)
    if original in earlier:
        return RetryWritten(original, earlier[original], True)
    return RetryWritten(original, None, False)  # no longer archived (pruned since it was read)
