"""Single-document updates whose caller retries them itself, sent as multi-document updates.

An ``update_one`` is a retryable write: the driver gives it a transaction number, and the
server keeps its reply so that a retry after a lost reply is answered, not applied again.
MongoDB keeps one such record per session, overwritten by the next write. The embedded
server keeps one per write for 30 minutes, up to 10 000, and goes through every one of them
on each retryable write, sorting them all once it holds 10 000. On it, once a server had taken
10 500 of them, one ``update_one`` cost 4.9 ms and the same update as ``update_many`` 0.55 ms
(500 of each, one after the other: docs/benchmarks.md, "A server up for a while"). A worker
that wrote each outcome with ``update_one`` thus slowed the whole server down after
two minutes at 100 jobs/s.

An update whose filter names one document by ``_id`` touches at most that document however
it is sent. Sent as ``update_many``, it is not a retryable write: the driver does not retry
it, and no server keeps its reply. That is right only for the writes whose callers already
try again and find out what a try with a lost reply did, which :func:`update` and
:func:`update_model` are for:

- a job's outcome (:func:`recruiter.store.outcome_writes.record_outcome`): the worker writes it again
  until it lands, and a try that matches nothing is looked into by its lock token
  (:meth:`recruiter.processes.worker.entry.RosterEntries.record`);
- the started mark of a job handed out ahead (:func:`recruiter.store.outcome_writes.mark_started`): a
  failed try leaves the job unstarted and the slot reading its entry again.

A worker's heartbeat thread goes further: its whole client sends no retryable write
(:func:`recruiter.store.connection.heartbeat_client`), since a beat only ever sets fields the
next beat sets again.

Invariant: every filter given here holds ``_id`` with one value, so each update touches one
document at most, as the ``update_one`` it replaces would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo import UpdateMany
from pymongo.results import UpdateResult

from recruiter.store.layout import AsyncColl


def _one_document(query: Mapping[str, Any]) -> dict[str, Any]:
    """``query``, checked to name one document by ``_id`` (a value, not an operator)."""
    value = query.get("_id")
    if value is None or (isinstance(value, Mapping) and any(str(k).startswith("$") for k in value)):
        raise ValueError(f"an unrecorded update names its document by _id, not {value!r}")
    return dict(query)


async def update(collection: AsyncColl, query: Mapping[str, Any], change: Mapping[str, Any]) -> UpdateResult:
    """``update_one(query, change)``'s effect, as a write that is not retryable (see the module doc)."""
    return await collection.update_many(_one_document(query), change)


def update_model(query: Mapping[str, Any], change: Mapping[str, Any]) -> UpdateMany:
    """:func:`update` as a ``bulk_write`` request: a bulk that holds one is not retryable."""
    return UpdateMany(_one_document(query), change)
