"""recruiter: a job queue on MongoDB with one central recruiter.

Producers enqueue :class:`Workable` jobs through :class:`Recruiter` (sync) or
:class:`AsyncRecruiter` (asyncio). The ``recruiter start``, ``worker start`` and
``cleaner start`` processes do the rest.
"""

from recruiter.domain.cancel import CancelResult
from recruiter.domain.job import JobBuilder, JobRefused
from recruiter.domain.workable import JobContext, Workable
from recruiter.producer.client import AsyncRecruiter, Recruiter
from recruiter.store.connection import DEFAULT_URI, ConnectionProblem

__all__ = [
    "DEFAULT_URI",
    "AsyncRecruiter",
    "CancelResult",
    "ConnectionProblem",
    "JobBuilder",
    "JobContext",
    "JobRefused",
    "Recruiter",
    "Workable",
]
__version__ = "0.1.0"
