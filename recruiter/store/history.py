"""Listing jobs (``recruiter jobs list``) and putting archived ones back (``recruiter jobs retry``).

A listing reads up to three sources, each newest first by (time, ``_id``) (see
:mod:`recruiter.domain.listing`): the unlocked jobs of ``scheduled``, its locked
jobs, and ``archived``; it merges them and turns each job into a view with
:func:`recruiter.domain.following.view_of` (one ``find`` on ``heartbeats`` per
page tells running jobs from assigned ones).

Invariant: every ``find`` names its index (``hint``), in a shape SecantusDB
serves from it too: equalities on a prefix of the keys plus one range on the
next. ``scheduled`` is read through ``candidates`` (equality on ``locked``, then
``group`` and ``tenant`` when given); ``archived`` through the index of the most
selective filter given (:data:`ARCHIVED_INDEXES`), its time range on the key
after. Other conditions are checked on the documents the index yields. The
keyset of a page is two reads (the jobs at the same time with a smaller ``_id``,
then the jobs before that time), as an ``$or`` would not be served from an index
on SecantusDB; the second is sorted by time alone, which the index yields in
order on MongoDB, so a read stops after its batch there. Writes: only
:func:`insert_jobs`, new documents in ``scheduled``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import islice

from recruiter.domain.following import JobView, view_of
from recruiter.domain.listing import LOCKED_STATES, UNLOCKED_STATES, JobFilter, PageKey, order_key
from recruiter.domain.records import JobDoc, Query
from recruiter.store.edges import with_front
from recruiter.store.heartbeats import beats_of
from recruiter.store.layout import Document, SyncColl, SyncCollections

BATCH = 200
# archived: the index serving each filter, most selective first; the first filter given picks it.
ARCHIVED_INDEXES: tuple[tuple[str, str], ...] = (
    ("why", "by_why"), ("workable.class", "by_class_time"), ("group", "by_group_time"),
    ("tenant", "by_tenant_time"),
)
ALL_ARCHIVED_INDEX = "retention"
SCHEDULED_INDEX = "candidates"


@dataclass(frozen=True)
class Source:
    """One ordered read of a listing: a collection, the equalities it filters on, its time field and index."""

    coll: SyncColl
    where: Query
    time_field: str
    hint: str
    archived: bool

    def ties(self, key: PageKey) -> Query:
        """The jobs at ``key.time`` with an ``_id`` below ``key.id`` (all of them when it is None)."""
        where: Query = {**self.where, self.time_field: key.time}
        return where if key.id is None else {**where, "_id": {"$lt": key.id}}

    def older(self, f: JobFilter, before: datetime | None) -> Query:
        """The jobs of the range of ``f`` strictly before ``before`` (None: up to its end, inclusive)."""
        bounds = {"$gte": f.since, **({"$lte": f.until} if before is None else {"$lt": before})}
        return {**self.where, self.time_field: bounds}

    def read(self, query: Query, by: str, limit: int) -> list[Document]:
        """One ``find`` sorted by ``by`` (the time field, or ``_id`` among jobs of one time), newest first."""
        return list(self.coll.find(query, hint=self.hint).sort(by, -1).limit(limit))

    def key(self, doc: Document) -> tuple[object, ...]:
        return order_key(doc[self.time_field], doc["_id"])


def _walk(source: Source, f: JobFilter, after: PageKey | None) -> Iterator[tuple[tuple[object, ...], Document]]:
    """The jobs of ``source`` strictly before ``after``, newest first, read ``BATCH`` at a time.

    The range is read sorted by time alone, the order its index yields (on MongoDB
    the read stops after ``BATCH``); a batch's oldest time may be cut short, so its
    jobs of that time are read again, whole, as a tie group sorted by ``_id``.
    """
    if after is not None and after.time > f.until:
        after = None
    if after is not None and after.time < f.since:
        return
    ties, before = after, None
    while True:
        if ties is not None:
            docs = source.read(source.ties(ties), "_id", BATCH)
            yield from ((source.key(d), d) for d in docs)
            if len(docs) == BATCH:
                ties = PageKey(ties.time, docs[-1]["_id"])
                continue
            before, ties = ties.time, None
        docs = source.read(source.older(f, before), source.time_field, BATCH)
        if len(docs) == BATCH:
            last = docs[-1][source.time_field]
            docs, ties = [d for d in docs if d[source.time_field] > last], PageKey(last, None)
        yield from sorted(((source.key(d), d) for d in docs), key=lambda item: item[0], reverse=True)
        if ties is None:
            return


def _tagged(i: int, source: Source, f: JobFilter,
            after: PageKey | None) -> Iterator[tuple[tuple[object, ...], int, Document, Source]]:
    for key, doc in _walk(source, f, after):
        yield key, i, doc, source


def _common(f: JobFilter) -> Query:
    where: Query = {}
    for field, value in (("group", f.group), ("tenant", f.tenant), ("workable.class", f.class_name),
                         ("tags", f.tag)):
        if value is not None:
            where[field] = value
    return where


def sources(c: SyncCollections, f: JobFilter) -> list[Source]:
    """The reads a listing of ``f`` merges."""
    found: list[Source] = []
    unlocked = f.waiting & UNLOCKED_STATES
    if unlocked:
        where: Query = {"locked": False, **_common(f)}
        if unlocked <= {"queued", "delayed"}:
            where["status"] = "queued"
        elif unlocked == {"retrying"}:
            where["status"] = "retrying"
        found.append(Source(c.scheduled, where, "created_at", SCHEDULED_INDEX, archived=False))
    if f.waiting & LOCKED_STATES:
        found.append(Source(c.scheduled, {"locked": True, **_common(f)}, "created_at", SCHEDULED_INDEX,
                            archived=False))
    if f.archived:
        where = _common(f) if f.why is None else {"why": f.why, **_common(f)}
        hint = next((index for field, index in ARCHIVED_INDEXES if field in where), ALL_ARCHIVED_INDEX)
        found.append(Source(c.archived, where, "archived_at", hint, archived=True))
    return found


@dataclass(frozen=True)
class Page:
    """One page of a listing, and the key to read the next from (None: it was the last)."""

    views: list[JobView]
    next: PageKey | None


def list_jobs(c: SyncCollections, f: JobFilter, after: PageKey | None, limit: int, now: datetime) -> Page:
    """Up to ``limit`` jobs selected by ``f``, newest first, strictly after the page key ``after``."""
    walks = [_tagged(i, s, f, after) for i, s in enumerate(sources(c, f))]
    merged = heapq.merge(*walks, key=lambda item: (item[0], item[1]), reverse=True)
    views: list[JobView] = []
    seen: set[str] = set()
    while len(views) <= limit:
        chunk = list(islice(merged, limit + 1 - len(views)))
        if not chunk:
            break
        beats = _beats(c, [doc for _, _, doc, s in chunk if not s.archived])
        for _, _, doc, s in chunk:
            view = _view(doc if s.archived else with_front(c, doc) or doc, s, beats, now)
            # A job archived between two reads may be read from both collections: listed once
            # (archived, as its archived_at is later than its created_at).
            if view.state in f.states and repr(view.id) not in seen:
                seen.add(repr(view.id))
                views.append(view)
    if len(views) <= limit:
        return Page(views, None)
    last = views[limit - 1]
    time = last.archived_at if last.state == "archived" else last.created_at
    assert time is not None  # every source reads a date range on its time field
    return Page(views[:limit], PageKey(time, last.id))


def _beats(c: SyncCollections, docs: Sequence[Document]) -> dict[object, Document]:
    holders = {d.get("locked_by") for d in docs if d.get("locked") is True and isinstance(d.get("locked_by"), str)}
    if not holders:
        return {}
    return beats_of(c.heartbeats, sorted(str(h) for h in holders))


def _view(doc: Document, source: Source, beats: dict[object, Document], now: datetime) -> JobView:
    if source.archived:
        view = view_of(doc["_id"], None, doc, None, now)
    else:
        view = view_of(doc["_id"], doc, None, beats.get(doc.get("locked_by")), now)
    assert view is not None  # a document was given
    return view


# -- jobs retry ----------------------------------------------------------------------------------


def read_retry_originals(c: SyncCollections, ids: Sequence[object],
                         now: datetime) -> tuple[dict[object, Document], dict[object, JobView]]:
    """The archived documents of ``ids``, and the views of those still waiting in ``scheduled``."""
    archived = {d["_id"]: d for d in c.archived.find({"_id": {"$in": list(ids)}})}
    missing = [i for i in ids if i not in archived]
    waiting: dict[object, JobView] = {}
    if missing:
        for doc in c.scheduled.find({"_id": {"$in": missing}}):
            view = view_of(doc["_id"], doc, None, None, now)
            if view is not None:
                waiting[doc["_id"]] = view
    return archived, waiting


RETRY_INDEX = "by_why"


def retry_selection(why: str, since: datetime, group: str | None) -> Query:
    """The filter of ``jobs retry --why``: equality on ``why``, a range on ``archived_at`` (``by_why``);
    only the jobs not retried yet (no ``retried_as``: a retry's failure is retried, not its original again)."""
    where: Query = {"why": why, "archived_at": {"$gte": since}, "retried_as": {"$exists": False}}
    return where if group is None else {**where, "group": group}


def archived_with_why(c: SyncCollections, why: str, since: datetime, group: str | None,
                      limit: int | None) -> Iterator[Document]:
    """The jobs archived with ``why`` since ``since`` (of ``group``), newest first: one read on ``by_why``."""
    cursor = c.archived.find(retry_selection(why, since, group), hint=RETRY_INDEX)
    cursor = cursor.sort([("archived_at", -1), ("_id", -1)])
    return iter(cursor.limit(limit) if limit else cursor)


def insert_jobs(c: SyncCollections, docs: Sequence[JobDoc]) -> None:
    """Put new jobs in ``scheduled`` (one ``insert_many``)."""
    if docs:
        c.scheduled.insert_many([dict(d) for d in docs], ordered=True)
