"""Leadership: holding a lease, and running fenced units of work under it.

The recruiter and the cleaner are both single leaders: each waits for its
lease (:class:`recruiter.store.leases.Lease`), runs units of work while it
holds it (a recruiter round, a cleaner pass), and stands by again when it is
lost. :class:`Leadership` is that loop, written once.

Invariants:

1. Every unit writes inside :meth:`Leadership.fenced`: a transaction whose
   first write fences it with the lease, so a leader that lost its lease
   commits nothing (:class:`LostLease`, raised with nothing written).
2. The lease is renewed once a third of it has passed (:meth:`Leadership.keep`),
   so two renewals can fail before it expires; a renewal that finds it taken
   ends the leadership (:class:`LostLease`) and the process stands by again.
3. Errors are handled one way for both roles: a database error in a unit is
   survived (every unit can be repeated); a transaction conflict is retried
   after ``backoff_from_s``, any other error after ``backoff_to_s``, with a
   warning; a lost lease ends the leadership. This is the recruiter's
   behaviour, the stricter one: the cleaner used to re-acquire its lease
   before every pass and log every database error as ``clean.failed``; it now
   renews, checks the lease before each pass and tells conflicts
   (``clean.conflict``, debug) from failures as the recruiter does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import structlog
from bson import ObjectId

from recruiter.domain.clock import Clock
from recruiter.domain.events import LeaseLost, LeaseWon
from recruiter.processes.events import Bus
from recruiter.store.connection import StoreError, first_line
from recruiter.store.layout import AsyncDb, Collections
from recruiter.store.leases import Lease
from recruiter.store.transactions import LostFence, fenced_transaction, is_conflict

log = structlog.get_logger("recruiter.leadership")

T = TypeVar("T")

# A fault hook: called at named points of a unit; tests inject one that raises there.
Fault = Callable[[str], None]


def no_fault(point: str) -> None:
    """The default fault hook: does nothing. Tests inject one that raises at a named point."""


class LostLease(Exception):
    """The lease expired or was taken over during a unit of work; nothing of it was written."""


@dataclass(frozen=True)
class Pace:
    """How a leader paces its units: after a busy unit at once; after an idle one, a
    backoff from ``backoff_from_s`` doubling to ``backoff_to_s``; after an error, as invariant 3 says."""

    backoff_from_s: float
    backoff_to_s: float


class Leadership:
    """One role's lease (``recruiter``, ``cleaner``) and the loop that leads under it."""

    def __init__(self, db: AsyncDb, role: str, owner: str, clock: Clock, ttl_s: float, *,
                 bus: Bus | None = None) -> None:
        self.db = db
        self.bus = bus or Bus.logging()
        self.role = role
        self.owner = owner
        self.clock = clock
        self.ttl_s = ttl_s
        self.lease = Lease(Collections.of(db).metadata, role, owner, timedelta(seconds=ttl_s), clock)
        self.stopping = asyncio.Event()
        self.task: asyncio.Task[object] | None = None  # the task running the process, once it runs

    def stop(self) -> None:
        self.stopping.set()

    def force(self) -> None:
        """Stop now: cancel the task running the process (a second signal; a leader holds no job,
        and its lease simply expires)."""
        self.stop()
        if self.task is not None:
            self.task.cancel()

    async def sleep(self, seconds: float) -> bool:
        """Wait ``seconds``, or less if asked to stop; returns False (nothing woke it)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), timeout=seconds)
        return False

    def check(self) -> None:
        """Raise :class:`LostLease` unless the lease is held (by this process's clock)."""
        if not self.lease.held:
            raise LostLease()

    async def keep(self) -> None:
        """Renew once a third of the lease has passed (invariant 2)."""
        self.check()
        expires_at = self.lease.expires_at
        margin = timedelta(seconds=self.ttl_s * 2 / 3)
        due = expires_at is None or self.clock.now() >= expires_at - margin
        if due and not await self.lease.renew():
            raise LostLease()

    async def keeping(self, work: Coroutine[object, object, T]) -> T:
        """Run ``work`` (reads, outside any transaction) renewing the lease every third of
        its time, so a long read (a new leader's first) never outlives it."""
        keeper = asyncio.create_task(self._renew_every_third())
        try:
            return await work
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper

    async def _renew_every_third(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            try:
                await self.keep()
            except (LostLease, StoreError) as exc:  # the writes check the lease again
                log.debug("lease.not_renewed", role=self.role, error=first_line(exc))
                return

    @contextlib.asynccontextmanager
    async def fenced(self, *, deferred: bool = False) -> AsyncIterator[Collections]:
        """The collections of a transaction fenced by the lease (invariant 1); with ``deferred``,
        the fence rides in the transaction's first combined command, or is written before the
        commit (:func:`recruiter.store.transactions.fenced_transaction`)."""
        try:
            async with fenced_transaction(self.db, self.lease, deferred=deferred) as inside:
                yield inside
        except LostFence:
            raise LostLease() from None

    async def run(self, lead: Callable[[], Awaitable[None]], standby_poll_s: float) -> None:
        """Wait for the lease, ``lead`` while holding it, stand by again when it is lost;
        release it when asked to stop."""
        while not self.stopping.is_set():
            try:
                acquired = await self.lease.acquire()
            except StoreError as exc:
                log.warning("lease.unavailable", role=self.role, error=first_line(exc))
                acquired = False
            if not acquired:
                await self.sleep(standby_poll_s)
                continue
            epoch = self.lease.epoch
            self.bus.emit(LeaseWon(self.role, epoch, self.owner))  # logs leader.elected
            try:
                await lead()
            except LostLease:
                self.bus.emit(LeaseLost(self.role, epoch))  # logs leader.lost
        await self.lease.release()

    async def units(self, unit: Callable[[], Awaitable[bool]], pace: Pace, *, name: str,
                    wait: Callable[[float], Awaitable[bool]] | None = None) -> None:
        """Run ``unit`` (returns whether it was busy) while the lease holds (invariant 3).

        Busy, units run back to back. Idle, ``wait(backoff)`` (a doorbell: returns
        whether something woke it) or a plain sleep; the backoff doubles while idle.
        Raises :class:`LostLease` when the lease is lost."""
        backoff = pace.backoff_from_s
        while not self.stopping.is_set():
            try:
                await self.keep()
                busy = await unit()
            except StoreError as exc:
                if is_conflict(exc):
                    # A worker wrote to a document this unit was changing (its outcome, or
                    # leaving; heartbeats go elsewhere): the unit wrote nothing; run it again soon.
                    log.debug(f"{name}.conflict", error=first_line(exc))
                    await self.sleep(pace.backoff_from_s)
                    continue
                log.warning(f"{name}.failed", error=first_line(exc))
                await self.sleep(pace.backoff_to_s)
                continue
            if busy:
                backoff = pace.backoff_from_s
                continue
            if self.stopping.is_set():
                break
            if await (wait or self.sleep)(backoff):
                backoff = pace.backoff_from_s
            else:
                backoff = min(backoff * 2, pace.backoff_to_s)


def leader_owner() -> str:
    """The owner a leader writes into its lease: host, pid and a fresh id."""
    return f"{socket.gethostname()}:{os.getpid()}:{ObjectId()}"


class LeaderProcess:
    """The process surface (:mod:`recruiter.processes.runtime`) the recruiter and the cleaner share.

    Both run only under their :class:`Leadership`; every unit is a transaction, so
    there is never work to finish before exiting, and they always exit 0.
    """

    exit_code: int = 0
    leadership: Leadership

    @property
    def lease(self) -> Lease:
        return self.leadership.lease

    def stop(self) -> None:
        self.leadership.stop()

    def force(self) -> None:
        """A second signal: stop at once (:meth:`Leadership.force`)."""
        self.leadership.force()

    def busy(self) -> bool:
        """Whether it holds work that must finish before it exits: never (units are transactions)."""
        return False
