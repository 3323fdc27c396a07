"""Judging an attempt: pure functions from a job and what happened to a decision.

The worker runs these because it has the user's code and the exception. They
take ``now`` explicitly and touch no database.
"""

from __future__ import annotations

from datetime import datetime

from recruiter.domain.handback import (
    DEFAULT_MAX_RESULT_BYTES,
    MAX_MESSAGE_CHARS,
    MAX_TRACE_CHARS,
    Dropped,
    checked_result,
    describe,
    safe_lineage,
    safe_str,
    storable_text,
)
from recruiter.domain.naming import AllowedModules, UnknownClass, class_names, import_qualified
from recruiter.domain.outcome import CRASHED, CRASHED_TOO_MANY_TIMES
from recruiter.domain.records import Raw
from recruiter.domain.retry import Archive, Decision, Failure, MoveToGroup, RetryAt, policy_from_document

__all__ = ["MAX_MESSAGE_CHARS", "MAX_TRACE_CHARS", "Dropped"]

MAX_RESULT_BYTES = DEFAULT_MAX_RESULT_BYTES  # the default; worker start --max-result-size
# What an attempt logged is kept up to this many bytes (UTF-8), the newest ones
# (recruiter.processes.worker.capture); ``logs_cut`` counts the bytes dropped before them.
MAX_LOG_BYTES = 64 * 1024
BAD_RETRY_POLICY = "bad-retry-policy"


class RemoteFailure(Exception):
    """An exception raised in another process (a child running the attempt), as described there.

    It carries the original class names, so retry policies judge it as they
    would have judged the original exception.
    """

    def __init__(self, lineage: tuple[str, ...], message: str, trace: str) -> None:
        super().__init__(message)
        self.lineage = tuple(storable_text(n) for n in lineage) or ("builtins:Exception",)
        self.message = storable_text(message)
        self.trace = storable_text(trace)

    @classmethod
    def of(cls, exc: BaseException) -> RemoteFailure:
        """``exc`` described (:func:`~recruiter.domain.handback.describe`): for an exception the
        worker must not let through as it is (a ``SystemExit`` or ``KeyboardInterrupt`` a job raised)."""
        return cls(*describe(exc))


def lineage_of(exc: BaseException) -> tuple[str, ...]:
    if isinstance(exc, RemoteFailure):
        return exc.lineage
    return safe_lineage(exc)


def describe_exception(exc: BaseException) -> tuple[str, str, str]:
    """(``module:Qualname`` of the class, message, trace), trimmed to storable sizes and storable
    text whatever the exception does (:func:`~recruiter.domain.handback.describe`)."""
    if isinstance(exc, RemoteFailure):
        return exc.lineage[0], exc.message[:MAX_MESSAGE_CHARS], exc.trace[-MAX_TRACE_CHARS:]
    lineage, message, trace = describe(exc)
    return lineage[0], message, trace


def cut_marker(cut: object) -> str:
    """The line readers show where an execution's logs were cut: ``[… 12345 bytes cut …]``
    (empty when nothing was cut; ``cut`` is the stored ``logs_cut``, any value read tolerantly)."""
    if isinstance(cut, bool) or not isinstance(cut, int | float) or cut <= 0:
        return ""
    return f"[… {int(cut)} bytes cut …]"


def _date_or(value: object, default: datetime) -> datetime:
    return value if isinstance(value, datetime) else default


def failure_of(job: Raw, exc: BaseException, ended_at: datetime) -> Failure:
    """The failure a retry policy judges, for a job that passed :func:`~recruiter.domain.documents.job_problem`."""
    attempts, group = job.get("attempts", 1), job.get("group")
    return Failure(
        job_id=str(job["_id"]),
        attempts=int(attempts) if isinstance(attempts, int | float) else 1,
        created_at=_date_or(job.get("created_at"), ended_at),
        scheduled_at=_date_or(job.get("scheduled_at"), ended_at),
        ended_at=ended_at,
        exception_types=lineage_of(exc),
        message=(exc.message if isinstance(exc, RemoteFailure) else safe_str(exc))[:MAX_MESSAGE_CHARS],
        crashed=False,
        group=group if isinstance(group, str) else None,
    )


def judge(job: Raw, failure: Failure, now: datetime) -> Decision:
    """What the job's retry policy says about ``failure``.

    A policy that cannot be loaded or that raises archives the job with
    ``why: "bad-retry-policy"`` rather than losing it or retrying forever.
    """
    try:
        policy = policy_from_document(job["retry_policy"])
        decision = policy.decide(failure, now)
    except BaseException:  # noqa: BLE001 - a user policy's bug (even a SystemExit) must not stop the worker
        return Archive(BAD_RETRY_POLICY)
    if not isinstance(decision, RetryAt | Archive | MoveToGroup):
        return Archive(BAD_RETRY_POLICY)
    return decision


def judge_crash(job: Raw, now: datetime, max_crashes: int) -> Decision | None:
    """Decide about a job whose previous worker died (``crash_pending``).

    A crash is the infrastructure's failure, not the job's: the job's retry
    policy is not asked. ``None`` means run it again now; after ``max_crashes``
    crashes it is archived with ``why: "crashed-too-many-times"``, and a job
    marked ``at_most_once`` is archived on its first crash (``why: "crashed"``).
    """
    if job.get("at_most_once"):
        return Archive(CRASHED)
    crashes = job.get("crashes", 0)
    if not isinstance(crashes, int) or crashes >= max_crashes:
        return Archive(CRASHED_TOO_MANY_TIMES)
    return None


def import_refusal(job: Raw, allowed: AllowedModules) -> str | None:
    """``class not allowed: …`` if the job names a module outside ``allowed``; None if not.

    Looks at every class the attempt could import (the workable's and those in
    the retry policy document, nested ones included) before anything is imported.
    """
    workable = job.get("workable")
    names = [workable.get("class") if isinstance(workable, dict) else None, *class_names(job.get("retry_policy"))]
    for name in names:
        refusal = allowed.refusal(name)
        if refusal:
            return refusal
    return None


def import_problem(job: Raw) -> str | None:
    """``cannot import …`` if a class the job names (its workable's, its retry policy's) cannot
    be imported here: its module is missing (an older release) or lacks it. Imports them."""
    workable = job.get("workable")
    names = [workable.get("class") if isinstance(workable, dict) else None, *class_names(job.get("retry_policy"))]
    for name in names:
        try:
            import_qualified(name)
        except UnknownClass as exc:
            return f"cannot import {name}: {exc}"[:500]
        except Exception:  # noqa: BLE001 - the module's own code failed: the attempt, run, judges it
            return None
    return None


def storable_result(value: object, max_bytes: int = MAX_RESULT_BYTES) -> tuple[object, Dropped | None]:
    """The job's return value as it will be stored, if it may be; else ``None`` and why not
    (:func:`~recruiter.domain.handback.checked_result`)."""
    return checked_result(value, max_bytes)
