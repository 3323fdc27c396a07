"""A producer's batch of new jobs, written all or nothing.

``enqueue_many`` promises all or nothing. Validation before the write covers what
the producer can check; the server can still refuse an item (a duplicate ``_id``,
a validator, a unique index), and an ordered ``insert_many`` alone would leave the
items before it written. So the batch is one transaction where the server has
transactions (a replica set, a sharded cluster, the embedded server), or the
caller's own transaction when it passes its session. Where the server has none (a
standalone ``mongod``), the batch is an ordered insert, and a refusal says how many
items before it were written: that is the documented behaviour there.

A transaction has its limits: MongoDB aborts one that runs longer than
``transactionLifetimeLimitSeconds`` (60 s by default), so very large batches are
better split by the caller (tens of thousands of jobs per call are fine).

Invariant: when :func:`insert_batch` raises :class:`BatchRefused` on a server with
transactions, nothing of the batch was written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pymongo import WriteConcern
from pymongo.errors import BulkWriteError, OperationFailure, PyMongoError

from recruiter.store.connection import first_line
from recruiter.store.layout import AsyncClientSession, AsyncColl, ClientSession, Document, SyncColl

# The server's answer to a transaction where it has none (IllegalOperation, 20).
NO_TRANSACTIONS = 20


class BatchRefused(Exception):
    """The server refused an item of a batch; one line, naming the item."""

    def __init__(self, index: int, total: int, message: str, written: int) -> None:
        self.index, self.total, self.written = index, total, written
        where = f"item {index + 1} of {total}" if index >= 0 else f"a batch of {total}"
        kept = ("nothing was written" if written == 0
                else f"the server has no transactions, so the {written} items before it were written")
        super().__init__(f"{where}: refused by the server: {message}; {kept}")


def _refusal(exc: PyMongoError, total: int, written: int) -> BatchRefused:
    if isinstance(exc, BulkWriteError):
        errors = exc.details.get("writeErrors") or [{}]
        first = errors[0]
        inserted = int(exc.details.get("nInserted", 0)) if written else 0
        return BatchRefused(int(first.get("index", -1)), total, str(first.get("errmsg", exc))[:300], inserted)
    return BatchRefused(-1, total, first_line(exc), written)


def _no_transactions(exc: PyMongoError) -> bool:
    return isinstance(exc, OperationFailure) and exc.code == NO_TRANSACTIONS


def insert_batch(scheduled: SyncColl, docs: Sequence[Document], session: ClientSession | None = None) -> None:
    """Insert ``docs`` all or nothing (see the module); :class:`BatchRefused` if the server refuses one."""
    if session is not None:  # the caller's transaction: its commit or abort decides for all
        _insert(scheduled, docs, session, written=0)
        return
    plain = scheduled.with_options(write_concern=WriteConcern())  # a transaction carries its own
    try:
        with scheduled.database.client.start_session() as own:
            own.with_transaction(lambda s: plain.insert_many(list(docs), ordered=True, session=s),
                                 write_concern=WriteConcern("majority"))
    except PyMongoError as exc:
        if not _no_transactions(exc):
            raise _refusal(exc, len(docs), written=0) from None
        _insert(scheduled, docs, None, written=1)


def _insert(scheduled: SyncColl, docs: Sequence[Document], session: ClientSession | None, *, written: int) -> None:
    try:
        scheduled.insert_many(list(docs), ordered=True, session=session)
    except (BulkWriteError, OperationFailure) as exc:
        raise _refusal(exc, len(docs), written) from None


async def insert_batch_async(scheduled: AsyncColl, docs: Sequence[Document],
                             session: AsyncClientSession | None = None) -> None:
    """:func:`insert_batch` for the asyncio client."""
    if session is not None:
        await _insert_async(scheduled, docs, session, written=0)
        return
    plain = scheduled.with_options(write_concern=WriteConcern())

    async def write(s: Any) -> None:
        await plain.insert_many(list(docs), ordered=True, session=s)

    try:
        async with scheduled.database.client.start_session() as own:
            await own.with_transaction(write, write_concern=WriteConcern("majority"))
    except PyMongoError as exc:
        if not _no_transactions(exc):
            raise _refusal(exc, len(docs), written=0) from None
        await _insert_async(scheduled, docs, None, written=1)


async def _insert_async(scheduled: AsyncColl, docs: Sequence[Document], session: AsyncClientSession | None, *,
                        written: int) -> None:
    try:
        await scheduled.insert_many(list(docs), ordered=True, session=session)
    except (BulkWriteError, OperationFailure) as exc:
        raise _refusal(exc, len(docs), written) from None
