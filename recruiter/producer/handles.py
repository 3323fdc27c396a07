"""Job handles: what ``enqueue()`` returns, to follow a job to its result.

A :class:`JobHandle` (sync) or :class:`AsyncJobHandle` (asyncio) **is** the
job's id: a subclass of :class:`bson.ObjectId` with the same binary value, so
code that stores, compares, hashes, prints or queries by the id works
unchanged (bson encodes it as an ObjectId: it carries ObjectId's type marker).
Copied or pickled, a handle becomes a plain ObjectId: the producer's client
stays in the process that made it.

A handle keeps the last :class:`~recruiter.domain.following.JobView` it saw
(built from the enqueued document itself, or read by ``refresh()``); ``state``,
``why``, ``attempts``, ``worker``, ``progress``, ``result`` ... read that view.
``wait()`` returns the result of a job that ends ``done`` and raises
:class:`JobFailed` for one archived for any other reason (``cancelled``,
``tried-too-many-times``, ...); on its deadline it raises the builtin
:class:`TimeoutError` and leaves the job alone. Waiting is done by
:mod:`recruiter.producer.waiting`: every wait of a producer (``wait``,
:func:`wait_all`, :func:`as_completed`), in any thread or task, shares the producer's
one change stream (:mod:`recruiter.producer.shared_stream`).

Invariant: a handle only reads. Nothing here writes to the database.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator, Iterable, Iterator
from contextlib import aclosing, closing
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from bson import ObjectId

from recruiter.domain.following import JobState, JobView, Progress, view_of
from recruiter.domain.records import Raw
from recruiter.producer.waiting import Finished, check_timeout, finished, finished_async
from recruiter.store.following import read_job_documents, read_job_documents_async

if TYPE_CHECKING:
    from recruiter.producer.client import AsyncRecruiter, Recruiter

MESSAGE_CHARS = 300


class JobNotFound(LookupError):
    """No job has this id: it is neither waiting in ``scheduled`` nor in ``archived``
    (never enqueued here, or archived long enough ago to be deleted)."""

    def __init__(self, job_id: object) -> None:
        super().__init__(f"no job {job_id}: neither waiting nor archived")
        self.job_id = job_id

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job_id,))


def _first_line(text: object) -> str:
    return str(text).strip().split("\n", 1)[0][:MESSAGE_CHARS] if text else ""


def describe_failure(view: JobView) -> str:
    """``job 65a… ended tried-too-many-times: ValueError: boom`` (one line)."""
    line = f"job {view.id} ended {view.why}"
    if view.reason:
        line += f" ({_first_line(view.reason)})"
    last = view.last_execution or {}
    error, message = last.get("class"), _first_line(last.get("message"))
    if isinstance(error, str) and error:
        error = error.removeprefix("builtins:")
        line += f": {error}: {message}" if message else f": {error}"
    elif message:
        line += f": {message}"
    return line


class JobFailed(Exception):
    """The job was archived for another reason than ``done``.

    ``why`` says how it ended (``tried-too-many-times``, ``cancelled``, ...),
    ``execution`` is its last execution as stored (``class``, ``message`` and
    ``trace`` of the error; None if it never ran), ``view`` the whole view.
    """

    def __init__(self, view: JobView) -> None:
        super().__init__(describe_failure(view))
        self.view = view
        self.job_id = view.id
        self.why = view.why
        self.reason = view.reason
        self.execution: Raw | None = view.last_execution

    @property
    def trace(self) -> str | None:
        """The traceback of the last attempt's error, as the worker stored it."""
        trace = (self.execution or {}).get("trace")
        return trace if isinstance(trace, str) else None

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.view,))


