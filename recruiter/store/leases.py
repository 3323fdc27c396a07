"""Leader leases in ``metadata``, each with an epoch that fences stale leaders.

A lease document is ``{_id: name, owner, epoch, expires_at, renewed_at,
session, release}`` (``release``: the holder's, :mod:`recruiter.domain.versions`).
The owner renews it well before ``expires_at``; anyone may take it
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

A lease document is untrusted like any other: an expiry that is not a date is no
expiry, and one further ahead than any holder of this code writes (:data:`MAX_EXPIRY_AHEAD`:
the longest TTL, :data:`MAX_TTL`, plus the clock allowance of
:data:`recruiter.domain.clock.MAX_AHEAD`) is taken as expired, with a warning naming the
lease and its expiry, so a ``datetime(9999, 12, 31)`` left by a hand edit or a host whose
clock is years off does not keep every process standing by for ever. Taking it over is the
same conditional write as any takeover: the epoch still increases, and one standby wins.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pymongo
import structlog
from pymongo import ReturnDocument
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import DuplicateKeyError, PyMongoError

from recruiter.domain import versions
from recruiter.domain.clock import MAX_AHEAD, Clock, too_far_ahead
from recruiter.store.layout import AsyncColl, Document, PendingFence

log = structlog.get_logger("recruiter.store")

# The longest time a lease is taken for (a Lease refuses a longer ttl): a standby takes over this
# long after its holder died, which no deployment wants to be longer (the default is 10 s).
MAX_TTL = timedelta(days=1)
# The furthest ahead of a reader's clock a holder of this code can have set a lease's expiry: its
# ttl at most, plus the allowance for clocks (MAX_AHEAD). Further ahead, the expiry is not believed.
MAX_EXPIRY_AHEAD = MAX_TTL + MAX_AHEAD


def expiry_ahead(expires_at: object, now: datetime) -> bool:
    """Whether a stored lease expiry is a date further ahead of ``now`` than any holder writes
    (:data:`MAX_EXPIRY_AHEAD`): such a lease is taken as expired (see the module doc)."""
    return isinstance(expires_at, datetime) and too_far_ahead(expires_at, now, MAX_EXPIRY_AHEAD)


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

    def __post_init__(self) -> None:
        if self.ttl > MAX_TTL:
            raise ValueError(f"a lease ttl of {self.ttl} is longer than the longest allowed, {MAX_TTL}")

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

    async def _kill_expired_holder(self, now: datetime) -> Document | None:
        """Abort the transactions of an expired holder (best effort; see the module doc). Returns the
        lease document read if its expiry is too far ahead to be believed (:func:`expiry_ahead`)."""
        doc = await self.collection.find_one({"_id": self.name}, {"owner": 1, "epoch": 1, "expires_at": 1,
                                                                  "session": 1})
        if not doc or doc.get("owner") == self.owner:
            return None
        expires_at = doc.get("expires_at")
        ahead = expiry_ahead(expires_at, now)
        if doc.get("session") and not (isinstance(expires_at, datetime) and expires_at > now and not ahead):
            with contextlib.suppress(PyMongoError):
                await self.collection.database.client.admin.command("killSessions", [doc["session"]])
        return doc if ahead else None

    @property
    def held(self) -> bool:
        return self.epoch is not None and self.expires_at is not None and self.clock.now() < self.expires_at

    async def acquire(self) -> bool:
        """Take or renew the lease. Returns whether this process holds it now."""
        now = self.clock.now()
        expires_at = now + self.ttl
        ahead = await self._kill_expired_holder(now) if self.epoch is None else None
        session_id = self._new_session().session_id
        try:
            # The lease document is untrusted too: an expiry that is not a date is no expiry,
            # one too far ahead to be believed has passed (MAX_EXPIRY_AHEAD), and an epoch
            # that is not a whole number counts as 0.
            doc = await self.collection.find_one_and_update(
                {"_id": self.name, "$or": [{"owner": self.owner}, {"expires_at": {"$lte": now}},
                                           {"expires_at": {"$not": {"$type": "date"}}},
                                           {"expires_at": {"$gt": now + MAX_EXPIRY_AHEAD}}]},
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
                    # This holder's release; an older holder taking over leaves it: it names its owner.
                    versions.FIELD: {"$literal": {**versions.record(), "owner": self.owner}},
                    # The fence $incs it at every round: a value that is not a number (a hand edit)
                    # would fail every fence, so it starts again from 0.
                    "fenced_rounds": {"$cond": [{"$in": [{"$type": "$fenced_rounds"}, ["int", "long", "double"]]},
                                                "$fenced_rounds", 0]},
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
        if ahead is not None:
            log.warning("lease.malformed", lease=self.name, expires_at=str(ahead.get("expires_at")),
                        owner=str(ahead.get("owner"))[:100], epoch=self.epoch,
                        reason=f"its expiry is more than {MAX_EXPIRY_AHEAD} ahead of this clock ({now.isoformat()}), "
                               "later than any holder sets it",
                        detail="taken as expired, and taken over")
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
