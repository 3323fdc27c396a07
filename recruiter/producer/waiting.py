"""Waiting for jobs to finish: which of them end, in the order they end.

:func:`finished` (and :func:`finished_async`) take job ids and yield
``(id, archived document)`` as each job is archived, ``(id, None)`` for an id
that names no job, and raise the builtin :class:`TimeoutError` when the
deadline passes first. Job handles (:mod:`recruiter.producer.handles`) build
``wait``, ``wait_all`` and ``as_completed`` on them.

How a wait learns that jobs finished:

- the producer's one change stream on ``archived``, shared by all its waits
  (:mod:`recruiter.producer.shared_stream`): a wait joins it with its job ids,
  and is rung when an event names one of them, which it then reads by ``_id``.
  It reads its jobs first once it has joined and the stream is open, so a job
  archived before is in the read and one archived after rings it: no wake-up is
  lost (the stream need not be opened for this wait: it joins one already open);
- it reads them all again whenever the stream is (re)opened (a new generation:
  events may have been missed in between) and at least every
  :data:`SAFETY_READ_S`, so a missed event delays a wait, never hangs it;
- while no stream is open (it failed and is being reopened), where the server
  refuses change streams (a standalone mongod), or where the producer was told
  not to use them (``change_streams=False``), ``archived`` is polled by
  ``_id $in`` the jobs still waited for, from every 50 ms to every second
  while nothing finishes. A server without change streams is remembered, and
  logged once per producer.

Invariant: a wait only reads. A wait that times out leaves every job as it was.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Iterable, Iterator
from typing import TypeVar

from recruiter.producer.shared_stream import AsyncWaitHub, Seen, Status, WaitHub
from recruiter.store.connection import StoreError
from recruiter.store.deadlines import is_timeout, within
from recruiter.store.following import (
    read_archived,
    read_archived_async,
    read_waiting_ids,
    read_waiting_ids_async,
)
from recruiter.store.layout import Collections, Document, SyncCollections

T = TypeVar("T")

# One finished job (its archived document), or an id that names no job (None).
Finished = tuple[object, Document | None]

POLL_FROM_S = 0.05
POLL_TO_S = 1.0
# While the stream is open, a wait reads its jobs at least this often: a missed event is a delay.
SAFETY_READ_S = 10.0
# How long a wait that joins a stream being opened waits for it before its first read.
OPEN_WAIT_S = 1.0


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


FIRST_LOOK = "first look"


class Follower:
    """What a wait on the shared stream reads next, and how long it then sleeps (pure:
    ``now`` is a monotonic time; ``seen`` what the fan-out told it, :class:`Seen`)."""

    def __init__(self, pending: Pending, now: float) -> None:
        self.pending = pending
        self.joined_at = now
        self.looked = False  # the first read is done
        self.generation = 0  # of the stream followed since the last read of every job
        self.read_at = now  # of the last read of every job
        self.idle_polls = 0

    def next_read(self, seen: Seen, now: float) -> list[object] | str | None:
        """:data:`FIRST_LOOK`, the ids to read in ``archived``, or None (nothing to read now)."""
        if not self.looked:
            if seen.status is Status.OPENING and now - self.joined_at < OPEN_WAIT_S:
                return None  # wait for the stream: what is archived from then on rings this wait
            self.looked, self.generation, self.read_at = True, seen.generation, now
            return FIRST_LOOK
        if seen.status is Status.OPEN:
            if seen.generation != self.generation or now - self.read_at >= SAFETY_READ_S:
                self.generation, self.read_at = seen.generation, now
                return self.pending.waited()
            return [job_id for job_id in seen.woken if job_id in self.pending] or None
        if now - self.read_at >= poll_pause_s(self.idle_polls):  # no stream: poll
            self.read_at = now
            return self.pending.waited()
        return None

    def found(self, read: list[object], docs: list[Document]) -> None:
        """After a read of ``read``: a poll that found nothing backs off."""
        if len(read) == len(self.pending.ids):
            self.idle_polls = 0 if docs else self.idle_polls + 1

    def pause(self, seen: Seen, now: float) -> float:
        """How long to sleep until the next look, unless rung (not past the deadline)."""
        if not self.looked:
            pause = OPEN_WAIT_S - (now - self.joined_at)
        elif seen.status is Status.OPEN:
            pause = SAFETY_READ_S - (now - self.read_at)
        else:
            pause = poll_pause_s(self.idle_polls) - (now - self.read_at)
        return self.pending.capped(max(0.0, pause), now)


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


def finished(hub: WaitHub, job_ids: Iterable[object], timeout_s: float | None) -> Generator[Finished]:
    """Yield each of ``job_ids`` as its job finishes (see the module doc); the wait joins the
    producer's stream on the first ``next()`` and leaves it when the iterator ends or is closed."""
    pending = Pending(job_ids, timeout_s, time.monotonic())
    if not pending:
        return
    if not hub.streams.usable:
        yield from _first_look(hub.c, pending)
        yield from _poll(hub.c, pending, read_first=False)
        return
    with hub.watching(pending.waited()) as watch:
        follower = Follower(pending, time.monotonic())
        while pending:
            now = pending.check(time.monotonic())
            watch.bell.clear()
            seen = hub.fanout.take(watch)
            yield from _read(hub.c, pending, follower, follower.next_read(seen, now))
            if pending:
                watch.wait(follower.pause(seen, time.monotonic()))


def _read(c: SyncCollections, pending: Pending, follower: Follower, read: list[object] | str | None,
          ) -> Iterator[Finished]:
    if read == FIRST_LOOK:
        yield from _first_look(c, pending)
    elif isinstance(read, list):
        docs = _bounded(pending, functools.partial(read_archived, c, read))
        follower.found(read, docs)
        yield from pending.take(docs)


def _first_look(c: SyncCollections, pending: Pending) -> Iterator[Finished]:
    """The jobs already archived, and the ids that name no job (in neither collection)."""
    yield from pending.take(_bounded(pending, lambda: read_archived(c, pending.waited())))
    if pending:
        waiting = _bounded(pending, lambda: read_waiting_ids(c, pending.waited()))
        absent = [job_id for job_id in pending.ids if job_id not in waiting]
        if absent:  # or archived between the two reads
            yield from pending.take(_bounded(pending, lambda: read_archived(c, absent)))
            yield from pending.gone(absent)


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


async def finished_async(hub: AsyncWaitHub, job_ids: Iterable[object],
                         timeout_s: float | None) -> AsyncGenerator[Finished]:
    """:func:`finished` for asyncio code."""
    pending = Pending(job_ids, timeout_s, time.monotonic())
    if not pending:
        return
    if not hub.streams.usable:
        async for item in _first_look_async(hub.c, pending):
            yield item
        async for item in _poll_async(hub.c, pending, read_first=False):
            yield item
        return
    async with hub.watching(pending.waited()) as watch:
        follower = Follower(pending, time.monotonic())
        while pending:
            now = pending.check(time.monotonic())
            watch.bell.clear()
            seen = hub.fanout.take(watch)
            async for item in _read_async(hub.c, pending, follower, follower.next_read(seen, now)):
                yield item
            if pending:
                await watch.wait(follower.pause(seen, time.monotonic()))


async def _read_async(c: Collections, pending: Pending, follower: Follower,
                      read: list[object] | str | None) -> AsyncIterator[Finished]:
    if read == FIRST_LOOK:
        async for item in _first_look_async(c, pending):
            yield item
    elif isinstance(read, list):
        docs = await _bounded_async(pending, functools.partial(read_archived_async, c, read))
        follower.found(read, docs)
        for item in pending.take(docs):
            yield item


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
