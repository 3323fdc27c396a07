"""Leader leases in ``metadata``, each with an epoch that fences stale leaders.

A lease document is ``{_id: name, owner, epoch, expires_at, renewed_at,
session}``. The owner renews it well before ``expires_at``; anyone may take it
once it has expired, and taking it increments ``epoch``. Times come from the
process clock, which follows the server's clock
(:class:`recruiter.store.clock.ServerClock`), so machines with skewed clocks agree on
when a lease expires.

The holder's writes run in transactions fenced by the lease (:meth:`Lease.fence`)
on one session, whose id is kept in the lease document. A holder that died (or
froze) inside such a transaction would keep the lease document locked until the
server gives up on the transaction (a minute on MongoDB, never on SecantusDB
0.7.0b3), so whoever takes an expired lease first kills that session: its open
transaction is aborted and can never commit.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pymongo
from pymongo import ReturnDocument
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import DuplicateKeyError, PyMongoError

from recruiter.domain.clock import Clock
from recruiter.store.layout import AsyncColl, Document, PendingFence


@dataclass
class Lease:
    collection: AsyncColl  # metadata
    name: str
    owner: str
    ttl: timedelta
    clock: Clock
    epoch: int | None = None
    expires_at: datetime | None = None
    session: AsyncClientSession | None = None  # the session of this holder's fenced transactions

    def _new_session(self) -> AsyncClientSession:
        if self.session is not None:
            return self.session
        # Not causally consistent: everything on this session goes to the primary (its reads see its
        # writes anyway) and its transactions commit with a majority. So the first command of a
        # transaction carries no readConcern, which the embedded server refuses on a client
        # bulkWrite (the round's fence, locks and assignment, recruiter.store.together).
        self.session = self.collection.database.client.start_session(causal_consistency=False)
        return self.session

    async def _end_session(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            with contextlib.suppress(PyMongoError):
                await session.end_session()

    async def _kill_expired_holder(self, now: datetime) -> None:
        """Abort the transactions of an expired holder (best effort; see the module doc)."""
        doc = await self.collection.find_one({"_id": self.name}, {"owner": 1, "expires_at": 1, "session": 1})
        if not doc or doc.get("owner") == self.owner or not doc.get("session"):
            return
        expires_at = doc.get("expires_at")
        if isinstance(expires_at, datetime) and expires_at > now:
            return
        with contextlib.suppress(PyMongoError):
            await self.collection.database.client.admin.command("killSessions", [doc["session"]])

    @property
    def held(self) -> bool:
        return self.epoch is not None and self.expires_at is not None and self.clock.now() < self.expires_at

    async def acquire(self) -> bool:
        """Take or renew the lease. Returns whether this process holds it now."""
        now = self.clock.now()
        expires_at = now + self.ttl
        if self.epoch is None:
            await self._kill_expired_holder(now)
        session_id = self._new_session().session_id
        try:
            # The lease document is untrusted too: an expiry that is not a date is no
            # expiry, and an epoch that is not a whole number counts as 0.
            doc = await self.collection.find_one_and_update(
                {"_id": self.name, "$or": [{"owner": self.owner}, {"expires_at": {"$lte": now}},
                                           {"expires_at": {"$not": {"$type": "date"}}}]},
                [{"$set": {"_epoch": {"$cond": [{"$in": [{"$type": "$epoch"}, ["int", "long"]]},
                                                {"$max": ["$epoch", 0]}, 0]}}},
                 {"$set": {
                    "epoch": {"$cond": [
                        {"$and": [{"$eq": ["$owner", self.owner]}, {"$gt": ["$_epoch", 0]}]},
                        "$_epoch",
                        {"$add": ["$_epoch", 1]},
                    ]},
                    "owner": self.owner,
                    "expires_at": expires_at,
                    "renewed_at": now,
                    "session": {"$literal": session_id},
                 }},
                 {"$unset": "_epoch"}],
                upsert=True,
                return_document=ReturnDocument.AFTER,
            )
        except DuplicateKeyError:
            doc = None  # someone else holds an unexpired lease
        if doc is None or doc.get("owner") != self.owner:
            self.epoch = None
            self.expires_at = None
            await self._end_session()
            return False
        self.epoch = doc["epoch"]
        self.expires_at = expires_at
        return True

    async def renew(self) -> bool:
        """Extend the lease only if it is still ours with the same epoch."""
        if self.epoch is None:
            return False
        now = self.clock.now()
        expires_at = now + self.ttl
        result = await self.collection.update_one(
            {"_id": self.name, "owner": self.owner, "epoch": self.epoch},
            {"$set": {"expires_at": expires_at, "renewed_at": now}},
        )
        if result.matched_count != 1:
            self.epoch = None
            self.expires_at = None
            await self._end_session()
            return False
        self.expires_at = expires_at
        return True

    async def fence(self, session: AsyncClientSession) -> bool:
        """Inside ``session``'s transaction, write to the lease document if it is still ours.

        The write makes the transaction conflict with a successor's
        :meth:`acquire`: either the transaction commits before the lease changes
        hands, or it fails. A stale holder's transaction therefore writes nothing.
        """
        if self.epoch is None:
            return False
        result = await self.collection.update_one(*self._fence_write(), session=session)
        return bool(result.matched_count == 1)

    def pending_fence(self) -> PendingFence | None:
        """The fence write, to be carried by a command of the transaction (:func:`fenced_transaction`
        with ``deferred``); None when no lease is held."""
        return None if self.epoch is None else PendingFence(self.collection, *self._fence_write())

    def _fence_write(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return ({"_id": self.name, "owner": self.owner, "epoch": self.epoch, "expires_at": {"$gt": self.clock.now()}},
                {"$inc": {"fenced_rounds": 1}})

    async def forget(self) -> None:
        """Drop a lease found lost (a fence that failed), with its session: a new one is used if it is won again."""
        self.epoch = None
        self.expires_at = None
        await self._end_session()

    async def release(self, timeout_s: float = 2.0) -> None:
        """Let a standby take over at once. Best effort: if the server does not
        answer within ``timeout_s``, the lease simply expires."""
        if self.epoch is None:
            return
        epoch, self.epoch, self.expires_at = self.epoch, None, None
        with contextlib.suppress(PyMongoError), pymongo.timeout(timeout_s):
            await self.collection.update_one(
                {"_id": self.name, "owner": self.owner, "epoch": epoch},
                {"$set": {"expires_at": self.clock.now()}},
            )
            await self._end_session()

    async def holder(self) -> Document | None:
        return await self.collection.find_one({"_id": self.name})
