"""Retry policies: what to do with a job whose attempt just failed.

A policy is a pure function of the failed attempt (:class:`Failure`) and an
explicit ``now``; it returns one :data:`Decision`: retry at a given time
(:class:`RetryAt`), archive with a reason (:class:`Archive`) or move the job
to another group (:class:`MoveToGroup`). Nothing here does I/O or reads the
clock.

Policies are frozen dataclasses stored in the job document as
``{"class": "module:Qualname", "parameters": {...}}``. The base class
serialises any dataclass policy from its fields, so a user-defined policy only
needs to be a module-level frozen dataclass that subclasses
:class:`RetryPolicy` and implements :meth:`RetryPolicy.decide`::

    @dataclass(frozen=True)
    class RetryOnMondays(RetryPolicy):
        wait: timedelta = timedelta(hours=1)

        def decide(self, failure: Failure, now: datetime) -> Decision:
            if now.weekday() == 0:
                return RetryAt(now + self.wait)
            return Archive(NOT_SCHEDULED)

The base class, :class:`Failure` and the decisions live in
:mod:`recruiter.domain.policy` and are re-exported here, so users import
everything from ``recruiter.retry``. The built-in policies stay in this module:
their stored names are ``recruiter.retry:<Name>`` (``naming.STABLE_MODULES``).

Durations given to the built-in policies may be a ``timedelta``, a number of
seconds or a string such as ``"5m"`` (see :mod:`recruiter.domain.durations`); they
are kept as ``timedelta`` on the instance and stored as float seconds.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from recruiter.domain.durations import as_timedelta
from recruiter.domain.naming import UnknownClass, name_problem, qualified_name
from recruiter.domain.policy import (
    Archive,
    Decision,
    Failure,
    MoveToGroup,
    RetryAt,
    RetryPolicy,
    policy_from_document,
    policy_to_document,
)

__all__ = [
    "NON_RETRIABLE", "NOT_SCHEDULED", "TRIED_TOO_MANY_TIMES", "Archive", "Decision",
    "DoNotDoItAgain", "DurationLike", "ExceptionRefs", "ExponentialBackoff", "Failure",
    "MoveToGroup", "RetriableExceptionFilter", "RetryAt", "RetryForever", "RetryManyTimes",
    "RetryPolicy", "SelectByException", "SwitchGroup", "TimeTable", "UnknownClass",
    "WorkerCrashed", "policy_from_document", "policy_to_document",
]  # fmt: skip

# Values of ``Archive.why`` produced by the policies in this module.
TRIED_TOO_MANY_TIMES = "tried-too-many-times"
NON_RETRIABLE = "non-retriable-exception"
NOT_SCHEDULED = "not-scheduled-by-retry-policy"


class WorkerCrashed(Exception):
    """Stands for "the worker died while running the job".

    A crash has no exception of its own; the cleaner reports it as a
    :class:`Failure` with ``crashed=True`` and this class's lineage in
    ``exception_types``, so rules can name it like any exception.
    """



DurationLike = timedelta | float | str
"""A ``timedelta``, a number of seconds, or text for :func:`~recruiter.domain.durations.parse_duration`."""
ExceptionRefs = type[BaseException] | str | Iterable[type[BaseException] | str]
"""Exception classes or ``"module:Qualname"`` names (one or several)."""


# -- validation helpers ------------------------------------------------------


def _times(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"times must be an integer, got {value!r}")
    if value < 0:
        raise ValueError(f"times must not be negative, got {value}")
    return value


def _policy(value: object, name: str) -> RetryPolicy:
    if not isinstance(value, RetryPolicy):
        raise ValueError(f"{name} must be a RetryPolicy, got {value!r}")
    return value


def _exception_names(value: object, name: str) -> tuple[str, ...]:
    """Exception classes or ``module:Qualname`` strings -> tuple of strings."""
    if isinstance(value, (str, type)):
        items = [value]
    elif isinstance(value, Iterable):
        items = list(value)
    else:
        raise ValueError(f"{name} must be exception classes or names, got {value!r}")
    if not items:
        raise ValueError(f"{name} must list at least one exception")
    names: list[str] = []
    for item in items:
        if isinstance(item, type):
            if not issubclass(item, BaseException):
                raise ValueError(f"{name}: {item!r} is not an exception class")
            names.append(qualified_name(item))
        elif isinstance(item, str) and item.strip():
            text = item.strip()
            if ":" not in text:
                # Accept "module.Name" too; lineages use "module:Qualname".
                module, _, qualname = text.rpartition(".")
                if not module:
                    raise ValueError(
                        f"{name}: {item!r} is not of the form 'module:Qualname' "
                        "(for example 'builtins:ValueError')"
                    )
                text = f"{module}:{qualname}"
            names.append(text)
        else:
            raise ValueError(f"{name}: {item!r} is neither an exception class nor a name")
    return tuple(names)


def _saturating(compute: Callable[[], timedelta]) -> timedelta:
    """``compute()``, or ``timedelta.max`` if the result is too large."""
    try:
        return compute()
    except OverflowError:
        return timedelta.max


def _after(now: datetime, delay: timedelta) -> datetime:
    """``now + delay``, saturating at the largest representable datetime."""
    try:
        return now + delay
    except OverflowError:
        return datetime.max.replace(tzinfo=now.tzinfo)


# -- policies ----------------------------------------------------------------
# The built-in policies take loosely typed arguments (durations as text or
# seconds, exceptions as classes or names) and store them normalised, hence
# their explicit __init__ (``init=False``); the fields keep the stored types.


def _set(instance: RetryPolicy, /, **values: object) -> None:
    for name, value in values.items():
        object.__setattr__(instance, name, value)


@dataclass(frozen=True)
class DoNotDoItAgain(RetryPolicy):
    """Never retry (the default): archive as ``not-scheduled-by-retry-policy``."""

    def decide(self, failure: Failure, now: datetime) -> Decision:
        return Archive(NOT_SCHEDULED)


@dataclass(frozen=True, init=False)
class RetryManyTimes(RetryPolicy):
    """Retry ``times`` times, ``wait`` after each failure; ``times=2`` means 3 executions."""

    times: int
    wait: timedelta

    def __init__(self, times: int, wait: DurationLike = 0) -> None:
        _set(self, times=_times(times), wait=as_timedelta(wait, "wait"))

    def decide(self, failure: Failure, now: datetime) -> Decision:
        if failure.attempts > self.times:
            return Archive(TRIED_TOO_MANY_TIMES)
        return RetryAt(_after(now, self.wait))


@dataclass(frozen=True, init=False)
class ExponentialBackoff(RetryPolicy):
    """Retry ``times`` times, waiting ``initial * 2**(attempts - 1)``, at most ``cap``.

    ``jitter`` (0 to 1) spreads each delay by up to that fraction either way,
    with a random factor derived from ``(job_id, attempts)``: the same failure
    always gets the same delay. The delay never exceeds ``cap``, jitter included.
    """

    times: int
    initial: timedelta
    cap: timedelta | None
    jitter: float

    # 2**80 microseconds is beyond timedelta.max: more doublings change nothing.
    _MAX_DOUBLINGS: ClassVar[int] = 80

    def __init__(
        self,
        times: int,
        initial: DurationLike = 1,
        cap: DurationLike | None = None,
        jitter: float = 0.0,
    ) -> None:
        if (
            isinstance(jitter, bool)
            or not isinstance(jitter, (int, float))
            or not 0.0 <= jitter <= 1.0
        ):
            raise ValueError(f"jitter must be a number between 0 and 1, got {jitter!r}")
        _set(
            self,
            times=_times(times),
            initial=as_timedelta(initial, "initial"),
            cap=None if cap is None else as_timedelta(cap, "cap"),
            jitter=float(jitter),
        )

    def delay(self, attempts: int, job_id: str = "") -> timedelta:
        """The wait after the ``attempts``-th failed execution of job ``job_id``."""
        doublings = min(max(attempts - 1, 0), self._MAX_DOUBLINGS)
        delay = _saturating(lambda: self.initial * 2**doublings)
        if self.cap is not None:
            delay = min(delay, self.cap)
        if self.jitter:
            spread = random.Random(f"{job_id}:{attempts}").uniform(-1.0, 1.0)
            factor = 1.0 + self.jitter * spread
            delay = _saturating(lambda: delay * factor)
            if self.cap is not None:
                delay = min(delay, self.cap)
        return delay

    def decide(self, failure: Failure, now: datetime) -> Decision:
        if failure.attempts > self.times:
            return Archive(TRIED_TOO_MANY_TIMES)
        return RetryAt(_after(now, self.delay(failure.attempts, failure.job_id)))


@dataclass(frozen=True, init=False)
class RetryForever(RetryPolicy):
    """Always retry, ``wait`` after the failure."""

    wait: timedelta

    def __init__(self, wait: DurationLike = 0) -> None:
        _set(self, wait=as_timedelta(wait, "wait"))

    def decide(self, failure: Failure, now: datetime) -> Decision:
        return RetryAt(_after(now, self.wait))


@dataclass(frozen=True, init=False)
class TimeTable(RetryPolicy):
    """Retry every Y while the job is younger than X, by a table of (X, Y) rows.

    ``TimeTable({"5m": "1m", "1h": "5m", "1d": "1h"})`` retries every minute
    during the job's first 5 minutes, then every 5 minutes until it is an hour
    old, then hourly until it is a day old, then archives it as
    ``tried-too-many-times``. The age is ``now - created_at``, and "younger
    than" is strict. ``table`` is a mapping or a sequence of pairs; it is kept
    sorted as ``((within, every), ...)``.
    """

    table: tuple[tuple[timedelta, timedelta], ...]

    def __init__(
        self,
        table: Mapping[Any, DurationLike] | Iterable[tuple[DurationLike, DurationLike]],
    ) -> None:
        pairs: list[object] = list(table.items()) if isinstance(table, Mapping) else list(table)
        if not pairs:
            raise ValueError("table must have at least one (within, every) entry")
        rows: list[tuple[timedelta, timedelta]] = []
        for pair in pairs:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ValueError(f"table entries must be (within, every) pairs, got {pair!r}")
            within, every = as_timedelta(pair[0], "within"), as_timedelta(pair[1], "every")
            if within <= timedelta(0):
                raise ValueError(f"table: 'within' must be positive, got {pair[0]!r}")
            rows.append((within, every))
        rows.sort(key=lambda row: row[0])
        for before, after in itertools.pairwise(rows):
            if before[0] == after[0]:
                raise ValueError(f"table lists the age {before[0]} twice")
        _set(self, table=tuple(rows))

    def decide(self, failure: Failure, now: datetime) -> Decision:
        created_at = failure.created_at
        if created_at.tzinfo is None and now.tzinfo is not None:
            created_at = created_at.replace(tzinfo=UTC)  # a naive BSON date is UTC
        age = now - created_at
        for within, every in self.table:
            if age < within:
                return RetryAt(_after(now, every))
        return Archive(TRIED_TOO_MANY_TIMES)


@dataclass(frozen=True, init=False)
class RetriableExceptionFilter(RetryPolicy):
    """Let ``policy`` judge only failures raised by one of ``exceptions``.

    ``exceptions`` are classes or ``"module:Qualname"`` strings; a listed class
    matches its subclasses too. Any other exception archives the job as
    ``non-retriable-exception``. A crash of the worker (``failure.crashed``)
    is always treated as retriable and judged by ``policy``: the job itself
    may well be fine.
    """

    policy: RetryPolicy
    exceptions: tuple[str, ...]

    def __init__(self, policy: RetryPolicy, exceptions: ExceptionRefs) -> None:
        _set(
            self,
            policy=_policy(policy, "policy"),
            exceptions=_exception_names(exceptions, "exceptions"),
        )

    def decide(self, failure: Failure, now: datetime) -> Decision:
        if failure.crashed or not set(self.exceptions).isdisjoint(failure.exception_types):
            return self.policy.decide(failure, now)
        return Archive(NON_RETRIABLE)


@dataclass(frozen=True, init=False)
class SelectByException(RetryPolicy):
    """Choose the policy by exception: the first rule naming one of the failure's types wins.

    ``rules`` is an ordered sequence of ``(exceptions, policy)`` pairs, where
    ``exceptions`` is a class, a ``"module:Qualname"`` string or several of
    them. Failures matching no rule go to ``default``. A crash matches rules
    that name :class:`WorkerCrashed` (or one of its bases, such as ``Exception``).
    """

    rules: tuple[tuple[tuple[str, ...], RetryPolicy], ...]
    default: RetryPolicy

    def __init__(
        self,
        rules: Iterable[tuple[ExceptionRefs, RetryPolicy]],
        default: RetryPolicy | None = None,
    ) -> None:
        normalised: list[tuple[tuple[str, ...], RetryPolicy]] = []
        for index, rule in enumerate(rules):
            if not isinstance(rule, (tuple, list)) or len(rule) != 2:
                raise ValueError(f"rules[{index}] must be an (exceptions, policy) pair")
            exceptions = _exception_names(rule[0], f"rules[{index}]")
            normalised.append((exceptions, _policy(rule[1], f"rules[{index}] policy")))
        default = DoNotDoItAgain() if default is None else _policy(default, "default")
        _set(self, rules=tuple(normalised), default=default)

    def decide(self, failure: Failure, now: datetime) -> Decision:
        for exceptions, policy in self.rules:
            if not set(exceptions).isdisjoint(failure.exception_types):
                return policy.decide(failure, now)
        return self.default.decide(failure, now)


@dataclass(frozen=True, init=False)
class SwitchGroup(RetryPolicy):
    """Follow ``after``; where it would archive, move the job to ``group`` instead.

    The job is moved to run ``wait`` later. It keeps this policy and its
    attempt count; once it is in ``group``, what ``after`` decides stands, so
    a job that keeps failing there is archived rather than moved forever.
    """

    group: str
    after: RetryPolicy
    wait: timedelta

    def __init__(self, group: str, after: RetryPolicy, wait: DurationLike = 0) -> None:
        problem = name_problem("group", group)
        if problem:
            raise ValueError(problem)
        _set(self, group=group, after=_policy(after, "after"), wait=as_timedelta(wait, "wait"))

    def decide(self, failure: Failure, now: datetime) -> Decision:
        decision = self.after.decide(failure, now)
        if isinstance(decision, Archive) and failure.group != self.group:
            return MoveToGroup(self.group, _after(now, self.wait))
        return decision
