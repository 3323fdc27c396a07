"""The read model and the operator's use cases, below every front end.

The CLI, the Python API (``rec.admin``, or :class:`Admin` on any database) and
the tests call these functions; each reads and writes through
:mod:`recruiter.store`'s indexed functions and returns frozen values
(dataclasses of plain values and domain views), so a front end only parses
what it is given and renders what it gets back. See
``docs/operations/read-model-and-events.md``.

Layering: below the producer and the processes (the producer's ``Recruiter``
offers it as ``rec.admin``), above the store.
"""

from recruiter.admin.api import Admin
from recruiter.admin.jobs import Retried, RetriedJob, RetryRefusedAll
from recruiter.admin.overview import Overview, OverviewQuery, filtered, overview_of
from recruiter.admin.schedules import ScheduleDetail, ScheduleListing
from recruiter.admin.stats import Depth, GroupStats, Stats, TenantStats, Window, WorkerFigures
from recruiter.admin.status import LeaseView, PausedNames, Status, WorkerCounts
from recruiter.admin.switches import Switched, UnusedNames
from recruiter.admin.workers import ProgressView, WorkerView
from recruiter.domain.refused import Refused
from recruiter.domain.waiting import Explanation, Waiting

__all__ = [
    "Admin",
    "Depth",
    "Explanation",
    "GroupStats",
    "LeaseView",
    "Overview",
    "OverviewQuery",
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
