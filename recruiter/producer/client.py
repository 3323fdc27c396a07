"""Enqueueing jobs from application code: :class:`Recruiter` (sync) and :class:`AsyncRecruiter` (asyncio). Both
build documents with the same pure builder (:func:`recruiter.domain.job.build_job_document`) and differ only
in how they talk to MongoDB (through :mod:`recruiter.store`).

Everything is validated before the first write, the same way in both: a job that cannot be stored, or kept
through its life, raises :class:`~recruiter.domain.job.JobRefused` with a one-line reason and nothing is
written. ``enqueue_many`` is all or nothing: one bad item refuses the batch, and the reason names the item by
its index. The server's document size limit (``maxBsonObjectSize`` from ``hello``) is read once per producer.

A unique job (``.unique(key)``, :mod:`recruiter.domain.unique`) whose key is held returns the holder's handle,
with ``existed`` set (:mod:`recruiter.producer.unique`); in ``enqueue_many`` those items cost one more write
and read each, the others are still written in one round trip. ``resubmit`` runs a job (once more) at a given
time (:mod:`recruiter.domain.resubmit`).

``enqueue`` returns a job handle (:mod:`recruiter.producer.handles`), which is the job's id and follows the
job: its state, its result, ``wait()``. ``rec.job(id)`` makes one for a job enqueued elsewhere, and
``wait_all`` and ``as_completed`` wait for many jobs; a producer's waits share one change stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from bson import ObjectId

from recruiter.admin import Admin
from recruiter.admin.async_api import AsyncAdmin
from recruiter.domain.builder import JobBuilder
from recruiter.domain.cancel import CancelResult
from recruiter.domain.clock import Clock, SystemClock
from recruiter.domain.job import JobRefused
from recruiter.domain.resubmit import Resubmitted
from recruiter.domain.workable import Workable
from recruiter.producer import handles
from recruiter.producer.after import insert_batch, insert_batch_async, insert_job, insert_job_async
from recruiter.producer.building import (
    all_or_nothing,
    as_job_id,
    built_batch,
    built_one,
    enqueued_view,
    limit_from_hello,
    no_unique_in_session,
    one_write,
    resubmit_time,
)
from recruiter.producer.handles import AsyncJobHandle, JobHandle, JobNotFound
from recruiter.producer.schedules import Options, ScheduleView, schedule, schedule_async
from recruiter.producer.shared_stream import AsyncWaitHub, Streams, WaitHub
from recruiter.producer.unique import enqueue_unique, enqueue_unique_async
from recruiter.store.batches import BatchRefused
from recruiter.store.cancel import cancel_job, cancel_job_async
from recruiter.store.clock import ServerClock
from recruiter.store.connection import (
    CommandListener,
    ConnectionProblem,
    StoreError,
    Target,
    async_client,
    describe,
    hello,
    hello_async,
    parse_target,
    session_problem,
    sync_client,
)
from recruiter.store.indexes import ensure_indexes, ensure_indexes_sync
from recruiter.store.layout import (
    AsyncClient,
    AsyncClientSession,
    ClientSession,
    Collections,
    Document,
    SyncClient,
    SyncCollections,
)
from recruiter.store.names import async_database, prefix_of, sync_database
from recruiter.store.resubmit import NoSuchJob, resubmit_job, resubmit_job_async
from recruiter.store.unique import insert_unordered, insert_unordered_async


def _handle(recruiter: Recruiter, doc: Document) -> JobHandle:
    return JobHandle(doc["_id"], enqueued_view(doc, recruiter.clock.now()), recruiter)


def _async_handle(recruiter: AsyncRecruiter, doc: Document) -> AsyncJobHandle:
    return AsyncJobHandle(doc["_id"], enqueued_view(doc, recruiter.clock.now()), recruiter)


def _check_session(recruiter: Recruiter | AsyncRecruiter, session: object) -> None:
    """A caller's session must come from the recruiter's own client: :class:`JobRefused` if not."""
    if session is not None:
        problem = session_problem(recruiter.client, session)
        if problem:
            raise JobRefused(f"{problem}; nothing was written")


class Recruiter:
    """Producer handle for synchronous code.

    >>> rec = Recruiter.connect("mongodb://localhost:27017/recruiter")
    >>> job = SendInvoice("42").as_job_of(rec).in_group("billing").enqueue()
    >>> job.wait(timeout=60)
    {'sent': '42'}
    """

    def __init__(self, client: SyncClient, database: str, *, clock: Clock | None = None,
                 owns_client: bool = False, change_streams: bool = True, prefix: str = "") -> None:
        self.client = client
        self.db = sync_database(client, database, prefix)  # ValueError for a bad prefix
        self.collections = SyncCollections.of(self.db)
        self.clock = clock or SystemClock()
        self.streams = Streams(wanted=change_streams)
        self.waits = WaitHub(self.collections, self.streams)  # the one change stream of all its waits
        self._owns_client = owns_client
        self._max_bytes: int | None = None
        self._admin: Admin | None = None

    @classmethod
    def connect(cls, uri: str | None = None, *, clock: Clock | None = None, create_indexes: bool = True,
                server_selection_timeout_s: float = 10.0, change_streams: bool = True,
                event_listeners: Sequence[CommandListener] = (), prefix: str | None = None) -> Recruiter:
        """Connect to ``uri`` (default ``mongodb://localhost:27017/recruiter``).

        ``change_streams=False`` makes waits poll ``archived`` instead of watching it
        (they poll anyway where the server has no change streams). ``event_listeners``
        are PyMongo monitoring listeners added to the client (e.g. to count commands). ``prefix``:
        the collection prefix (default ``RECRUITER_COLLECTION_PREFIX``, else none; ``"recruiter_"``
        names them ``recruiter_scheduled``, ...), the one of the processes serving these jobs.

        Raises :class:`~recruiter.store.connection.ConnectionProblem`, with a one-line
        message, for a bad URI or a server that does not answer.
        """
        target: Target = parse_target(uri, prefix)
        client = sync_client(target, app_name="recruiter-producer",
                             server_selection_timeout_s=server_selection_timeout_s,
                             event_listeners=list(event_listeners))
        try:
            if clock is None:
                clock = ServerClock()
                clock.calibrate_sync(client)  # schedule on the server's time line
            rec = cls(client, target.database, clock=clock, owns_client=True, change_streams=change_streams,
                      prefix=target.prefix)
            if create_indexes:
                ensure_indexes_sync(rec.db)
        except StoreError as exc:
            client.close()
            raise ConnectionProblem(describe(exc, target)) from exc
        return rec

    def max_document_bytes(self) -> int:
        """The server's ``maxBsonObjectSize``, asked once."""
        if self._max_bytes is None:
            self._max_bytes = limit_from_hello(hello(self.db))
        return self._max_bytes

    def enqueue(self, item: JobBuilder[Any] | Workable, *, session: ClientSession | None = None) -> JobHandle:
        """Store one job; returns its handle (which is its id). Raises :class:`JobRefused`
        (nothing written) for a bad job.

        With ``session`` (started from this recruiter's ``client``), the job is written in
        that session's transaction: it exists, and the recruiter sees it, only once the
        transaction commits; an abort leaves nothing."""
        _check_session(self, session)
        doc, spec = built_one(self, item, self.max_document_bytes())
        if session is not None:
            no_unique_in_session([(doc, spec)])
        if spec is not None:
            return enqueue_unique(self, doc, spec, lambda d: _handle(self, d))
        insert_job(self.collections, doc, session)
        return _handle(self, doc)

    def enqueue_many(self, items: Iterable[JobBuilder[Any] | Workable], *,
                     session: ClientSession | None = None) -> list[JobHandle]:
        """Store many jobs all or nothing, in one transaction: the insert and its commit
        (:mod:`recruiter.store.batches`; ``session``: see :meth:`enqueue`).

        Every item is validated before anything is written; one bad item raises
        :class:`JobRefused` naming it (``item 5 of 7: …``) and nothing is written.
        """
        _check_session(self, session)
        batch = list(items)
        if not batch:
            return []
        built = built_batch(self, batch, self.max_document_bytes())
        if session is not None:
            no_unique_in_session(built)
        if all(spec is None for _, spec in built):
            all_or_nothing(lambda: insert_batch(self.collections, [d for d, _ in built], session))
            return [_handle(self, d) for d, _ in built]
        # Unique items: one unordered insert, then the refused and the reserving ones one by one.
        docs, later = one_write(built)
        refused = {id(docs[i]) for i in insert_unordered(self.collections.scheduled, docs)}
        return [enqueue_unique(self, d, spec, lambda d: _handle(self, d))
                if spec is not None and (id(d) in refused or i in later) else _handle(self, d)
                for i, (d, spec) in enumerate(built)]

    def job(self, job_id: ObjectId | str) -> JobHandle:
        """The handle of an existing job, from its id, its 24 hex digits or a handle.

        Raises :class:`~recruiter.JobNotFound` for an id of no job and ValueError for
        a malformed one (one line each).
        """
        job_id = as_job_id(job_id)
        return JobHandle(job_id, handles.read_view(self, job_id), self)

    def wait_all(self, jobs: Iterable[JobHandle], timeout: float | None = None, *,
                 return_exceptions: bool = False) -> list[object]:
        """The results of ``jobs``, in their order; see :func:`recruiter.producer.handles.wait_all`."""
        return handles.wait_all(self, jobs, timeout, return_exceptions=return_exceptions)

    def as_completed(self, jobs: Iterable[JobHandle], timeout: float | None = None) -> Iterator[JobHandle]:
        """Each of ``jobs`` as it finishes; see :func:`recruiter.producer.handles.as_completed`."""
        return handles.as_completed(self, jobs, timeout)

    def resubmit(self, job_id: ObjectId | str, at: datetime | None = None) -> Resubmitted:
        """Run a job (once more) at ``at`` (default: now); see :mod:`recruiter.domain.resubmit`.

        A waiting job is rescheduled; a running one is not halted: it runs once more after
        this attempt. Raises :class:`~recruiter.domain.resubmit.ResubmitRefused` for an
        archived job (``recruiter jobs retry`` copies one) and :class:`~recruiter.JobNotFound`.
        """
        try:
            return resubmit_job(self.collections, as_job_id(job_id), resubmit_time(at), self.clock.now())
        except NoSuchJob as exc:
            raise JobNotFound(exc.args[0]) from None

    def cancel(self, job_id: ObjectId | str, reason: str | None = None) -> CancelResult:
        """Cancel a job: archived with ``why: "cancelled"``; a worker running it halts it.

        See :mod:`recruiter.domain.cancel` for what happens in each state of the job.
        """
        return cancel_job(self.db, as_job_id(job_id), self.clock.now(), reason)

    def schedule(self, name: str, *, job: JobBuilder[Any] | Workable, cron: str | None = None,
                 every: timedelta | str | None = None, tz: str = "UTC", overlap: str = "skip",
                 catch_up: str | timedelta = "none", jitter: timedelta | str | None = None) -> ScheduleView:
        """Declare the periodic job ``name`` (an upsert: see :mod:`recruiter.producer.schedules`):
        ``cron`` (in ``tz``) or ``every`` (a ``timedelta`` or ``"15m"``); ``overlap`` ``"skip"`` or
        ``"allow"``; ``catch_up`` ``"none"``, ``"all"`` or a ``timedelta`` (within); ``jitter``.
        Raises :class:`~recruiter.domain.schedules.ScheduleRefused` (one line, nothing stored)."""
        return schedule(self, name, job, Options(cron, every, tz, overlap, catch_up, jitter))

    @property
    def admin(self) -> Admin:
        """The operator's read model and actions on this database (:mod:`recruiter.admin`): ``rec.admin.status()``."""
        if self._admin is None:
            self._admin = Admin(self.db)
        return self._admin

    def close(self) -> None:
        self.waits.close()
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> Recruiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncRecruiter:
    """Producer handle for asyncio code; ``enqueue`` and ``enqueue_many`` are awaitable.
    ``uri``: the URI of ``client``, which :attr:`admin` needs (``connect`` gives it)."""

    def __init__(self, client: AsyncClient, database: str, *, clock: Clock | None = None,
                 owns_client: bool = False, change_streams: bool = True, uri: str | None = None,
                 event_listeners: Sequence[CommandListener] = (), prefix: str = "") -> None:
        self.client = client
        self.db = async_database(client, database, prefix)
        self.collections = Collections.of(self.db)
        self.clock = clock or SystemClock()
        self.streams = Streams(wanted=change_streams)
        self.waits = AsyncWaitHub(self.collections, self.streams)  # the one change stream of all its waits
        self._owns_client = owns_client
        self._max_bytes: int | None = None
        self._uri = uri
        self._listeners = list(event_listeners)
        self._admin: AsyncAdmin | None = None

    @classmethod
    async def connect(cls, uri: str | None = None, *, clock: Clock | None = None, create_indexes: bool = True,
                      server_selection_timeout_s: float = 10.0, change_streams: bool = True,
                      event_listeners: Sequence[CommandListener] = (), prefix: str | None = None) -> AsyncRecruiter:
        """Connect to ``uri``; see :meth:`Recruiter.connect`."""
        target = parse_target(uri, prefix)
        client = async_client(target, app_name="recruiter-producer",
                              server_selection_timeout_s=server_selection_timeout_s,
                              event_listeners=list(event_listeners))
        try:
            if clock is None:
                clock = ServerClock()
                await clock.calibrate(client)
            rec = cls(client, target.database, clock=clock, owns_client=True, change_streams=change_streams,
                      uri=target.uri, event_listeners=event_listeners, prefix=target.prefix)
            if create_indexes:
                await ensure_indexes(rec.db)
        except StoreError as exc:
            await client.close()
            raise ConnectionProblem(describe(exc, target)) from exc
        return rec

    async def max_document_bytes(self) -> int:
        """The server's ``maxBsonObjectSize``, asked once."""
        if self._max_bytes is None:
            self._max_bytes = limit_from_hello(await hello_async(self.db))
        return self._max_bytes

    async def enqueue(self, item: JobBuilder[Any] | Workable, *,
                      session: AsyncClientSession | None = None) -> AsyncJobHandle:
        """Store one job; see :meth:`Recruiter.enqueue` (``session``: an asyncio session of this client)."""
        _check_session(self, session)
        doc, spec = built_one(self, item, await self.max_document_bytes())
        if session is not None:
            no_unique_in_session([(doc, spec)])
        if spec is not None:
            return await enqueue_unique_async(self, doc, spec, lambda d: _async_handle(self, d))
        await insert_job_async(self.collections, doc, session)
        return _async_handle(self, doc)

    async def enqueue_many(self, items: Iterable[JobBuilder[Any] | Workable], *,
                           session: AsyncClientSession | None = None) -> list[AsyncJobHandle]:
        """Store many jobs all or nothing, in one transaction; see :meth:`Recruiter.enqueue_many`."""
        _check_session(self, session)
        batch = list(items)
        if not batch:
            return []
        built = built_batch(self, batch, await self.max_document_bytes())
        if session is not None:
            no_unique_in_session(built)
        if all(spec is None for _, spec in built):
            try:
                await insert_batch_async(self.collections, [d for d, _ in built], session)
            except BatchRefused as exc:
                raise JobRefused(str(exc)) from None
            return [_async_handle(self, d) for d, _ in built]
        docs, later = one_write(built)
        refused = {id(docs[i]) for i in await insert_unordered_async(self.collections.scheduled, docs)}
        return [await enqueue_unique_async(self, d, spec, lambda d: _async_handle(self, d))
                if spec is not None and (id(d) in refused or i in later) else _async_handle(self, d)
                for i, (d, spec) in enumerate(built)]

    async def job(self, job_id: ObjectId | str) -> AsyncJobHandle:
        """The handle of an existing job; see :meth:`Recruiter.job`."""
        job_id = as_job_id(job_id)
        return AsyncJobHandle(job_id, await handles.read_view_async(self, job_id), self)

    async def wait_all(self, jobs: Iterable[AsyncJobHandle], timeout: float | None = None, *,  # noqa: ASYNC109
                       return_exceptions: bool = False) -> list[object]:
        """The results of ``jobs``, in their order; see :func:`recruiter.producer.handles.wait_all`."""
        return await handles.wait_all_async(self, jobs, timeout, return_exceptions=return_exceptions)

    def as_completed(self, jobs: Iterable[AsyncJobHandle],
                     timeout: float | None = None) -> AsyncIterator[AsyncJobHandle]:
        """Each of ``jobs`` as it finishes (``async for``); see :func:`recruiter.producer.handles.as_completed`."""
        return handles.as_completed_async(self, jobs, timeout)

    async def resubmit(self, job_id: ObjectId | str, at: datetime | None = None) -> Resubmitted:
        """Run a job (once more) at ``at``; see :meth:`Recruiter.resubmit`."""
        try:
            return await resubmit_job_async(self.collections, as_job_id(job_id), resubmit_time(at), self.clock.now())
        except NoSuchJob as exc:
            raise JobNotFound(exc.args[0]) from None

    async def cancel(self, job_id: ObjectId | str, reason: str | None = None) -> CancelResult:
        """Cancel a job; see :meth:`Recruiter.cancel`."""
        return await cancel_job_async(self.db, as_job_id(job_id), self.clock.now(), reason)

    async def schedule(self, name: str, *, job: JobBuilder[Any] | Workable, cron: str | None = None,
                       every: timedelta | str | None = None, tz: str = "UTC", overlap: str = "skip",
                       catch_up: str | timedelta = "none", jitter: timedelta | str | None = None) -> ScheduleView:
        """:meth:`Recruiter.schedule` for asyncio code."""
        return await schedule_async(self, name, job, Options(cron, every, tz, overlap, catch_up, jitter))

    @property
    def admin(self) -> AsyncAdmin:
        """The read model and actions, awaitable: ``await rec.admin.status()``; see :mod:`recruiter.admin.async_api`."""
        if self._admin is None:
            self._admin = AsyncAdmin.over(self._uri, self.db.name, self.clock, self._listeners, prefix_of(self.db))
        return self._admin

    async def close(self) -> None:
        await self.waits.close()
        if self._admin is not None:  # its own synchronous client
            self._admin.close()
        if self._owns_client:
            await self.client.close()

    async def __aenter__(self) -> AsyncRecruiter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
