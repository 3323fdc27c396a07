"""What every change stream of the store shares: pacing, refusal, an end told apart, a bounded close.

A server may answer a waiting ``getMore`` with an empty batch at once (SecantusDB does, once per
write on the whole server); quick empty batches in a row are paced (:func:`quick_empty_pause`), so
no stream asks the server again for every write. :data:`STREAMS_UNSUPPORTED` are the codes of a
server that has no change streams at all: its callers poll instead. A stream the server ended
raises :class:`StreamEnded` (:func:`unless_ended`) rather than answering "no event" for ever.

Invariant: closing a stream never holds up its owner for more than :data:`CLOSE_TIMEOUT_S`, and
never raises (:func:`close_quietly`, :func:`closing`): a stream is only a shortcut, and its owner
goes on (or shuts down) without it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pymongo
import structlog
from pymongo.asynchronous.change_stream import AsyncChangeStream
from pymongo.errors import PyMongoError

from recruiter.store.connection import first_line
from recruiter.store.layout import Document

Stream = AsyncChangeStream[Document]

log = structlog.get_logger("recruiter.worker")


# An empty batch back sooner than this was not the server waiting out maxAwaitTimeMS:
# it woke the stream for a write the pipeline then filtered out. MongoDB keeps
# waiting in that case; SecantusDB returns, once per write on the whole server, so
# a waiting stream would ask again for every write. Quick empty batches in a row
# are therefore paced, from nothing up to QUICK_EMPTY_PACE_CAP_S.
QUICK_EMPTY_S = 0.05
QUICK_EMPTY_PACE_S = 0.005
QUICK_EMPTY_PACE_CAP_S = 0.16


def quick_empty_pause(streak: int, cap_s: float = QUICK_EMPTY_PACE_CAP_S) -> float:
    """Pause before the next getMore after ``streak`` quick empty batches in a row (at most ``cap_s``)."""
    if streak <= 1:
        return 0.0
    return float(min(cap_s, QUICK_EMPTY_PACE_S * 2.0 ** (streak - 2)))


# Codes a server gives when it cannot run a change stream at all
# (e.g. a standalone mongod: 40573 "only supported on replica sets").
STREAMS_UNSUPPORTED = frozenset({40573, 40324, 115, 136})


class StreamEnded(PyMongoError):
    """The server ended a change stream without an error the driver resumes from: an
    invalidate (its collection or database dropped or renamed), or a cursor closed under a
    ``getMore`` that the server answered as exhausted rather than as killed. The driver
    then answers "no event" for ever."""


def unless_ended(event: Document | None, alive: bool) -> Document | None:
    """``event`` (what ``try_next`` gave), or :class:`StreamEnded` when there was none
    and the stream is no longer ``alive``."""
    if event is None and not alive:
        raise StreamEnded("the server ended the change stream (its collection or database dropped or renamed, "
                          "or its cursor closed)")
    return event


CLOSE_TIMEOUT_S = 1.0


async def close_quietly(stream: Stream) -> None:
    """Close a change stream, giving up after a second: with the server gone, closing
    (killCursors) would otherwise wait out server selection and hold up a shutdown."""
    try:
        with pymongo.timeout(CLOSE_TIMEOUT_S):
            await stream.close()
    except PyMongoError as exc:
        log.debug("stream.close_failed", error=first_line(exc))


@contextlib.asynccontextmanager
async def closing(stream: Stream) -> AsyncIterator[Stream]:
    try:
        yield stream
    finally:
        await close_quietly(stream)