class ResultDropped(Exception):
    """The job ended ``done``, but its result was not kept: over the worker's size limit
    (``worker start --max-result-size``, 1 MiB by default) or not storable as BSON.

    ``reason`` says why, ``size_bytes`` is the result's BSON size when it could be measured
    (None otherwise), ``view`` the job's whole view. The archived job shows the same as
    ``result_dropped: {reason, size_bytes}``.
    """

    def __init__(self, view: JobView) -> None:
        dropped = view.result_dropped or {}
        reason, size = dropped.get("reason"), dropped.get("size_bytes")
        self.view = view
        self.job_id = view.id
        self.reason = reason if isinstance(reason, str) else "no reason recorded"
        self.size_bytes = size if isinstance(size, int) and not isinstance(size, bool) else None
        sized = f" ({self.size_bytes} bytes)" if self.size_bytes is not None else ""
        super().__init__(f"job {view.id} ended done but its result was not kept{sized}: "
                         f"{_first_line(self.reason)}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.view,))


class _Handle(ObjectId):
    """What both handles share: the id, the last view and what it tells."""

    __slots__ = ("_view", "existed")

    def __init__(self, job_id: ObjectId, view: JobView) -> None:
        super().__init__(job_id)
        self._view = view
        # True for the handle a unique enqueue returns when the key's job already
        # existed (recruiter.domain.unique): this is that job, not a new one.
        self.existed = False

    @property
    def id(self) -> ObjectId:
        """The job's id, as a plain ObjectId."""
        return ObjectId(self.binary)

    @property
    def view(self) -> JobView:
        """The last view of the job (from ``enqueue``, ``refresh()`` or a wait)."""
        return self._view

    @property
    def state(self) -> JobState:
        return self._view.state

    @property
    def why(self) -> str | None:
        return self._view.why

    @property
    def attempts(self) -> int:
        return self._view.attempts

    @property
    def executions(self) -> tuple[Raw, ...]:
        return self._view.executions

    @property
    def last_execution(self) -> Raw | None:
        return self._view.last_execution

    @property
    def worker(self) -> str | None:
        return self._view.worker

    @property
    def progress(self) -> Progress | None:
        return self._view.progress

    @property
    def result(self) -> object:
        """What the job returned, if it ended ``done``; else None. :class:`ResultDropped` if it
        ended ``done`` and its value was not kept."""
        if not self._view.succeeded:
            return None
        if self._view.result_dropped is not None:
            raise ResultDropped(self._view)
        return self._view.result

    @property
    def finished(self) -> bool:
        return self._view.finished

    def outcome(self) -> object:
        """The result of a finished job; :class:`JobFailed` if it did not end ``done``,
        :class:`ResultDropped` if it did but its value was not kept. The job must be finished."""
        if not self._view.succeeded:
            raise JobFailed(self._view)
        if self._view.result_dropped is not None:
            raise ResultDropped(self._view)
        return self._view.result

    def _saw(self, view: JobView) -> JobView:
        self._view = view
        return view

    def __repr__(self) -> str:
        return f"{type(self).__name__}('{self}', state={self._view.state!r})"

    # Copies and pickles are plain ids: the producer's client is not carried along.
    def __reduce__(self) -> tuple[Any, ...]:
        return (ObjectId, (self.binary,))

    def __copy__(self) -> ObjectId:
        return ObjectId(self.binary)

    def __deepcopy__(self, memo: dict[int, object]) -> ObjectId:
        return ObjectId(self.binary)


H = TypeVar("H", bound=_Handle)


class JobHandle(_Handle):
    """A job of a :class:`~recruiter.Recruiter` (sync); see the module doc."""

    __slots__ = ("_recruiter",)

    def __init__(self, job_id: ObjectId, view: JobView, recruiter: Recruiter) -> None:
        super().__init__(job_id, view)
        self._recruiter = recruiter

    def refresh(self) -> JobView:
        """Read the job's documents again; returns the new view (also kept by the handle)."""
        return self._saw(read_view(self._recruiter, self.id))

    def wait(self, timeout: float | None = None) -> object:
        """The job's result once it ends ``done``; :class:`JobFailed` if it ends otherwise;
        :class:`ResultDropped` if it ended ``done`` and its value was not kept;
        :class:`TimeoutError` after ``timeout`` seconds (None: no deadline), the job untouched."""
        check_timeout(timeout)
        if self.finished:
            return self.outcome()
        return wait_all(self._recruiter, [self], timeout)[0]


class AsyncJobHandle(_Handle):
    """A job of an :class:`~recruiter.AsyncRecruiter`; ``await handle`` is ``await handle.wait()``."""

    __slots__ = ("_recruiter",)

    def __init__(self, job_id: ObjectId, view: JobView, recruiter: AsyncRecruiter) -> None:
        super().__init__(job_id, view)
        self._recruiter = recruiter

    async def refresh(self) -> JobView:
        """Read the job's documents again; see :meth:`JobHandle.refresh`."""
        return self._saw(await read_view_async(self._recruiter, self.id))

    # A timeout parameter, not asyncio.timeout: the same call as the sync handle's, and the
    # deadline bounds each read the wait makes (TimeoutError with its message).
    async def wait(self, timeout: float | None = None) -> object:  # noqa: ASYNC109
        """See :meth:`JobHandle.wait`."""
        check_timeout(timeout)
        if self.finished:
            return self.outcome()
        return (await wait_all_async(self._recruiter, [self], timeout))[0]

    def __await__(self) -> Generator[Any, None, object]:
        return self.wait().__await__()


# -- reading one job ----------------------------------------------------------------------


def read_view(rec: Recruiter, job_id: ObjectId) -> JobView:
    """The view of job ``job_id``; :class:`JobNotFound` if no collection holds it."""
    view = read_job_documents(rec.collections, job_id).view(rec.clock.now())
    if view is None:
        raise JobNotFound(job_id)
    return view


async def read_view_async(rec: AsyncRecruiter, job_id: ObjectId) -> JobView:
    view = (await read_job_documents_async(rec.collections, job_id)).view(rec.clock.now())
    if view is None:
        raise JobNotFound(job_id)
    return view


# -- waiting for many ---------------------------------------------------------------------


class _Gathering(Generic[H]):
    """The handles one ``wait_all`` or ``as_completed`` call waits for, and what it met."""

    def __init__(self, rec: Recruiter | AsyncRecruiter, handles: Iterable[H], return_exceptions: bool) -> None:
        self.clock = rec.clock
        self.handles = list(handles)
        self.return_exceptions = return_exceptions
        self.groups: dict[object, list[H]] = {}
        for handle in self.handles:
            self.groups.setdefault(handle.id, []).append(handle)
        self.missing: dict[object, JobNotFound] = {}

    def unfinished(self) -> list[object]:
        """The ids to wait for; raises at once a failure already known (unless returned)."""
        for handle in self.handles:
            if handle.finished:
                self._outcome(handle)
        return list(dict.fromkeys(h.id for h in self.handles if not h.finished))

    def arrived(self, item: Finished) -> list[H]:
        """Update the handles of a finished job and return them; raises its failure
        (:class:`JobFailed`, or :class:`JobNotFound` for an id of no job) unless returned."""
        job_id, doc = item
        if doc is None:
            self.missing[job_id] = JobNotFound(job_id)
            if not self.return_exceptions:
                raise self.missing[job_id]
            return []
        view = view_of(job_id, None, doc, None, self.clock.now())
        assert view is not None
        for handle in self.groups[job_id]:
            handle._saw(view)
        self._outcome(self.groups[job_id][0])
        return self.groups[job_id]

    def _outcome(self, handle: H) -> object:
        try:
            return handle.outcome()
        except (JobFailed, ResultDropped) as exc:
            if self.return_exceptions:
                return exc
            raise

    def results(self) -> list[object]:
        return [self.missing.get(h.id) or self._outcome(h) for h in self.handles]


def wait_all(rec: Recruiter, handles: Iterable[JobHandle], timeout: float | None = None, *,
             return_exceptions: bool = False) -> list[object]:
    """The results of ``handles``' jobs, in their order, once all have finished.

    Without ``return_exceptions``, the first failure met (:class:`JobFailed`,
    :class:`ResultDropped`, or :class:`JobNotFound` for an id of no job) is raised at once, as
    :func:`asyncio.gather` does: the other jobs run on, and the handles of
    those already finished hold their views. With it, the exception takes the
    failed job's place in the list. :class:`TimeoutError` after ``timeout``
    seconds either way. The call shares the producer's one change stream.
    """
    timeout_s = check_timeout(timeout)
    gathering = _Gathering(rec, handles, return_exceptions)
    with closing(finished(rec.waits, gathering.unfinished(), timeout_s)) as items:
        for item in items:
            gathering.arrived(item)
    return gathering.results()


def as_completed(rec: Recruiter, handles: Iterable[JobHandle], timeout: float | None = None) -> Iterator[JobHandle]:
    """Yield each handle as its job finishes (its view refreshed, ``finished`` true):
    those already finished first, then in the order they end. ``handle.wait()`` then
    returns its result (or raises :class:`JobFailed`) without waiting.

    Raises :class:`TimeoutError` when ``timeout`` seconds have passed with jobs left,
    and :class:`JobNotFound` for an id of no job. It joins the producer's change stream
    when iteration starts and leaves it when it ends (or the iterator is closed).
    """
    timeout_s = check_timeout(timeout)
    gathering = _Gathering(rec, handles, return_exceptions=True)
    yield from (h for h in gathering.handles if h.finished)
    with closing(finished(rec.waits, gathering.unfinished(), timeout_s)) as items:
        for item in items:
            yield from gathering.arrived(item)
            if item[0] in gathering.missing:
                raise gathering.missing[item[0]]


async def wait_all_async(rec: AsyncRecruiter, handles: Iterable[AsyncJobHandle],
                         timeout: float | None = None, *,  # noqa: ASYNC109 (see AsyncJobHandle.wait)
                         return_exceptions: bool = False) -> list[object]:
    """:func:`wait_all` for asyncio code."""
    timeout_s = check_timeout(timeout)
    gathering = _Gathering(rec, handles, return_exceptions)
    async with aclosing(finished_async(rec.waits, gathering.unfinished(), timeout_s)) as items:
        async for item in items:
            gathering.arrived(item)
    return gathering.results()


async def as_completed_async(rec: AsyncRecruiter, handles: Iterable[AsyncJobHandle],
                             timeout: float | None = None,  # noqa: ASYNC109 (see AsyncJobHandle.wait)
                             ) -> AsyncIterator[AsyncJobHandle]:
    """:func:`as_completed` for asyncio code (``async for``)."""
    timeout_s = check_timeout(timeout)
    gathering = _Gathering(rec, handles, return_exceptions=True)
    for handle in gathering.handles:
        if handle.finished:
            yield handle
    async with aclosing(finished_async(rec.waits, gathering.unfinished(), timeout_s)) as items:
        async for item in items:
            for handle in gathering.arrived(item):
                yield handle
            if item[0] in gathering.missing:
                raise gathering.missing[item[0]]
