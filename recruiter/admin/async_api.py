"""The read model for asyncio code: :class:`AsyncAdmin`, ``rec.admin`` on an :class:`~recruiter.AsyncRecruiter`.

Every method is the :class:`~recruiter.admin.Admin` method of the same name, run
in a thread (``asyncio.to_thread``) over a synchronous client of the same
database, so the event loop never waits on it and the two cannot drift apart:
one set of queries, two ways to call them. ``AsyncRecruiter.connect`` remembers
its URI, and ``rec.admin`` makes that synchronous client at first use (closed with
the recruiter); an ``AsyncRecruiter`` made from a client has no URI unless given
``uri=``, and its ``admin`` then raises :class:`~recruiter.store.ConnectionProblem`
in one line rather than guess one from the client. ``tests/unit/test_async_admin_parity.py``
checks that every public method of ``Admin`` has its awaitable counterpart here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from bson import ObjectId

from recruiter.admin import jobs as _jobs
from recruiter.admin import limits as _limits
from recruiter.admin import schedules as _schedules
from recruiter.admin import stats as _stats
from recruiter.admin import status as _status
from recruiter.admin import switches as _switches
from recruiter.admin import timeline as _timeline
from recruiter.admin import workers as _workers
from recruiter.admin.api import STALE_AFTER, Admin
from recruiter.domain.cancel import CancelResult
from recruiter.domain.clock import Clock
from recruiter.domain.following import JobView
from recruiter.domain.limits import Limit, Limits
from recruiter.domain.listing import EARLIEST, PageKey
from recruiter.domain.waiting import Explanation
from recruiter.domain.waiting_actions import ActionResult
from recruiter.store import Change, ConnectionProblem, Page, Target, sync_client, sync_db
from recruiter.store.connection import CommandListener


class AsyncAdmin:
    """:class:`~recruiter.admin.Admin` for asyncio code: the same methods, awaitable."""

    def __init__(self, admin: Admin) -> None:
        self.sync = admin

    @classmethod
    def over(cls, uri: str | None, database: str, clock: Clock | None,
             listeners: Sequence[CommandListener] = (), prefix: str = "") -> AsyncAdmin:
        """An ``AsyncAdmin`` over a new synchronous client of ``uri`` (which :meth:`close` closes)."""
        if uri is None:
            raise ConnectionProblem("AsyncRecruiter.admin needs the database's URI: make the recruiter with "
                                    "AsyncRecruiter.connect(uri), or pass uri= to AsyncRecruiter(...)")
        target = Target(uri, database, prefix)
        client = sync_client(target, app_name="recruiter-admin", event_listeners=list(listeners))
        return cls(Admin(sync_db(client, target), clock))

    async def now(self) -> datetime:
        """The server's time; see :meth:`Admin.now`."""
        return await asyncio.to_thread(self.sync.now)

    # -- the cluster ---------------------------------------------------------------------------

    async def status(self) -> _status.Status:
        """What runs: the leader, the workers, the leases, what is paused (``recruiter status``)."""
        return await asyncio.to_thread(self.sync.status)

    async def stats(self) -> _stats.Stats:
        """Depth, throughput, failures and latency; see :meth:`Admin.stats`."""
        return await asyncio.to_thread(self.sync.stats)

    async def history(self, range_name: str = _timeline.DEFAULT_RANGE, group: str | None = None) -> _timeline.History:
        """Jobs done, failed and their wait over time; see :meth:`Admin.history`."""
        return await asyncio.to_thread(self.sync.history, range_name, group)

    async def workers(self) -> list[_workers.WorkerView]:
        """Every worker slot, its heartbeat and what it runs (``recruiter workers list``)."""
        return await asyncio.to_thread(self.sync.workers)

    async def stop_workers(self, ids: Sequence[str] | None = None) -> list[str]:
        """Ask workers to stop gracefully; see :meth:`Admin.stop_workers`."""
        return await asyncio.to_thread(self.sync.stop_workers, ids)

    async def leases(self) -> list[_status.LeaseView]:
        """The leases (the leader's, the cleaner's) and who holds them."""
        return await asyncio.to_thread(self.sync.leases)

    # -- jobs ----------------------------------------------------------------------------------

    async def jobs(self, *, states: Sequence[str] = (), group: str | None = None, tenant: str | None = None,
                   class_name: str | None = None, why: str | None = None, tag: str | None = None,
                   since: datetime | None = None, until: datetime | None = None, limit: int = 50,
                   after: PageKey | None = None) -> Page:
        """A page of jobs, newest first; see :meth:`Admin.jobs`."""
        return await asyncio.to_thread(lambda: self.sync.jobs(
            states=states, group=group, tenant=tenant, class_name=class_name, why=why, tag=tag,
            since=since, until=until, limit=limit, after=after))

    async def job(self, job_id: ObjectId | str) -> JobView | None:
        """One job, waiting, running or archived (``recruiter jobs show``); None if there is none."""
        return await asyncio.to_thread(self.sync.job, job_id)

    async def explain(self, job_id: ObjectId | str) -> Explanation | None:
        """Why the job is not running; see :meth:`Admin.explain`."""
        return await asyncio.to_thread(self.sync.explain, job_id)

    async def retry(self, job_ids: Sequence[ObjectId | str]) -> _jobs.Retried:
        """Retry archived jobs by id; see :meth:`Admin.retry`."""
        return await asyncio.to_thread(self.sync.retry, job_ids)

    async def retry_archived(self, why: str, *, since: datetime = EARLIEST, group: str | None = None,
                             limit: int | None = None) -> _jobs.Retried:
        """Retry the jobs archived with ``why``; see :meth:`Admin.retry_archived`."""
        return await asyncio.to_thread(lambda: self.sync.retry_archived(why, since=since, group=group, limit=limit))

    async def cancel(self, job_ids: Sequence[ObjectId | str], reason: str | None = None) -> list[CancelResult]:
        """Cancel jobs by id; see :meth:`Admin.cancel`."""
        return await asyncio.to_thread(self.sync.cancel, job_ids, reason)

    async def retry_now(self, job_ids: Sequence[ObjectId | str]) -> list[ActionResult]:
        """End the backoff of waiting jobs; see :meth:`Admin.retry_now`."""
        return await asyncio.to_thread(self.sync.retry_now, job_ids)

    async def delete(self, job_ids: Sequence[ObjectId | str], reason: str | None = None) -> list[ActionResult]:
        """Delete waiting jobs; see :meth:`Admin.delete`."""
        return await asyncio.to_thread(self.sync.delete, job_ids, reason)

    # -- schedules -----------------------------------------------------------------------------

    async def schedules(self, *, only_stale: bool = False,
                        stale_after: timedelta = STALE_AFTER) -> _schedules.ScheduleListing:
        """Every periodic job; see :meth:`Admin.schedules`."""
        return await asyncio.to_thread(lambda: self.sync.schedules(only_stale=only_stale, stale_after=stale_after))

    async def schedule(self, name: str, *, stale_after: timedelta = STALE_AFTER) -> _schedules.ScheduleDetail | None:
        """One periodic job; see :meth:`Admin.schedule`."""
        return await asyncio.to_thread(lambda: self.sync.schedule(name, stale_after=stale_after))

    async def pause_schedule(self, name: str) -> Change:
        """Pause a periodic job; see :meth:`Admin.pause_schedule`."""
        return await asyncio.to_thread(self.sync.pause_schedule, name)

    async def resume_schedule(self, name: str) -> Change:
        """Resume a periodic job; see :meth:`Admin.resume_schedule`."""
        return await asyncio.to_thread(self.sync.resume_schedule, name)

    async def run_schedule_now(self, name: str) -> Change:
        """Run a periodic job now; see :meth:`Admin.run_schedule_now`."""
        return await asyncio.to_thread(self.sync.run_schedule_now, name)

    async def remove_schedule(self, name: str) -> Change:
        """Remove a periodic job; see :meth:`Admin.remove_schedule`."""
        return await asyncio.to_thread(self.sync.remove_schedule, name)

    # -- pause switches ------------------------------------------------------------------------

    async def paused(self) -> _status.PausedNames:
        """The paused groups and tenants; see :meth:`Admin.paused`."""
        return await asyncio.to_thread(self.sync.paused)

    async def pause(self, kind: str, names: Sequence[str], *, force: bool = False) -> _switches.Switched:
        """Pause groups or tenants; see :meth:`Admin.pause`."""
        return await asyncio.to_thread(lambda: self.sync.pause(kind, names, force=force))

    async def resume(self, kind: str, names: Sequence[str]) -> _switches.Switched:
        """Resume groups or tenants; see :meth:`Admin.resume`."""
        return await asyncio.to_thread(self.sync.resume, kind, names)

    # -- flow control --------------------------------------------------------------------------

    async def limits(self) -> _limits.LimitListing:
        """Every limit and what it holds now; see :meth:`Admin.limits`."""
        return await asyncio.to_thread(self.sync.limits)

    async def set_limit(self, group: str, *, tenant: str | None = None, rate: str | None = None,
                        burst: int | None = None, max_running: int | None = None, replace: bool = False
                        ) -> _limits.LimitSet:
        """Limit a group or a tenant; see :meth:`Admin.set_limit`."""
        return await asyncio.to_thread(lambda: self.sync.set_limit(group, tenant=tenant, rate=rate, burst=burst,
                                                                   max_running=max_running, replace=replace))

    async def clear_limit(self, group: str, *, tenant: str | None = None) -> bool:
        """Remove a limit; see :meth:`Admin.clear_limit`."""
        return await asyncio.to_thread(lambda: self.sync.clear_limit(group, tenant=tenant))

    async def declare_limits(self, limits: Mapping[str | tuple[str, str], Limit]) -> Limits:
        """Set exactly ``limits``, clearing every other; see :meth:`Admin.declare_limits`."""
        return await asyncio.to_thread(self.sync.declare_limits, limits)

    def close(self) -> None:
        """Close the synchronous client under it (the async recruiter's ``close`` does it)."""
        self.sync.db.client.close()
