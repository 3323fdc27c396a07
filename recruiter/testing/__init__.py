"""Helpers for testing your jobs: run one inline, or drain a queue against a test database.

- :func:`run_inline` / :func:`run_inline_async`: run a workable here, without a
  server, with a real :class:`~recruiter.JobContext`, retried as its retry policy
  decides (waits skipped by default); returns an :class:`InlineResult` with every
  attempt, its error, its logs and its ``ctx.progress`` calls.
  :class:`Inline` lets a job builder run inline: ``job.as_job_of(Inline()).retry_with(p).enqueue()``.
- :func:`drain` / :func:`drain_async`: enqueue jobs on a test database, run a real
  recruiter and worker in this process until nothing is left, and return the
  archived documents (:class:`Drained`).

Importing this module imports neither pytest nor the embedded server.
"""

from recruiter.testing.drain import Drained, drain, drain_async
from recruiter.testing.inline import (
    INLINE_WORKER,
    STILL_RETRYING,
    Inline,
    InlineAttempt,
    InlineResult,
    ProgressCall,
    run_inline,
    run_inline_async,
)

__all__ = [
    "INLINE_WORKER",
    "STILL_RETRYING",
    "Drained",
    "Inline",
    "InlineAttempt",
    "InlineResult",
    "ProgressCall",
    "drain",
    "drain_async",
    "run_inline",
    "run_inline_async",
]
