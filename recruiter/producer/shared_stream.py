"""One change stream per producer for all its waits, fanned out by job id.

A :class:`WaitHub` (a :class:`~recruiter.Recruiter`'s, read by a daemon thread) or
:class:`AsyncWaitHub` (an :class:`~recruiter.AsyncRecruiter`'s, read by a task on its
event loop) holds at most one change stream on ``archived``, whatever the number of
waits: a web application with 200 requests waiting on jobs is one reader of the
server's writes, not 200 (on MongoDB a change stream cannot use an index, and each
waiting one holds a connection). The stream reports every job archived in the
database, cut to its ``_id`` (:func:`recruiter.store.following.archived_pipeline`);
each event rings the waits of that job (:class:`Fanout`), which read it by ``_id``.

Per client, not per process: the stream uses the client's own connections, monitoring
listeners and, for asyncio, event loop (an asyncio client belongs to one loop), and it
ends with the client. An application normally has one producer per process, so this is
one stream per process; two producers in one process are two streams.

Life of the stream: opened by the first wait, closed :data:`IDLE_CLOSE_S` after the
last one ends (so waits one after another share it), and when the producer closes. A
stream that fails is reopened at once, then with a backoff, after its last event
(a resume token), or afresh if the server no longer has it.

Invariant: the stream is only a shortcut. Every (re)opening counts as a new
*generation*; a wait reads its own jobs after it has joined and the stream is open,
again at each new generation, at least every ``SAFETY_READ_S`` (see
:mod:`recruiter.producer.waiting`), and polls while no stream is open. A wake-up the
stream misses delays a wait, never hangs it. (A getMore can stay stuck after the server
went away: about 25 s after a restart of the embedded server, before it failed. The
stream then still counts as open, and its waits find their jobs by those reads.)
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from recruiter.producer.streams import Streams as Streams  # the producer builds both
from recruiter.store.change_streams import QUICK_EMPTY_S, Stream, StreamEnded, close_quietly, quick_empty_pause
from recruiter.store.connection import StoreError
from recruiter.store.deadlines import within
from recruiter.store.following import (
    StreamsRefused,
    SyncStream,
    close_stream,
    next_finished,
    next_finished_async,
    open_archived_stream,
    open_archived_stream_async,
)
from recruiter.store.layout import Collections, SyncCollections

# The stream stays open this long after the last wait ended: waits one after another share it.
IDLE_CLOSE_S = 2.0
# How long one read of the stream (a getMore) waits for an event; the reader checks for
# idleness and for the producer closing between reads.
STREAM_WAIT_S = 1.0
# A getMore that has not answered this long after its own wait is given up (a stalled server).
GETMORE_GRACE_S = 10.0
# After a failure, the stream is reopened after this pause, doubled at each failure in a row.
RETRY_FROM_S = 0.05
RETRY_TO_S = 2.0


class Status(enum.Enum):
    OPENING = "opening"  # a reader started and has not opened its first stream yet
    OPEN = "open"
    DOWN = "down"  # no stream: none wanted now, or it failed and will be reopened


@dataclass(frozen=True)
class Seen:
    """What a wait learns when it looks: the ids of its jobs whose events came, and the stream's state."""

    woken: frozenset[object]
    generation: int  # streams opened so far by this producer
    status: Status


class Watch:
    """One wait's place in the fan-out: its job ids, those woken since it last looked, and its bell."""

    def __init__(self, job_ids: Iterable[object]) -> None:
        self.ids = frozenset(job_ids)
        self.woken: set[object] = set()

    def ring(self) -> None:
        raise NotImplementedError


