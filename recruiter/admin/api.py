"""The read model as one object bound to a database: ``Admin(db)``, or ``rec.admin`` on a :class:`Recruiter`.

Invariant: every method reads or writes through the functions of this package,
judged on the server's clock (calibrated on first use from the database's client,
with one ``hello``), and returns frozen values; a front end (the CLI, a dashboard,
a test) holds no query of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from bson import ObjectId

from recruiter.admin import explain as _explain
from recruiter.admin import jobs as _jobs
from recruiter.admin import limits as _limits
from recruiter.admin import schedules as _schedules
from recruiter.admin import stats as _stats
from recruiter.admin import status as _status
from recruiter.admin import switches as _switches
from recruiter.admin import timeline as _timeline
from recruiter.admin import workers as _workers
from recruiter.domain.cancel import CancelResult, parse_job_id
from recruiter.domain.clock import Clock
from recruiter.domain.following import JobView
from recruiter.domain.limits import Limit, Limits
from recruiter.domain.listing import EARLIEST, JobFilter, PageKey, parse_states
from recruiter.domain.waiting import Explanation
from recruiter.domain.waiting_actions import ActionResult
from recruiter.store import Change, Page, ServerClock, SyncDb

STALE_AFTER = timedelta(hours=1)


class Admin:
    """What an operator reads and does, as Python calls (the same as the ``recruiter`` commands)."""

    def __init__(self, db: SyncDb, clock: Clock | None = None) -> None:
        self.db = db
        self._clock = clock

    def now(self) -> datetime:
        """The server's time (the clock given, or one calibrated on the server at first use)."""
        if self._clock is None:
            clock = ServerClock()
            # One reading: an operator's command judges ages in seconds, and its cost is bounded.
            clock.calibrate_sync(self.db.client, samples=1)
            self._clock = clock
        return self._clock.now()

    # -- the cluster ---------------------------------------------------------------------------

    def status(self) -> _status.Status:
        """Jobs waiting by status, archived by why, the workers, the leases, the paused names (``recruiter status``)."""
        return _status.status(self.db, self.now())

    def stats(self) -> _stats.Stats:
        """Depth per group and tenant, recent throughput, failures and latency, workers, leases
        (``recruiter stats``, :mod:`recruiter.admin.stats`)."""
        return _stats.stats(self.db, self.now())

    def history(self, range_name: str = _timeline.DEFAULT_RANGE, group: str | None = None) -> _timeline.History:
        """Jobs done, failed and their wait over time (``1h`` ... ``30d``), as the leader wrote them."""
        return _timeline.history(self.db, self.now(), range_name, group)

    def workers(self) -> list[_workers.WorkerView]:
        """Every worker slot: its groups, state, job, heartbeat and progress (``recruiter workers list``)."""
        return _workers.workers(self.db, self.now())

    def stop_workers(self, ids: Sequence[str] | None = None) -> list[str]:
        """Ask workers (None: every one) to stop gracefully; the slots asked."""
        return _workers.stop_workers(self.db, ids)

    def leases(self) -> list[_status.LeaseView]:
        """The recruiter's and the cleaner's leases: owner, epoch, held, expiry."""
        return _status.leases(self.db, self.now())

    # -- jobs ----------------------------------------------------------------------------------

    def jobs(self, *, states: Sequence[str] = (), group: str | None = None, tenant: str | None = None,
             class_name: str | None = None, why: str | None = None, tag: str | None = None,
             since: datetime | None = None, until: datetime | None = None, limit: int = 50,
             after: PageKey | None = None) -> Page:
        """A page of jobs, newest first (as ``recruiter jobs list``); ``page.next`` is the ``after`` of the next."""
        f = JobFilter.build(parse_states(states), why=why, class_name=class_name, since=since, until=until,
                            group=group, tenant=tenant, tag=tag)
        return _jobs.list_jobs(self.db, f, after, limit, self.now())

    def job(self, job_id: ObjectId | str) -> JobView | None:
        """One job, waiting, running or archived, as ``recruiter jobs show`` prints it; None if there is none."""
        return _jobs.show_job(self.db, _id(job_id), self.now())

    def explain(self, job_id: ObjectId | str) -> Explanation | None:
        """Why the job is not running: a code, one line and its details (``recruiter jobs explain``,
        :mod:`recruiter.admin.explain`); None if there is no such job."""
        return _explain.explain_job(self.db, _id(job_id), self.now())

    def retry(self, job_ids: Sequence[ObjectId | str]) -> _jobs.Retried:
        """Retry archived jobs by id: all, or none (:class:`~recruiter.admin.jobs.RetryRefusedAll`). A job
        retried before is not copied again: its copy is in the result's ``already``."""
        return _jobs.retry_jobs(self.db, [_id(i) for i in job_ids], self.now())

    def retry_archived(self, why: str, *, since: datetime = EARLIEST, group: str | None = None,
                       limit: int | None = None) -> _jobs.Retried:
        """Retry the jobs archived with ``why`` not retried yet (``recruiter jobs retry --why``)."""
        return _jobs.retry_archived(self.db, why, since, group, limit, self.now())

    def cancel(self, job_ids: Sequence[ObjectId | str], reason: str | None = None) -> list[CancelResult]:
        """Cancel jobs by id: one :class:`~recruiter.CancelResult` each (``recruiter jobs cancel``)."""
        return _jobs.cancel_jobs(self.db, [_id(i) for i in job_ids], self.now(), reason)

    def retry_now(self, job_ids: Sequence[ObjectId | str]) -> list[ActionResult]:
        """End the backoff of jobs waiting for their next attempt: due now (``recruiter jobs retry-now``)."""
        return _jobs.retry_now_jobs(self.db, [_id(i) for i in job_ids], self.now())

    def delete(self, job_ids: Sequence[ObjectId | str], reason: str | None = None) -> list[ActionResult]:
        """Delete waiting jobs: archived as ``deleted``; one a worker holds is refused (``recruiter jobs delete``)."""
        return _jobs.delete_jobs(self.db, [_id(i) for i in job_ids], self.now(), reason)

    # -- schedules -----------------------------------------------------------------------------

    def schedules(self, *, only_stale: bool = False, stale_after: timedelta = STALE_AFTER) -> (
            _schedules.ScheduleListing):
        """Every periodic job, the jobs of its last fires, the stale ones (``recruiter schedules list``)."""
        return _schedules.schedules(self.db, self.now(), stale_after, only_stale=only_stale)

    def schedule(self, name: str, *, stale_after: timedelta = STALE_AFTER) -> _schedules.ScheduleDetail | None:
        """One periodic job in detail, or None (``recruiter schedules show``)."""
        return _schedules.schedule(self.db, name, self.now(), stale_after)

    def pause_schedule(self, name: str) -> Change:
        """Stop firing ``name`` until resumed: ``DONE``, ``ALREADY`` or ``UNKNOWN`` (nothing changed)."""
        return _schedules.pause_schedule(self.db, name)

    def resume_schedule(self, name: str) -> Change:
        """Fire ``name`` again from its next time."""
        return _schedules.resume_schedule(self.db, name)

    def run_schedule_now(self, name: str) -> Change:
        """One extra occurrence of ``name`` at the next round, even if paused; a pending one is not doubled."""
        return _schedules.run_now(self.db, name, self.now())

    def remove_schedule(self, name: str) -> Change:
        """Delete ``name``; its jobs already enqueued stay (``recruiter schedules remove``)."""
        return _schedules.remove_schedule(self.db, name)

    # -- pause switches ------------------------------------------------------------------------

    def paused(self) -> _status.PausedNames:
        """The paused groups and tenants (``recruiter groups list``)."""
        return _switches.paused(self.db)

    def pause(self, kind: str, names: Sequence[str], *, force: bool = False) -> _switches.Switched:
        """Pause groups or tenants (``kind``: group | tenant)."""
        return _switches.pause(self.db, kind, names, force=force)

    def resume(self, kind: str, names: Sequence[str]) -> _switches.Switched:
        """Resume paused groups or tenants (``kind``: group | tenant); names not paused are listed, not written."""
        return _switches.resume(self.db, kind, names)

    # -- flow control --------------------------------------------------------------------------

    def limits(self) -> _limits.LimitListing:
        """Every limit and what it holds now (``recruiter limits list``)."""
        return _limits.listing(self.db, self.now())

    def set_limit(self, group: str, *, tenant: str | None = None, rate: str | None = None,
                  burst: int | None = None, max_running: int | None = None, replace: bool = False
                  ) -> _limits.LimitSet:
        """Limit ``group`` (or ``tenant`` within it): ``rate`` such as ``"50/s"`` (with ``burst``
        more at once), ``max_running`` jobs at once. The fields not given keep their values
        (``replace``: the limit is exactly what is given); the result says what it replaced."""
        return _limits.set_fields(self.db, group, tenant, rate=rate, burst=burst, max_running=max_running,
                                  replace=replace, now=self.now())

    def clear_limit(self, group: str, *, tenant: str | None = None) -> bool:
        """Remove the limit of ``group`` (or ``tenant`` within it); whether there was one."""
        return _limits.clear(self.db, group, tenant)

    def declare_limits(self, limits: Mapping[str | tuple[str, str], Limit]) -> Limits:
        """Set exactly ``limits`` ({group or (group, tenant): Limit}), clearing every other:
        limits kept in your code, versioned with your deployment."""
        return _limits.declare(self.db, limits)


def _id(job_id: ObjectId | str) -> ObjectId:
    return job_id if isinstance(job_id, ObjectId) else parse_job_id(job_id)
