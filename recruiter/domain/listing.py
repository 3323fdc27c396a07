"""What ``recruiter jobs list`` asks for, and how its pages follow each other.

A listing is the jobs a :class:`JobFilter` selects, newest first. Each job is
ordered by its *time* and then its ``_id``: the time is ``created_at`` for a
job still in ``scheduled`` and ``archived_at`` for an archived one, so one
order runs through both collections. A page ends with the :class:`PageKey` of
its last job; the next page is the jobs strictly before it in that order (a
keyset: no skip, and a page costs the same however deep it is).

Invariant: pure. A filter is checked when it is built (:func:`parse_states`,
:meth:`JobFilter.build`), and a page token is decoded or refused in one line
(:func:`decode_page_key`), so the store only ever receives valid values.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import bson
from bson import ObjectId
from bson.errors import BSONError

from recruiter.domain.following import STATES, WAITING_STATES, JobState

ARCHIVED: JobState = "archived"
# The states of a job that is locked (held by a worker) and of one that is not.
LOCKED_STATES: frozenset[JobState] = frozenset(("assigned", "running"))
UNLOCKED_STATES: frozenset[JobState] = frozenset(("queued", "delayed", "retrying"))
# Bounds of the time range when none is given: every date a BSON date can hold that a job may carry.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 12, 31, tzinfo=UTC)


def parse_states(values: Iterable[str]) -> frozenset[JobState]:
    """The states named by ``values`` (each may be a comma list); ValueError in one line for an unknown one."""
    states: set[JobState] = set()
    for value in values:
        for name in (part.strip() for part in value.split(",")):
            if not name:
                continue
            if name not in STATES:
                raise ValueError(f"unknown state {name!r}: use one of {', '.join(STATES)}")
            states.add(next(s for s in STATES if s == name))
    return frozenset(states)


@dataclass(frozen=True)
class JobFilter:
    """Which jobs a listing shows: every given condition must hold (``None``: any)."""

    states: frozenset[JobState]
    group: str | None = None
    tenant: str | None = None
    class_name: str | None = None  # workable.class, ``module:Qualname``
    why: str | None = None
    tag: str | None = None
    since: datetime = EARLIEST  # the job's time (see the module doc), inclusive
    until: datetime = LATEST

    @classmethod
    def build(cls, states: frozenset[JobState], *, why: str | None = None, class_name: str | None = None,
              since: datetime | None = None, until: datetime | None = None, **names: str | None) -> JobFilter:
        """A filter; no state means every state, and ``why`` alone means archived. ValueError if contradictory."""
        if why is not None:
            if states and ARCHIVED not in states:
                raise ValueError("--why selects archived jobs; it cannot be combined with --state "
                                 + ",".join(sorted(states)))
            states = frozenset((ARCHIVED,))
        if class_name is not None and ":" not in class_name:
            raise ValueError(f"--class {class_name!r}: give the class as module:Qualname, as jobs list prints it")
        if since is not None and until is not None and since > until:
            raise ValueError("the time range is empty: it starts (--from, --since) after it ends (--until)")
        return cls(states=states or frozenset(STATES), why=why, class_name=class_name,
                   since=since or EARLIEST, until=until or LATEST, **names)

    @property
    def waiting(self) -> frozenset[JobState]:
        """The states of ``scheduled`` it selects."""
        return self.states & frozenset(WAITING_STATES)

    @property
    def archived(self) -> bool:
        return ARCHIVED in self.states


@dataclass(frozen=True)
class PageKey:
    """Where a page ended: the time and ``_id`` of its last job; the next page starts strictly before."""

    time: datetime
    id: object


def encode_page_key(key: PageKey) -> str:
    """A token for ``--after`` (BSON, so any ``_id`` type survives, in URL-safe base64)."""
    raw = bson.encode({"t": key.time, "i": key.id})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_page_key(token: str) -> PageKey:
    """The key a token of :func:`encode_page_key` holds; ValueError in one line for anything else."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        doc: dict[str, object] = bson.decode(raw, codec_options=bson.CodecOptions(tz_aware=True))
    except (ValueError, binascii.Error, BSONError, IndexError, TypeError):
        raise ValueError(f"{token!r} is not a page token (copy it from the 'next page' line)") from None
    time = doc.get("t")
    if set(doc) != {"t", "i"} or not isinstance(time, datetime):
        raise ValueError(f"{token!r} is not a page token (copy it from the 'next page' line)")
    return PageKey(time, doc["i"])


# BSON's order of the types an _id may have (MongoDB's comparison order); others sort last.
_TYPE_RANK: tuple[tuple[type, int], ...] = (
    (bool, 8), (int, 1), (float, 1), (str, 2), (bytes, 5), (uuid.UUID, 5), (ObjectId, 7), (datetime, 9))


def order_key(time: datetime, job_id: object) -> tuple[datetime, int, object]:
    """The listing order of a job (ascending; listings go from the greatest): time, then ``_id`` as BSON orders it."""
    for kind, rank in _TYPE_RANK:
        if isinstance(job_id, kind):
            return (time, rank, job_id.bytes if isinstance(job_id, uuid.UUID) else job_id)
    return (time, 99, repr(job_id))