class Fanout:
    """Which waits wait for which jobs, and the stream's generation and state; thread-safe.
    A ring (an event, or a change of state) sets the bell of the waits concerned."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_id: dict[object, set[Watch]] = {}
        self.watches: set[Watch] = set()
        self.generation = 0
        self.status = Status.DOWN
        self.idle_since = time.monotonic()

    def add(self, watch: Watch) -> None:
        """Call with ``lock`` held."""
        self.watches.add(watch)
        for job_id in watch.ids:
            self.by_id.setdefault(job_id, set()).add(watch)

    def remove(self, watch: Watch) -> None:
        with self.lock:
            self.watches.discard(watch)
            for job_id in watch.ids:
                waits = self.by_id.get(job_id)
                if waits is not None:
                    waits.discard(watch)
                    if not waits:
                        del self.by_id[job_id]
            if not self.watches:
                self.idle_since = time.monotonic()

    def idle_for(self, now: float) -> float | None:
        """How long no wait has been watching (None while one is). Call with ``lock`` held."""
        return None if self.watches else now - self.idle_since

    def dispatch(self, job_id: object) -> int:
        """Ring the waits of ``job_id`` (an event of the stream); how many there were. An ``_id`` no
        wait can have (a document written by hand, say) rings none."""
        try:
            hash(job_id)
        except TypeError:
            return 0
        with self.lock:
            waits = list(self.by_id.get(job_id, ()))
            for watch in waits:
                watch.woken.add(job_id)
        for watch in waits:
            watch.ring()
        return len(waits)

    def set_status(self, status: Status) -> None:
        """A stream opened (a new generation), failed or closed: every wait looks again."""
        with self.lock:
            if status is Status.OPEN:
                self.generation += 1
            self.status = status
            waits = list(self.watches)
        for watch in waits:
            watch.ring()

    def take(self, watch: Watch) -> Seen:
        """What ``watch`` has to learn; its bell was cleared just before."""
        with self.lock:
            woken, watch.woken = frozenset(watch.woken), set()
            return Seen(woken, self.generation, self.status)


def retry_pause_s(failures: int) -> float:
    """The pause before reopening the stream after ``failures`` failures in a row (the first: none)."""
    if failures <= 1:
        return 0.0
    return float(min(RETRY_TO_S, RETRY_FROM_S * 2.0 ** min(failures - 2, 16)))


class _Hub:
    """What both hubs share: the fan-out, the options, and the rules of the reader's life."""

    def __init__(self, streams: Streams, idle_close_s: float, max_await_s: float) -> None:
        self.streams = streams
        self.fanout = Fanout()
        self.idle_close_s = idle_close_s
        self.max_await_s = max_await_s
        self.closed = False
        self._reader: object = None  # the thread or task reading the stream, if one runs
        self.resume: Mapping[str, Any] | None = None  # the last event's resume token

    def _join(self, watch: Watch, start: Callable[[], object]) -> None:
        with self.fanout.lock:
            self.fanout.add(watch)
            if self._reader is None and not self.closed:
                self.fanout.status = Status.OPENING
                self.resume = None  # a new reader opens afresh: its waits read their jobs first
                self._reader = start()

    def _retire(self, me: object) -> bool:
        """Whether reader ``me`` should end (the producer closed, no wait for ``idle_close_s``,
        streams refused); if so, it is no longer the reader and a new wait starts another."""
        with self.fanout.lock:
            if self._reader is not me:
                return True
            idle = self.fanout.idle_for(time.monotonic())
            if not (self.closed or not self.streams.usable or (idle is not None and idle >= self.idle_close_s)):
                return False
            self._reader = None
        self.fanout.set_status(Status.DOWN)  # the waits left, if any, poll
        return True

    def _opened(self) -> None:
        self.streams.opened += 1
        self.streams.recovered()
        self.fanout.set_status(Status.OPEN)

    def _failed(self, exc: BaseException) -> None:
        """The stream could not open or broke: the waits poll until it reopens."""
        if isinstance(exc, StreamsRefused) and self.resume is not None:
            self.resume = None  # a resume token the server no longer has (a restart, say): open afresh
            self.streams.died(exc)
        elif isinstance(exc, StreamsRefused):
            self.streams.refuse(exc)
        else:
            if isinstance(exc, StreamEnded) or not isinstance(exc, StoreError):
                self.resume = None  # nothing to resume after an invalidate
            self.streams.died(exc)
        self.fanout.set_status(Status.DOWN)

    def _heard(self, job_id: object, asked_at: float, streak: int) -> tuple[int, float]:
        """Hand an event to its waits; the streak of quick empty answers and the pause before the next read."""
        if job_id is not None:
            self.fanout.dispatch(job_id)
            return 0, 0.0
        if time.monotonic() - asked_at < QUICK_EMPTY_S:
            # SecantusDB answers at once, empty, after a write the pipeline filtered out.
            return streak + 1, quick_empty_pause(streak + 1)
        return 0, 0.0


# -- synchronous: a daemon thread --------------------------------------------------------------


class SyncWatch(Watch):
    def __init__(self, job_ids: Iterable[object]) -> None:
        super().__init__(job_ids)
        self.bell = threading.Event()

    def ring(self) -> None:
        self.bell.set()

    def wait(self, seconds: float) -> None:
        self.bell.wait(max(0.0, seconds))
        self.bell.clear()


