"""The pure steps of an enqueue that do not need a client: ids, the first view of a job
just enqueued, the server's size limit, building a batch, which items write in one round trip.

Invariant: no I/O; every refusal is a :class:`~recruiter.domain.job.JobRefused` or
``ValueError`` with one line, raised before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from bson import ObjectId

from recruiter import tracing
from recruiter.domain.builder import Enqueuer, JobBuilder, as_builder
from recruiter.domain.cancel import parse_job_id
from recruiter.domain.clock import Clock, utc
from recruiter.domain.following import JobView, view_of
from recruiter.domain.job import JobRefused
from recruiter.domain.unique import Unique
from recruiter.domain.workable import Workable
from recruiter.store.batches import BatchRefused
from recruiter.store.layout import Document


class Producer(Enqueuer[Any], Protocol):
    """What building a batch needs of a producer: its clock (and to be an enqueuer)."""

    clock: Clock


def built_one(producer: Producer, item: JobBuilder[Any] | Workable, max_bytes: int) -> Built:
    """One item's document and unique spec, checked (:class:`JobRefused` in one line)."""
    return built_of(as_builder(item, producer), producer.clock.now(), max_bytes)


def as_job_id(job_id: ObjectId | str) -> ObjectId:
    """A plain ObjectId from an id, a handle or the id's 24 hex digits (ValueError in one line)."""
    return ObjectId(job_id.binary) if isinstance(job_id, ObjectId) else parse_job_id(job_id)


def resubmit_time(at: object) -> datetime | None:
    """A resubmit's time, checked: None or a datetime (naive ones are UTC)."""
    if at is None:
        return None
    if not isinstance(at, datetime):
        raise ValueError(f"resubmit needs at=None or a datetime, got {at!r:.60}")
    return utc(at)


def enqueued_view(doc: Document, now: datetime) -> JobView:
    """The view of a job just enqueued, from its document (no read). The view keeps the
    document it was built from: this one without the job's parameters, which may be big."""
    slim = {**doc, "workable": {"class": doc["workable"]["class"]}}
    view = view_of(doc["_id"], slim, None, None, now)
    assert view is not None
    return view


# Used when the server's hello does not give a usable maxBsonObjectSize (16 MiB, MongoDB's limit).
DEFAULT_MAX_DOCUMENT_BYTES = 16 * 1024 * 1024


def limit_from_hello(reply: object) -> int:
    """The document size limit a ``hello`` reply states (checked: it is server input)."""
    value = reply.get("maxBsonObjectSize") if isinstance(reply, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return DEFAULT_MAX_DOCUMENT_BYTES


Built = tuple[Document, Unique | None]  # a job's document, and its unique key if it has one


def built_of(builder: JobBuilder[Any], now: datetime, max_bytes: int) -> Built:
    """The job's document, with the current trace context (:func:`recruiter.tracing.stamp`), and its unique key."""
    doc = builder.build(now, max_bytes)
    tracing.stamp(doc)
    return doc, builder.unique_spec()


def built_batch(recruiter: Producer, items: list[JobBuilder[Any] | Workable],
               max_bytes: int) -> list[Built]:
    """Every item's document, or :class:`JobRefused` naming the first bad item."""
    now = recruiter.clock.now()
    docs = []
    for index, item in enumerate(items):
        try:
            docs.append(built_of(as_builder(item, recruiter), now, max_bytes))
        except JobRefused as exc:
            raise JobRefused(f"item {index} of {len(items)}: {exc}; nothing was written") from None
    return docs


def no_unique_in_session(built: list[Built]) -> None:
    """A unique key's conflict handling runs transactions of its own: not inside the caller's."""
    if any(spec is not None for _, spec in built):
        raise JobRefused("a job with a unique key cannot be enqueued in your session's transaction "
                         "(its conflict handling needs transactions of its own); nothing was written")


def one_write(built: list[Built]) -> tuple[list[Document], list[int]]:
    """The documents a batch writes in its one round trip (all but the unique jobs that reserve
    their key, which take a transaction each), and the positions of those that reserve."""
    return ([d for d, spec in built if spec is None or not spec.reserves],
            [i for i, (_, spec) in enumerate(built) if spec is not None and spec.reserves])


def all_or_nothing(write: Callable[[], None]) -> None:
    """Run a batch's write; the server refusing an item is a one-line :class:`JobRefused`."""
    try:
        write()
    except BatchRefused as exc:
        raise JobRefused(str(exc)) from None
