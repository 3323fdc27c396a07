"""Waiting for jobs to finish: which of them end, in the order they end.

:func:`finished` (and :func:`finished_async`) take job ids and yield
``(id, archived document)`` as each job is archived, ``(id, None)`` for an id
that names no job, and raise the builtin :class:`TimeoutError` when the
deadline passes first. Job handles (:mod:`recruiter.producer.handles`) build
``wait``, ``wait_all`` and ``as_completed`` on them.

How a wait learns that jobs finished:

- one change stream on ``archived`` per call, whatever the number of jobs
  (:func:`recruiter.store.following.finished_pipeline`), opened **before** the
  first read of ``archived``: a job archived between the two is in the read or
  in the stream, so no wake-up is lost. Each event names one job, which is
  then read by ``_id``;
- where the server refuses change streams (a standalone mongod) or the
  producer was told not to use them (``change_streams=False``), or when the
  stream dies during a wait, ``archived`` is polled by ``_id $in`` the jobs
  still waited for, from every 50 ms to every second while nothing finishes.
  A server without change streams is remembered, and logged once per producer.

Invariant: a wait only reads. A wait that times out leaves every job as it was.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import structlog

from recruiter.store.connection import StoreError, first_line
from recruiter.store.deadlines import is_timeout, within
from recruiter.store.following import (
    StreamsRefused,
    SyncStream,
    close_stream,
    next_finished,
    next_finished_async,
    open_finished_stream,
    open_finished_stream_async,
    read_archived,
    read_archived_async,
    read_waiting_ids,
    read_waiting_ids_async,
)
from recruiter.store.layout import Collections, Document, SyncCollections
from recruiter.store.wakeup import QUICK_EMPTY_S, Stream, close_quietly, quick_empty_pause

log = structlog.get_logger("recruiter.producer")
T = TypeVar("T")

# One finished job (its archived document), or an id that names no job (None).
Finished = tuple[object, Document | None]

POLL_FROM_S = 0.05
POLL_TO_S = 1.0
# How long one read of the stream waits for an event (maxAwaitTimeMS): with a deadline,
# a tenth of the timeout, so a wait ends within about 10% of it.
STREAM_WAIT_S = 1.0
STREAM_WAIT_MIN_S = 0.02


def check_timeout(timeout: float | None) -> float | None:
    """``timeout`` in seconds (None: no deadline); ValueError in one line for anything else."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout) \
            or timeout < 0:
        raise ValueError(f"timeout must be None or a number of seconds >= 0, got {timeout!r}")
    return float(timeout)


def poll_pause_s(idle_polls: int) -> float:
    """The pause before the next poll after ``idle_polls`` polls in a row that found nothing."""
    return float(min(POLL_TO_S, POLL_FROM_S * 2.0 ** min(idle_polls, 16)))


def stream_wait_s(timeout_s: float | None) -> float:
    """How long one read of the stream waits (see :data:`STREAM_WAIT_S`)."""
    if timeout_s is None:
        return STREAM_WAIT_S
    return min(STREAM_WAIT_S, max(STREAM_WAIT_MIN_S, timeout_s / 10))


class Pending:
    """The jobs a wait still waits for, and its deadline (pure: ``now`` is a monotonic time)."""

    def __init__(self, job_ids: Iterable[object], timeout_s: float | None, now: float) -> None:
        self.ids: dict[object, None] = dict.fromkeys(job_ids)  # an ordered set
        self.total = len(self.ids)
        self.timeout_s = timeout_s
        self.deadline = None if timeout_s is None else now + timeout_s

    def __bool__(self) -> bool:
        return bool(self.ids)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self.ids

    def waited(self) -> list[object]:
        return list(self.ids)

    def take(self, docs: Iterable[Document]) -> list[Finished]:
        """Those of ``docs`` (archived jobs) that are waited for, now no longer pending."""
        found: list[Finished] = []
        for doc in docs:
            job_id = doc.get("_id")
            if job_id in self.ids:
                del self.ids[job_id]
                found.append((job_id, doc))
        return found

    def gone(self, job_ids: Iterable[object]) -> list[Finished]:
        """Those of ``job_ids`` still pending, now given up as naming no job."""
        gone: list[Finished] = []
        for job_id in job_ids:
            if job_id in self.ids:
                del self.ids[job_id]
                gone.append((job_id, None))
        return gone

    def left_s(self, now: float) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - now)

    def capped(self, pause_s: float, now: float) -> float:
        """``pause_s``, but not past the deadline."""
        left = self.left_s(now)
        return pause_s if left is None else min(pause_s, left)

    def check(self, now: float) -> float:
        """``now``, or :class:`TimeoutError` if the deadline has passed with jobs pending."""
        if self.ids and self.deadline is not None and now >= self.deadline:
            raise self.timeout_error()
        return now

    def timeout_error(self) -> TimeoutError:
        if self.total == 1:
            return TimeoutError(f"job {next(iter(self.ids))} did not finish within {self.timeout_s:g}s "
                                "(it was left as it is)")
        return TimeoutError(f"{len(self.ids)} of {self.total} jobs did not finish within {self.timeout_s:g}s "
                            "(they were left as they are)")


