"""The read model and the operator's use cases, below every front end.

The CLI, the Python API (``rec.admin``, or :class:`Admin` on any database) and
the tests call these functions; each reads and writes through
:mod:`recruiter.store`'s indexed functions and returns frozen values
(dataclasses of plain values and domain views), so a front end only parses
what it is given and renders what it gets back. See
``docs/operations/read-model-and-events.md``.

Layering: below the producer and the processes (the producer's ``Recruiter``
offers it as ``rec.admin``, the asyncio one as an :class:`AsyncAdmin`), above the store.
``__all__`` is the whole read model: ``Admin`` and every value its methods return
(the API reference renders each; ``tests/unit/test_api_reference.py`` checks it).
"""

from recruiter.admin.api import Admin
from recruiter.admin.async_api import AsyncAdmin
from recruiter.admin.jobs import Retried, RetriedJob, RetryRefusedAll
from recruiter.admin.limits import LimitListing, LimitSet, LimitView
from recruiter.admin.overview import Overview, OverviewQuery, filtered, overview_of
from recruiter.admin.schedules import ScheduleDetail, ScheduleListing
from recruiter.admin.stats import Depth, GroupStats, Stats, TenantStats, Window, WorkerFigures
from recruiter.admin.status import LeaseView, PausedNames, Status, WorkerCounts
from recruiter.admin.switches import Switched, UnusedNames
from recruiter.admin.timeline import History
from recruiter.admin.workers import ProgressView, WorkerView
from recruiter.domain.following import JobView
from recruiter.domain.limits import Limits
from recruiter.domain.refused import Refused
from recruiter.domain.waiting import Explanation, Waiting
from recruiter.domain.waiting_actions import ActionResult
from recruiter.store import Change, Page

__all__ = [
    "ActionResult",
    "Admin",
    "AsyncAdmin",
    "Change",
    "Depth",
    "Explanation",
    "GroupStats",
    "History",
    "JobView",
    "LeaseView",
    "LimitListing",
    "LimitSet",
    "LimitView",
    "Limits",
    "Overview",
    "OverviewQuery",
    "Page",
    "PausedNames",
    "ProgressView",
    "Refused",
    "Retried",
    "RetriedJob",
    "RetryRefusedAll",
    "ScheduleDetail",
    "ScheduleListing",
    "Stats",
    "Status",
    "Switched",
    "TenantStats",
    "UnusedNames",
    "Waiting",
    "Window",
    "WorkerCounts",
    "WorkerFigures",
    "WorkerView",
    "filtered",
    "overview_of",
]