class WaitHub(_Hub):
    """The shared stream of a :class:`~recruiter.Recruiter`'s waits (see the module doc)."""

    def __init__(self, c: SyncCollections, streams: Streams, *, idle_close_s: float = IDLE_CLOSE_S,
                 max_await_s: float = STREAM_WAIT_S) -> None:
        super().__init__(streams, idle_close_s, max_await_s)
        self.c = c
        self._stop = threading.Event()

    @contextlib.contextmanager
    def watching(self, job_ids: Iterable[object]) -> Iterator[SyncWatch]:
        """Join the fan-out for ``job_ids`` (starting the reader if none runs) until the block ends."""
        watch = SyncWatch(job_ids)
        self._join(watch, self._start)
        try:
            yield watch
        finally:
            self.fanout.remove(watch)

    def _start(self) -> threading.Thread:
        reader = threading.Thread(target=self._run, name="recruiter-waits", daemon=True)
        reader.start()
        return reader

    def close(self) -> None:
        """Stop the reader and close its stream (waits still running poll)."""
        self.closed = True
        self._stop.set()
        reader = self._reader
        if isinstance(reader, threading.Thread) and reader is not threading.current_thread():
            reader.join(self.max_await_s + 1.0)

    def _run(self) -> None:
        me = threading.current_thread()
        failures = 0
        while not self._retire(me):
            try:
                stream = open_archived_stream(self.c, self.max_await_s, self.resume)
            except StoreError as exc:
                failures += 1
                self._failed(exc)
                self._stop.wait(retry_pause_s(failures))
                continue
            self._opened()
            try:
                self._read(stream, me)
                failures = 0
            except Exception as exc:  # noqa: BLE001 - whatever broke the stream, the waits poll meanwhile
                failures += 1
                self._failed(exc)
                self._stop.wait(retry_pause_s(failures))
            finally:
                close_stream(stream)

    def _read(self, stream: SyncStream, me: object) -> None:
        """Read events until reader ``me`` should end."""
        streak = 0
        while not self._retire(me):
            asked_at = time.monotonic()
            with within(self.max_await_s + GETMORE_GRACE_S):
                job_id = next_finished(stream)
            self.resume = stream.resume_token
            streak, pause = self._heard(job_id, asked_at, streak)
            if pause:
                self._stop.wait(pause)


# -- asyncio: a task on the client's event loop ---------------------------------------------------


class AsyncWatch(Watch):
    def __init__(self, job_ids: Iterable[object]) -> None:
        super().__init__(job_ids)
        self.bell = asyncio.Event()

    def ring(self) -> None:
        self.bell.set()  # from the reader task, on the same loop

    async def wait(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, seconds)):
                await self.bell.wait()
        self.bell.clear()


class AsyncWaitHub(_Hub):
    """The shared stream of an :class:`~recruiter.AsyncRecruiter`'s waits (see :class:`WaitHub`)."""

    def __init__(self, c: Collections, streams: Streams, *, idle_close_s: float = IDLE_CLOSE_S,
                 max_await_s: float = STREAM_WAIT_S) -> None:
        super().__init__(streams, idle_close_s, max_await_s)
        self.c = c

    @contextlib.asynccontextmanager
    async def watching(self, job_ids: Iterable[object]) -> AsyncIterator[AsyncWatch]:
        """Join the fan-out for ``job_ids`` (starting the reader if none runs) until the block ends."""
        watch = AsyncWatch(job_ids)
        loop = asyncio.get_running_loop()
        self._join(watch, lambda: loop.create_task(self._run(), name="recruiter-waits"))
        try:
            yield watch
        finally:
            self.fanout.remove(watch)

    async def close(self) -> None:
        """Stop the reader and close its stream."""
        self.closed = True
        reader = self._reader
        if not isinstance(reader, asyncio.Task) or reader.done():
            return
        _, waiting = await asyncio.wait({reader}, timeout=self.max_await_s + 1.0)
        if waiting:  # a getMore the server does not answer: the client closes next anyway
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    async def _run(self) -> None:
        me = asyncio.current_task()
        failures = 0
        while not self._retire(me):
            try:
                stream = await open_archived_stream_async(self.c, self.max_await_s, self.resume)
            except StoreError as exc:
                failures += 1
                self._failed(exc)
                await asyncio.sleep(retry_pause_s(failures))
                continue
            self._opened()
            try:
                await self._read(stream, me)
                failures = 0
            except Exception as exc:  # noqa: BLE001 - see WaitHub._run
                failures += 1
                self._failed(exc)
                await asyncio.sleep(retry_pause_s(failures))
            finally:
                await close_quietly(stream)

    async def _read(self, stream: Stream, me: object) -> None:
        streak = 0
        while not self._retire(me):
            asked_at = time.monotonic()
            with within(self.max_await_s + GETMORE_GRACE_S):
                job_id = await next_finished_async(stream)
            self.resume = stream.resume_token
            streak, pause = self._heard(job_id, asked_at, streak)
            if pause:
                await asyncio.sleep(pause)