@dataclass
class Streams:
    """Whether waits use a change stream: wanted (the producer's ``change_streams``
    option) and not refused by the server. Counts the streams it opened."""

    wanted: bool = True
    refused: str | None = None  # why the server refused, once it has
    opened: int = 0
    _died_logged: bool = field(default=False, repr=False)

    @property
    def usable(self) -> bool:
        return self.wanted and self.refused is None

    def open(self, c: SyncCollections, job_ids: list[object], timeout_s: float | None) -> SyncStream | None:
        if not self.usable:
            return None
        try:
            stream = open_finished_stream(c, job_ids, stream_wait_s(timeout_s))
        except StreamsRefused as exc:
            self._refuse(exc)
            return None
        self.opened += 1
        return stream

    async def open_async(self, c: Collections, job_ids: list[object], timeout_s: float | None) -> Stream | None:
        if not self.usable:
            return None
        try:
            stream = await open_finished_stream_async(c, job_ids, stream_wait_s(timeout_s))
        except StreamsRefused as exc:
            self._refuse(exc)
            return None
        self.opened += 1
        return stream

    def _refuse(self, exc: StreamsRefused) -> None:
        if exc.for_good:  # remembered: later waits poll at once
            self.refused = str(exc)
            log.info("wait.polling", reason=self.refused)
        else:
            self.died(exc)

    def died(self, exc: BaseException) -> None:
        """The stream failed (or could not open, for now): this wait polls; logged once."""
        if not self._died_logged:
            self._died_logged = True
            log.warning("wait.stream_failed", error=first_line(exc), then="polling until this wait ends")


# -- deadlines carried into each server call ------------------------------------------------


def _bounded(pending: Pending, call: Callable[[], T]) -> T:
    """``call()`` (a server call) within the wait's time left: :class:`TimeoutError` when it runs
    out, even while the server stalls (recruiter.store.deadlines)."""
    left = pending.left_s(time.monotonic())
    try:
        with within(left):
            return call()
    except StoreError as exc:
        if left is not None and is_timeout(exc):
            raise pending.timeout_error() from None
        raise


async def _bounded_async(pending: Pending, call: Callable[[], Awaitable[T]]) -> T:
    """:func:`_bounded` for asyncio code."""
    left = pending.left_s(time.monotonic())
    try:
        with within(left):
            return await call()
    except StoreError as exc:
        if left is not None and is_timeout(exc):
            raise pending.timeout_error() from None
        raise


# -- synchronous --------------------------------------------------------------------------


def finished(c: SyncCollections, job_ids: Iterable[object], timeout_s: float | None,
             streams: Streams) -> Generator[Finished]:
    """Yield each of ``job_ids`` as its job finishes (see the module doc); the stream
    opens on the first ``next()`` and closes when the iterator ends or is closed."""
    pending = Pending(job_ids, timeout_s, time.monotonic())
    if not pending:
        return
    stream = _bounded(pending, lambda: streams.open(c, pending.waited(), timeout_s))
    try:
        yield from _first_look(c, pending)
        if stream is not None and pending:
            yield from _follow(c, pending, stream, streams)
        yield from _poll(c, pending, read_first=stream is not None)
    finally:
        if stream is not None:
            close_stream(stream)


