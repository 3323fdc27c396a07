"""recruiter: a job queue on MongoDB with one central recruiter.

Producers enqueue :class:`Workable` jobs (or calls of functions made jobs by :func:`job`)
through :class:`Recruiter` (sync) or :class:`AsyncRecruiter` (asyncio) and follow them with the :class:`JobHandle`
(:class:`AsyncJobHandle`) ``enqueue`` returns: state, result, ``wait()``. The
``recruiter start``, ``worker start`` and ``cleaner start`` processes do the rest.
"""

from recruiter.domain.adding import StepsRefused, WorkflowSteps
from recruiter.domain.builder import JobBuilder
from recruiter.domain.cancel import CancelResult
from recruiter.domain.dependency_results import DependencyResult, DependencyResults, ResultUnavailable
from recruiter.domain.flows import chain, fan_in
from recruiter.domain.functions import job
from recruiter.domain.job import JobRefused
from recruiter.domain.limits import Limit, Rate
from recruiter.domain.resubmit import ResubmitRefused, Resubmitted
from recruiter.domain.schedules import ScheduleRefused
from recruiter.domain.snooze import Snooze, SnoozeRefused
from recruiter.domain.versions import RELEASE as __version__
from recruiter.domain.workable import JobContext, Workable
from recruiter.domain.workflow import WorkflowRefused
from recruiter.producer.client import AsyncRecruiter, Recruiter
from recruiter.producer.handles import AsyncJobHandle, JobFailed, JobHandle, JobNotFound, ResultDropped
from recruiter.producer.schedules import ScheduleView
from recruiter.producer.workflows import Batch, Workflow, WorkflowRun
from recruiter.store.connection import DEFAULT_URI, ConnectionProblem

__all__ = [
    "DEFAULT_URI",
    "AsyncJobHandle",
    "AsyncRecruiter",
    "Batch",
    "CancelResult",
    "ConnectionProblem",
    "DependencyResult",
    "DependencyResults",
    "JobBuilder",
    "JobContext",
    "JobFailed",
    "JobHandle",
    "JobNotFound",
    "JobRefused",
    "Limit",
    "Rate",
    "Recruiter",
    "ResubmitRefused",
    "Resubmitted",
    "ResultDropped",
    "ResultUnavailable",
    "ScheduleRefused",
    "ScheduleView",
    "Snooze",
    "SnoozeRefused",
    "StepsRefused",
    "Workable",
    "Workflow",
    "WorkflowRefused",
    "WorkflowRun",
    "WorkflowSteps",
    "__version__",
    "chain",
    "fan_in",
    "job",
]
