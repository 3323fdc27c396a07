"""recruiter: a job queue on MongoDB with one central recruiter.

Producers enqueue :class:`Workable` jobs through :class:`Recruiter` (sync) or
:class:`AsyncRecruiter` (asyncio). The ``recruiter start``, ``worker start`` and
``cleaner start`` processes do the rest.
"""

from recruiter.cancel import CancelResult
from recruiter.connection import ConnectionProblem
from recruiter.job import JobBuilder, JobRefused
from recruiter.producer import AsyncRecruiter, Recruiter
from recruiter.workable import JobContext, Workable

__all__ = [
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