def _first_look(c: SyncCollections, pending: Pending) -> Iterator[Finished]:
    """The jobs already archived, and the ids that name no job (in neither collection)."""
    yield from pending.take(_bounded(pending, lambda: read_archived(c, pending.waited())))
    if pending:
        waiting = _bounded(pending, lambda: read_waiting_ids(c, pending.waited()))
        absent = [job_id for job_id in pending.ids if job_id not in waiting]
        if absent:  # or archived between the two reads
            yield from pending.take(_bounded(pending, lambda: read_archived(c, absent)))
            yield from pending.gone(absent)


def _follow(c: SyncCollections, pending: Pending, stream: SyncStream, streams: Streams) -> Iterator[Finished]:
    """Read the stream until nothing is pending; return early if it dies."""
    streak = 0
    while pending:
        asked_at = pending.check(time.monotonic())
        try:
            job_id = _bounded(pending, lambda: next_finished(stream))
        except StoreError as exc:
            streams.died(exc)
            return
        if job_id is not None:
            streak = 0
            if job_id in pending:
                yield from pending.take(_bounded(pending, functools.partial(read_archived, c, [job_id])))
        elif (now := time.monotonic()) - asked_at < QUICK_EMPTY_S:
            # SecantusDB answers at once, empty, after a write the pipeline filtered out.
            streak += 1
            time.sleep(pending.capped(quick_empty_pause(streak), now))
        else:
            streak = 0


def _poll(c: SyncCollections, pending: Pending, *, read_first: bool) -> Iterator[Finished]:
    idle = 0
    while pending:
        if read_first:
            docs = _bounded(pending, lambda: read_archived(c, pending.waited()))
            idle = 0 if docs else idle + 1
            yield from pending.take(docs)
            if not pending:
                return
        read_first = True
        now = pending.check(time.monotonic())
        time.sleep(pending.capped(poll_pause_s(idle), now))


# -- asyncio ------------------------------------------------------------------------------


async def finished_async(c: Collections, job_ids: Iterable[object], timeout_s: float | None,
                         streams: Streams) -> AsyncGenerator[Finished]:
    """:func:`finished` for asyncio code."""
    pending = Pending(job_ids, timeout_s, time.monotonic())
    if not pending:
        return
    stream = await _bounded_async(pending, lambda: streams.open_async(c, pending.waited(), timeout_s))
    try:
        async for item in _first_look_async(c, pending):
            yield item
        if stream is not None and pending:
            async for item in _follow_async(c, pending, stream, streams):
                yield item
        async for item in _poll_async(c, pending, read_first=stream is not None):
            yield item
    finally:
        if stream is not None:
            await close_quietly(stream)


async def _first_look_async(c: Collections, pending: Pending) -> AsyncIterator[Finished]:
    for item in pending.take(await _bounded_async(pending, lambda: read_archived_async(c, pending.waited()))):
        yield item
    if pending:
        waiting = await _bounded_async(pending, lambda: read_waiting_ids_async(c, pending.waited()))
        absent = [job_id for job_id in pending.ids if job_id not in waiting]
        if absent:
            archived = await _bounded_async(pending, lambda: read_archived_async(c, absent))
            for item in [*pending.take(archived), *pending.gone(absent)]:
                yield item


async def _follow_async(c: Collections, pending: Pending, stream: Stream,
                        streams: Streams) -> AsyncIterator[Finished]:
    streak = 0
    while pending:
        asked_at = pending.check(time.monotonic())
        try:
            job_id = await _bounded_async(pending, lambda: next_finished_async(stream))
        except StoreError as exc:
            streams.died(exc)
            return
        if job_id is not None:
            streak = 0
            if job_id in pending:
                one = functools.partial(read_archived_async, c, [job_id])
                for item in pending.take(await _bounded_async(pending, one)):
                    yield item
        elif (now := time.monotonic()) - asked_at < QUICK_EMPTY_S:
            streak += 1
            await asyncio.sleep(pending.capped(quick_empty_pause(streak), now))
        else:
            streak = 0


async def _poll_async(c: Collections, pending: Pending, *, read_first: bool) -> AsyncIterator[Finished]:
    idle = 0
    while pending:
        if read_first:
            docs = await _bounded_async(pending, lambda: read_archived_async(c, pending.waited()))
            idle = 0 if docs else idle + 1
            for item in pending.take(docs):
                yield item
            if not pending:
                return
        read_first = True
        now = pending.check(time.monotonic())
        await asyncio.sleep(pending.capped(poll_pause_s(idle), now))
