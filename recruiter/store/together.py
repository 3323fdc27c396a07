"""Several updates of different collections sent as one command (MongoDB's ``bulkWrite``, 8.0+).

Inside a transaction, a round's lock of its jobs (``scheduled``) and its assignment
(``roster``) do not depend on each other's result when the round has read every job it
locks: they can travel as one command, one round trip instead of two. The transaction
makes them one change whatever the transport: the caller checks the counts and, when
one is short, raises so the transaction aborts.

The command may also carry the transaction's fence (:mod:`recruiter.store.transactions`),
so a round that hands out jobs and applies nothing else writes in two round trips: this
command and the commit.

Servers before MongoDB 8.0 have no such command; the driver says so before sending
anything (:class:`pymongo.errors.InvalidOperation`), so the transaction is untouched and
the caller sends the statements one by one.
"""

from __future__ import annotations

from collections.abc import Sequence

from pymongo import UpdateMany, UpdateOne
from pymongo.errors import InvalidOperation

from recruiter.domain.records import Query
from recruiter.store.layout import AsyncColl, PendingFence
from recruiter.store.transactions import LostFence


async def update_together(statements: Sequence[tuple[AsyncColl, Query, list[Query]]], *,
                          fence: PendingFence | None = None) -> list[int] | None:
    """Run each ``(collection, filter, pipeline)`` as an ``update_many``, in order, as ONE command
    on the collections' client (in the task's bound session: the caller's transaction), after the
    transaction's ``fence`` if it is not sent yet (:mod:`recruiter.store.transactions`; raises
    :class:`LostFence` when it finds the lease no longer ours). Returns how many documents each
    statement modified, or None, having sent nothing, where the server has no such command."""
    if not statements:
        return []
    client = statements[0][0].database.client
    pending = fence if fence is not None and not fence.sent else None
    models: list[UpdateOne | UpdateMany] = [] if pending is None else [
        UpdateOne(pending.filter, pending.update, namespace=_namespace(pending.collection))]
    models += [UpdateMany(filter_, pipeline, namespace=_namespace(coll)) for coll, filter_, pipeline in statements]
    try:
        result = await client.bulk_write(models, ordered=True, verbose_results=True)
    except InvalidOperation as exc:
        if "8.0" not in str(exc):
            raise
        return None
    updates = result.update_results
    if pending is not None:
        pending.sent = True
        if 0 not in updates or updates[0].matched_count != 1:  # the lease is not ours: abort what was written
            raise LostFence()
    first = 0 if pending is None else 1
    return [int(updates[i].modified_count) if i in updates else 0 for i in range(first, len(models))]


def _namespace(coll: AsyncColl) -> str:
    return f"{coll.database.name}.{coll.name}"
