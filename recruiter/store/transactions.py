"""Fenced transactions: a round's writes commit only while its lease is held.

Invariant: every transaction a leader runs writes the fence of its lease
(:meth:`recruiter.store.leases.Lease.fence`) before it commits: as its first
write, or (``deferred``) as the first operation of the first command that
carries several (:func:`recruiter.store.together.update_together`), else just
before the commit. If the lease was lost, the transaction aborts with nothing
written (:class:`LostFence`). Where in the transaction the fence is does not
matter: a successor's :meth:`~recruiter.store.leases.Lease.acquire` that wrote
the lease document after the transaction began makes the fence a write conflict.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from pymongo import WriteConcern
from pymongo.errors import PyMongoError

from recruiter.store.layout import Collections


class LostFence(Exception):
    """The lease behind a fenced transaction is no longer held; nothing was written."""


def is_conflict(exc: PyMongoError) -> bool:
    """Whether ``exc`` aborted a transaction that met a concurrent write (it wrote nothing;
    running it again may succeed)."""
    return exc.has_error_label("TransientTransactionError")


@contextlib.asynccontextmanager
async def fenced_transaction(db: Any, lease: Any, *, deferred: bool = False) -> AsyncIterator[Collections]:
    """A transaction fenced by ``lease`` (:meth:`recruiter.store.leases.Lease.fence`): its first
    write, or with ``deferred`` the first operation of a combined command (the yielded
    collections' ``fence``), else a write just before the commit.

    Yields the collections to use inside it: every operation on them runs in the
    transaction (the session is bound to the task). It commits with a majority
    write concern when the block ends; raises :class:`LostFence`, with nothing
    written, if the lease is no longer ours. Costs two round trips: the fence
    write and the commit (one, the commit, when a combined command carried the fence).
    Runs on the lease's session, so that a successor can abort it (see :mod:`recruiter.store.leases`).

    The yielded collections carry the server's default write concern: PyMongo
    (4.20) sends a collection's own write concern with operations that use a
    bound session inside a transaction, which the server refuses.
    """
    session = lease.session
    if session is None:
        raise LostFence()
    fence = lease.pending_fence() if deferred else None
    inside = Collections.of(db.with_options(write_concern=WriteConcern()), in_transaction=True, fence=fence)
    try:
        async with await session.start_transaction(write_concern=WriteConcern("majority")):
            if fence is None and not await lease.fence(session):
                raise LostFence()  # aborts the (empty) transaction
            async with session.bind(end_session=False):
                yield inside
            if fence is not None and not fence.sent and not await lease.fence(session):
                raise LostFence()  # aborts what the block wrote
    except LostFence:
        await lease.forget()
        raise

