"""Collection names, and the collections of one database as one value.

Invariant: code names a collection only through these constants or a
:class:`Collections` value, so a transaction's collections can be passed as an
argument and nothing writes outside the transaction it was handed. A database handle
made by :mod:`recruiter.store.names` gives each constant the deployment's collection
prefix, so the code names them the same way with a prefix or without.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymongo import AsyncMongoClient, MongoClient
from pymongo.asynchronous.client_session import AsyncClientSession as AsyncClientSession
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.synchronous.client_session import ClientSession as ClientSession
from pymongo.synchronous.collection import Collection
from pymongo.synchronous.database import Database

# The driver's handles, as every signature names them. Documents come back as plain
# dicts; recruiter.domain.documents checks them before recruiter.domain.records types them.
Document = dict[str, Any]
AsyncClient = AsyncMongoClient[Document]
AsyncDb = AsyncDatabase[Document]
AsyncColl = AsyncCollection[Document]
SyncClient = MongoClient[Document]
SyncDb = Database[Document]
SyncColl = Collection[Document]
SCHEDULED = "scheduled"
ARCHIVED = "archived"
ROSTER = "roster"
HEARTBEATS = "heartbeats"
METADATA = "metadata"
UNIQUE_KEYS = "unique_keys"  # key reservations of unique jobs with a period or forever (domain/unique.py)
SCHEDULES = "schedules"  # periodic jobs, one document per schedule (domain/schedules.py)
TIMELINE = "timeline"  # the history over time, per group and minute or hour (domain/timeline.py)
AUDIT = "audit"  # the dashboard's actions (store/audit.py)
START_GATES = "start_gates"  # the start tokens of rate-limited jobs, one document per group (store/start_gates.py)
EDGES = "dependency_edges"  # a large fan-in's dependencies, one document per edge (domain/edges.py)
# Every collection recruiter names: with a collection prefix, these (and only these) get it
# (recruiter.store.names).
NAMES = frozenset({SCHEDULED, ARCHIVED, ROSTER, HEARTBEATS, METADATA, UNIQUE_KEYS, SCHEDULES, TIMELINE, AUDIT,
                   START_GATES, EDGES})

@dataclass(frozen=True)
class Collections:
    """The collections of one recruiter database, async handles (the processes' loops)."""

    scheduled: AsyncColl
    archived: AsyncColl
    roster: AsyncColl
    metadata: AsyncColl
    heartbeats: AsyncColl
    edges: AsyncColl
    # Handed out by recruiter.store.transactions.fenced_transaction: every operation on them runs
    # in that transaction, so several writes may go as one command and abort together.
    in_transaction: bool = False
    # That transaction's fence, when it is left to the first command that carries several writes.
    fence: PendingFence | None = None

    @classmethod
    def of(cls, db: AsyncDb, *, in_transaction: bool = False, fence: PendingFence | None = None) -> Collections:
        return cls(db[SCHEDULED], db[ARCHIVED], db[ROSTER], db[METADATA], db[HEARTBEATS], db[EDGES], in_transaction,
                   fence)


@dataclass
class PendingFence:
    """A lease's fence write not sent yet (:mod:`recruiter.store.transactions`): the filter that
    matches the lease document only while it is still ours, and the update; ``sent`` once a
    command carried it (and found the lease ours)."""

    collection: AsyncColl
    filter: dict[str, Any]
    update: dict[str, Any]
    sent: bool = False


@dataclass(frozen=True)
class SyncCollections:
    """The same collections, sync handles (the producer, the CLI, the heartbeat thread)."""

    scheduled: SyncColl
    archived: SyncColl
    roster: SyncColl
    metadata: SyncColl
    heartbeats: SyncColl
    edges: SyncColl

    @classmethod
    def of(cls, db: SyncDb) -> SyncCollections:
        return cls(db[SCHEDULED], db[ARCHIVED], db[ROSTER], db[METADATA], db[HEARTBEATS], db[EDGES])
