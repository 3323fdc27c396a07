"""Quarantine: the one way a malformed job leaves ``scheduled``.

A job document that fails :func:`recruiter.documents.job_problem` is never run
and never blocks a round: the process that meets it archives it, as read, with
``why: "malformed"`` and a ``reason`` naming the field, then deletes it from
``scheduled`` by ``_id``::

    db.archived.find({why: "malformed"}, {reason: 1})

Both writes are idempotent (the archived copy is an upsert that only sets
fields on insert, as for every archive), so they are safe to repeat, and the
callers run them inside their fenced transaction: the recruiter in its round,
the cleaner in its pass. A worker that is handed a malformed job does not write
``scheduled`` (one writer per job); it records :func:`malformed_outcome`,
which the recruiter applies as an archive with the same ``why`` and ``reason``.

Invariant: the archived copy is written before the delete, so a malformed job
is always in ``scheduled`` or in ``archived``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import bson
from bson import Binary, ObjectId
from bson.errors import InvalidDocument
from pymongo import DeleteOne, UpdateOne

from recruiter.domain.documents import PRIORITIES, UNLOCKED_STATUSES, Malformed, check_job
from recruiter.domain.outcome import MALFORMED, Outcome
from recruiter.domain.retry import Archive

# An archived copy may not outgrow the BSON limit (16 MiB) with the fields added here.
MAX_COPY_BYTES = 16 * 1024 * 1024 - 16 * 1024


# Jobs per sweep; the next sweep finds the rest.
SWEEP_LIMIT = 100
# A NUL cannot be in a name (names become field names); written as a regex escape,
# since MongoDB refuses a pattern that holds one.
_NO_NUL = {"$not": {"$regex": "\\x00"}}
# What every job a candidate read (or the cleaner) can meet looks like, as a filter.
_REACHABLE: dict[str, Any] = {
    "$and": [
        {"$or": [
            {"locked": False, "status": {"$in": list(UNLOCKED_STATUSES)}},
            {"locked": True, "status": "assigned", "locked_by": {"$type": "string"},
             "lock_token": {"$type": "objectId"}, "locked_at": {"$type": "date"}},
        ]},
        {"$or": [{"tenant": None}, {"tenant": {"$type": "string", "$ne": "", **_NO_NUL}}]},
        # A query on a field matches an array by its elements: the tests above would pass one.
        {"$nor": [{f: {"$type": "array"}} for f in ("locked", "status", "group", "tenant", "priority",
                                                     "scheduled_at", "locked_by", "lock_token", "locked_at")]},
    ],
    "scheduled_at": {"$type": "date", "$lte": datetime(9999, 12, 31, tzinfo=UTC)},
    "group": {"$type": "string", "$nin": ["", "*"], **_NO_NUL},
    "priority": {"$in": list(PRIORITIES)},
}
# A job no candidate read can meet: it would sit in ``scheduled`` forever. One predicate,
# evaluated once per document (a long $or of type tests costs a scan per branch on some servers).
UNREACHABLE: dict[str, Any] = {"$nor": [_REACHABLE]}


async def sweep_scheduled(scheduled: Any, limit: int = SWEEP_LIMIT) -> list[Malformed]:
    """Read up to ``limit`` jobs that no candidate read can meet, and return the malformed ones.

    One query outside any transaction. On MongoDB it is served by scanning the
    collection (type tests are not index bounds), so the recruiter runs it
    rarely, in a task of its own (see ``RecruiterConfig.sweep_interval_s``).
    """
    found = []
    async for doc in scheduled.find(UNREACHABLE).limit(limit):
        if (m := check_job(doc)) is not None:
            found.append(m)
    return found


def quarantined_document(found: Malformed, now: datetime) -> dict[str, Any]:
    """The archived copy of a malformed job: the document as read, with ``why`` and ``reason``.

    Field names an update cannot store (``$…``, dotted) keep the document as
    raw BSON in ``original_bson``; a document too big to take the extra fields
    keeps its smaller fields only and names the others in ``dropped_fields``.
    """
    marks = {"why": MALFORMED, "reason": found.reason, "archived_at": now, "done": False}
    doc: dict[str, Any] = {k: v for k, v in found.document.items() if k != "_id"}
    if _odd_keys(doc):
        raw = _encoded(found.document)
        if raw is not None and len(raw) <= MAX_COPY_BYTES:
            return {**marks, "original_bson": Binary(raw)}
        return {**marks, "dropped_fields": ["*"]}
    doc.update(marks)
    size = len(_encoded(doc) or b"") or MAX_COPY_BYTES + 1
    if size <= MAX_COPY_BYTES:
        return doc
    kept = dict(marks)
    dropped = [k for k in found.document if k != "_id"]
    for key, value in found.document.items():
        if key not in kept and key != "_id" and _small(value):
            kept[key] = value
            dropped.remove(key)
    kept["dropped_fields"] = dropped
    return kept


def _encoded(doc: Any) -> bytes | None:
    try:
        return bson.encode(doc)
    except (InvalidDocument, TypeError, OverflowError, ValueError):
        return None


def _odd_keys(value: Any, depth: int = 0) -> bool:
    """Whether a field name anywhere in ``value`` starts with ``$`` or holds a ``.``."""
    if depth > 100:
        return True
    if isinstance(value, Mapping):
        return any(not isinstance(k, str) or k.startswith("$") or "." in k or _odd_keys(v, depth + 1)
                   for k, v in value.items())
    if isinstance(value, list):
        return any(_odd_keys(v, depth + 1) for v in value)
    return False


def _small(value: Any) -> bool:
    try:
        return len(bson.encode({"v": value})) <= 4096
    except (InvalidDocument, TypeError, OverflowError, ValueError):
        return False


def quarantine_ops(found: Iterable[Malformed], now: datetime) -> tuple[list[UpdateOne], list[DeleteOne]]:
    """The archive upserts and the deletes that quarantine ``found`` (run the upserts first)."""
    archive: list[UpdateOne] = []
    delete: list[DeleteOne] = []
    seen: list[Any] = []
    for m in found:
        if not isinstance(m.document, Mapping) or "_id" not in m.document or m.id in seen:
            continue
        seen.append(m.id)
        by_id = {"_id": {"$eq": m.id}}  # $eq: an _id that is itself a document is not read as operators
        archive.append(UpdateOne(by_id, {"$setOnInsert": quarantined_document(m, now)}, upsert=True))
        delete.append(DeleteOne(by_id))
    return archive, delete


async def quarantine(collections: Any, found: list[Malformed], now: datetime) -> list[Malformed]:
    """Archive ``found`` as malformed and delete them from ``scheduled``; returns those archived now.

    Runs on ``collections`` (:class:`recruiter.store.Collections`, normally the
    ones of a fenced transaction). The caller logs ``job.quarantined`` once the
    transaction has committed (:func:`log_quarantined`).
    """
    unique = _unique(found)
    archive, delete = quarantine_ops(unique, now)
    if not archive:
        return []
    result = await collections.archived.bulk_write(archive, ordered=False)
    await collections.scheduled.bulk_write(delete, ordered=False)
    # Only copies written now: one quarantined by an earlier pass is not reported again.
    return [unique[i] for i in sorted(result.upserted_ids)]


def _unique(found: Iterable[Malformed]) -> list[Malformed]:
    unique: list[Malformed] = []
    for m in found:
        if isinstance(m.document, Mapping) and "_id" in m.document and all(m.id != u.id for u in unique):
            unique.append(m)
    return unique


def malformed_outcome(job: Mapping[str, Any], reason: str) -> Outcome:
    """What a worker records for a job it was handed but must not run: archive it as malformed.

    Not an execution, so the attempt the recruiter counted is given back. The
    recruiter checks the job again when it applies this; a job it finds
    malformed is quarantined as read, any other is archived by this outcome.
    """
    token = job.get("lock_token")
    attempts = job.get("attempts")
    job_id: Any = job.get("_id")
    return Outcome(
        job_id, token if isinstance(token, ObjectId) else ObjectId(),
        attempts if isinstance(attempts, int) and not isinstance(attempts, bool) else 0,
        executed=False, decision=Archive(MALFORMED, reason),
    )


def log_quarantined(log: Any, found: Iterable[Malformed]) -> None:
    for m in found:
        log.warning("job.quarantined", job_id=str(m.id)[:100], why=MALFORMED, reason=m.reason,
                    detail="archived as malformed; it will not run")
