"""Quarantine: the one way a malformed job leaves ``scheduled``.

A job document that fails :func:`recruiter.domain.documents.job_problem` is never run
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

This module is pure: the sweep's filter and the writes are in :mod:`recruiter.store`,
run by :mod:`recruiter.processes.upkeep`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Protocol, cast

import bson
from bson import Binary, ObjectId
from bson.errors import InvalidDocument

from recruiter.domain.documents import Malformed
from recruiter.domain.outcome import MALFORMED, Outcome
from recruiter.domain.retry import Archive

# An archived copy may not outgrow the BSON limit (16 MiB) with the fields added here.
MAX_COPY_BYTES = 16 * 1024 * 1024 - 16 * 1024


class Warns(Protocol):
    """Where quarantined jobs are reported (a structlog logger)."""

    def warning(self, event: str, **fields: object) -> object: ...


# Jobs per sweep; the next sweep finds the rest.
SWEEP_LIMIT = 100


def quarantined_document(found: Malformed, now: datetime) -> dict[str, object]:
    """The archived copy of a malformed job: the document as read, with ``why`` and ``reason``.

    Field names an update cannot store (``$…``, dotted) keep the document as
    raw BSON in ``original_bson``; a document too big to take the extra fields
    keeps its smaller fields only and names the others in ``dropped_fields``.
    """
    marks = {"why": MALFORMED, "reason": found.reason, "archived_at": now, "done": False}
    doc: dict[str, object] = {k: v for k, v in found.document.items() if k != "_id"}
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


def _encoded(doc: Mapping[str, object]) -> bytes | None:
    try:
        return bson.encode(doc)
    except (InvalidDocument, TypeError, OverflowError, ValueError):
        return None


def _odd_keys(value: object, depth: int = 0) -> bool:
    """Whether a field name anywhere in ``value`` starts with ``$`` or holds a ``.``."""
    if depth > 100:
        return True
    if isinstance(value, Mapping):
        return any(not isinstance(k, str) or k.startswith("$") or "." in k or _odd_keys(v, depth + 1)
                   for k, v in value.items())
    if isinstance(value, list):
        return any(_odd_keys(v, depth + 1) for v in value)
    return False


def _small(value: object) -> bool:
    try:
        return len(bson.encode({"v": value})) <= 4096
    except (InvalidDocument, TypeError, OverflowError, ValueError):
        return False


def quarantine_copies(found: Iterable[Malformed], now: datetime) -> list[tuple[Malformed, dict[str, object]]]:
    """Each malformed job once, with the archived copy that quarantines it (write the copies
    before deleting the jobs: see the invariant)."""
    return [(m, quarantined_document(m, now)) for m in _unique(found)]


def _unique(found: Iterable[Malformed]) -> list[Malformed]:
    unique: list[Malformed] = []
    for m in found:
        if isinstance(m.document, Mapping) and "_id" in m.document and all(m.id != u.id for u in unique):
            unique.append(m)
    return unique


def malformed_outcome(job: Mapping[str, object], reason: str) -> Outcome:
    """What a worker records for a job it was handed but must not run: archive it as malformed.

    Not an execution, so the attempt the recruiter counted is given back. The
    recruiter checks the job again when it applies this; a job it finds
    malformed is quarantined as read, any other is archived by this outcome.
    """
    token = job.get("lock_token")
    attempts = job.get("attempts")
    job_id = cast(ObjectId, job.get("_id"))  # as read: a malformed job's _id may be anything
    return Outcome(
        job_id, token if isinstance(token, ObjectId) else ObjectId(),
        attempts if isinstance(attempts, int) and not isinstance(attempts, bool) else 0,
        executed=False, decision=Archive(MALFORMED, reason),
    )


def log_quarantined(log: Warns, found: Iterable[Malformed]) -> None:
    for m in found:
        log.warning("job.quarantined", job_id=str(m.id)[:100], why=MALFORMED, reason=m.reason,
                    detail="archived as malformed; it will not run")
