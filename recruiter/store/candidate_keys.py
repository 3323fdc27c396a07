"""The keys of the ``candidates`` index as the read-ahead reads them: their order, and the
filters on them that both servers serve from the index.

Invariant: every filter built here is equalities on a prefix of the index's keys plus at most
one range on the next key (the one shape SecantusDB 0.7 serves from an index, see
:mod:`recruiter.store.readahead`), with its bounds written the way that server reads them
right (:func:`up_to`, :func:`above`); and :func:`row_order` is the index's order, so rows
sorted by it are in the order a query on the index returns them. Pure: no reads.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from bson import ObjectId

from recruiter.domain.job import Priority, Status
from recruiter.domain.naming import WORKER_GROUP_PREFIX
from recruiter.domain.records import Query as Filter
from recruiter.domain.selection import DEFAULT_TENANT
from recruiter.store.layout import Document

WINDOW = 64  # keys between two fences: what one substream read returns at most, stragglers aside
KEYS: Filter = {"_id": 1, "group": 1, "tenant": 1, "status": 1, "priority": 1, "scheduled_at": 1}
# The substreams of one (group, tenant) in index order (status descending, priority ascending).
SUBSTREAMS = [(Status.RETRYING.value, Priority.HIGH.value), (Status.RETRYING.value, Priority.LOW.value),
              (Status.QUEUED.value, Priority.HIGH.value), (Status.QUEUED.value, Priority.LOW.value)]
LOW_ONLY = SUBSTREAMS[3:]
RANK = {s: i for i, s in enumerate(SUBSTREAMS)}
EVERY_TENANT = object()  # a gap that is a whole group
# The reserved groups of jobs aimed at one worker, as one range; and the most keys of it a
# round's probe reads before it gives up listing the groups that hold jobs.
WORKER_GROUPS: Filter = {"$gte": WORKER_GROUP_PREFIX, "$lt": WORKER_GROUP_PREFIX[:-1] + chr(ord(":") + 1)}
AIMED_PROBE = 256
Fence = tuple[datetime, object]  # (scheduled_at, _id); _id None: the whole of that instant


def id_order(value: object) -> tuple[str, float | str]:
    return type(value).__name__, value if isinstance(value, int | float) else str(value)


def tenant_of(doc: Document) -> str:
    return doc.get("tenant") or DEFAULT_TENANT


def row_order(doc: Document) -> tuple[str, int, datetime, tuple[str, float | str]]:
    """Index order within a group (tenant, substream, scheduled_at, _id); the default tenant first."""
    return (tenant_of(doc), RANK.get((str(doc.get("status")), str(doc.get("priority"))), 9), doc["scheduled_at"],
            id_order(doc["_id"]))


def is_ready(doc: Document, now: datetime) -> bool:
    """A job this reader can place: the keys the index orders by have the types it expects
    (anything else is left to the reader of job documents to quarantine)."""
    return (placeable(doc) and (str(doc.get("status")), str(doc.get("priority"))) in RANK
            and isinstance(doc.get("scheduled_at"), datetime) and doc["scheduled_at"] <= now)


@dataclass
class Substream:
    """What is known of one substream: fences, ascending; the last one is the keys read's time."""

    fences: list[Fence] = field(default_factory=list)

    @classmethod
    def from_keys(cls, keys: list[Document], now: datetime) -> Substream:
        ordered = sorted(keys, key=row_order)
        posts = ordered[WINDOW - 1::WINDOW]
        if ordered and (not posts or posts[-1] is not ordered[-1]):
            posts.append(ordered[-1])  # the last window ends at the last key read
        ties = Counter(k["scheduled_at"] for k in ordered)
        # A fence takes its whole instant (one range) unless many jobs share it (then _id splits it).
        return cls([*((k["scheduled_at"], k["_id"] if ties[k["scheduled_at"]] > WINDOW else None) for k in posts),
                    (now, None)])


def up_to(at: datetime) -> dict[str, datetime]:
    """``scheduled_at <= at`` written as ``< at + 1 ms`` (dates are stored to the millisecond):
    SecantusDB 0.7 drops the rows equal to an inclusive upper bound on a key that is not
    the index's last (measured: ``{..., scheduled_at: {$lte: T}}`` missed every job at T)."""
    return {"$lt": at.replace(microsecond=at.microsecond // 1000 * 1000) + timedelta(milliseconds=1)}


def above(name: str) -> dict[str, str]:
    """``> name`` for strings, written as ``>= name + "\\x00"`` (the next string): SecantusDB 0.7
    walks every entry equal to an exclusive lower bound on a key that is not the index's last."""
    return {"$gte": name + "\x00"}


def substream_filter(group: str, tenant: str, status: str, priority: str) -> Filter:
    return {"locked": False, "group": group, "tenant": tenant or None, "status": status, "priority": priority}


ID_TYPES = (ObjectId, str, int, float, datetime, bytes)  # hashable ids; a document as _id is malformed


def well_typed(doc: Document) -> bool:
    return (placeable(doc) and (str(doc.get("status")), str(doc.get("priority"))) in RANK
            and isinstance(doc.get("scheduled_at"), datetime))


def placeable(doc: Document) -> bool:
    """A job not due yet, whose keys are usable: its group and tenant are known to exist."""
    t = doc.get("tenant")
    return (isinstance(doc.get("_id"), ID_TYPES) and isinstance(doc.get("group"), str)
            and (t is None or isinstance(t, str)))


def tenant_gaps(lower: str | None, upper: str | None) -> list[object]:
    """Conditions on ``tenant`` for the tenants strictly between two known ones.

    ``lower`` None is the start of the ring (the default tenant, stored as null,
    comes first); ``upper`` None is its end. Strings and null compare apart in
    MongoDB, so the default tenant is an equality of its own."""
    if lower is None and upper is None:
        return [EVERY_TENANT]  # a group not seen yet: all of it (tenants of any type)
    spans: list[object] = []
    if lower is None and upper != DEFAULT_TENANT:
        spans.append(None)
    if upper == DEFAULT_TENANT:
        return spans
    span: dict[str, str] = above(lower or "")
    if upper is not None:
        span["$lt"] = upper
    spans.append(span)
    return spans
