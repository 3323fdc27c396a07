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

Durations given to the built-in policies may be a ``timedelta``, a number of
seconds or a string such as ``"5m"`` (see :mod:`recruiter.durations`); they
are kept as ``timedelta`` on the instance and stored as float seconds.
"""

from __future__ import annotations

import abc
import dataclasses
import itertools
import math
import random
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Union

from recruiter.domain.durations import parse_duration
from recruiter.domain.naming import UnknownClass, import_qualified, name_problem, qualified_name

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


@dataclass(frozen=True)
class Failure:
    """A failed attempt, as seen by a retry policy."""

    job_id: str
    attempts: int
    """Executions so far, including the one that just failed (>= 1)."""
    created_at: datetime
    scheduled_at: datetime
    ended_at: datetime
    exception_types: tuple[str, ...]
    """``exception_lineage()`` of the error, most specific first."""
    message: str
    crashed: bool = False
    group: str | None = None
    """The group the job was in when the attempt failed."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")


@dataclass(frozen=True)
class RetryAt:
    """Run the job again at ``at``."""

    at: datetime


@dataclass(frozen=True)
class Archive:
    """Stop: archive the job with reason ``why`` (and, optionally, a one-line ``reason`` saying more)."""

    why: str
    reason: str | None = None


@dataclass(frozen=True)
class MoveToGroup:
    """Run the job again at ``at``, in ``group``."""

    group: str
    at: datetime


Decision = RetryAt | Archive | MoveToGroup

DurationLike = timedelta | float | str
"""A ``timedelta``, a number of seconds, or text for :func:`~recruiter.durations.parse_duration`."""
ExceptionRefs = type[BaseException] | str | Iterable[type[BaseException] | str]
"""Exception classes or ``"module:Qualname"`` names (one or several)."""


# -- validation helpers ------------------------------------------------------


def _duration(value: object, name: str) -> timedelta:
    """Normalise a constructor duration to a non-negative ``timedelta``."""
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, str):
        try:
            result = parse_duration(value)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number of seconds, got {value!r}")
        if value < 0:
            raise ValueError(f"{name} must not be negative, got {value!r}")
        result = timedelta(seconds=value)
    else:
        raise ValueError(
            f"{name} must be a timedelta, a number of seconds or a string like '5m', got {value!r}"
        )
    if result < timedelta(0):
        raise ValueError(f"{name} must not be negative, got {value!r}")
    return result


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


# -- (de)serialisation ---------------------------------------------------------


def _encode(value: object, where: str) -> object:
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, RetryPolicy):
        return value.to_document()
    if isinstance(value, (tuple, list)):
        return [_encode(item, where) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _encode(item, where) for key, item in value.items()}
    raise TypeError(f"{where}: cannot store a {type(value).__name__} in a policy document")


def _looks_like_policy(value: object) -> bool:
    return isinstance(value, dict) and set(value) == {"class", "parameters"}


def _decode_untyped(value: object) -> object:
    if _looks_like_policy(value):
        return policy_from_document(value)
    if isinstance(value, dict):
        return {key: _decode_untyped(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode_untyped(item) for item in value]
    return value


def _decode(value: object, hint: object) -> object:
    """Turn a stored parameter back into the field's type, guided by its hint."""
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is timedelta:
        return timedelta(seconds=value) if isinstance(value, (int, float)) else value
    if origin in (Union, types.UnionType):
        return _decode_union(value, args)
    if isinstance(hint, type) and issubclass(hint, RetryPolicy):
        return policy_from_document(value)
    if origin in (tuple, list) and isinstance(value, list):
        return _decode_sequence(value, origin, args)
    if origin in (dict, Mapping) and isinstance(value, dict):
        item_hint = args[1] if len(args) == 2 else object
        return {key: _decode(item, item_hint) for key, item in value.items()}
    return _decode_untyped(value)


def _decode_union(value: object, args: tuple[object, ...]) -> object:
    """A parameter whose hint is a union (``timedelta | None``, ``RetryPolicy | None``)."""
    options = [arg for arg in args if arg is not type(None)]
    if timedelta in options and isinstance(value, (int, float)):
        return timedelta(seconds=value)
    if len(options) == 1:
        return _decode(value, options[0])
    return _decode_untyped(value)


def _decode_sequence(value: list[object], origin: object, args: tuple[object, ...]) -> object:
    """A stored array, back into the ``list[...]`` or ``tuple[...]`` its hint names."""
    if origin is list:
        item_hint = args[0] if args else object
        return [_decode(item, item_hint) for item in value]
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_decode(item, args[0]) for item in value)
    if len(args) == len(value):
        return tuple(_decode(item, arg) for item, arg in zip(value, args, strict=True))
    return tuple(_decode_untyped(item) for item in value)


class RetryPolicy(abc.ABC):
    """Decides what happens to a job after a failed attempt.

    Subclasses are frozen dataclasses defined at module level; the default
    :meth:`to_document` and :meth:`from_parameters` work from their fields.
    Override both for a policy that is not a dataclass.
    """

    @abc.abstractmethod
    def decide(self, failure: Failure, now: datetime) -> Decision:
        """The decision for ``failure``, taken at ``now`` (aware UTC)."""

    def to_document(self) -> dict[str, object]:
        """``{"class": "module:Qualname", "parameters": {...}}``, BSON-friendly."""
        cls = type(self)
        if not dataclasses.is_dataclass(self):
            raise TypeError(
                f"{cls.__qualname__} is not a dataclass; "
                "override to_document() and from_parameters()"
            )
        where = qualified_name(cls)
        parameters = {
            f.name: _encode(getattr(self, f.name), f"{where}.{f.name}")
            for f in dataclasses.fields(self)
            if f.init
        }
        return {"class": where, "parameters": parameters}

    @classmethod
    def from_parameters(cls, parameters: dict[str, object]) -> RetryPolicy:
        """Rebuild a policy from the ``parameters`` of its document."""
        if not dataclasses.is_dataclass(cls):
            raise TypeError(
                f"{cls.__qualname__} is not a dataclass; "
                "override to_document() and from_parameters()"
            )
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(parameters) - set(fields))
        if unknown:
            raise ValueError(f"unknown parameters for {cls.__qualname__}: {', '.join(unknown)}")
        try:
            hints = typing.get_type_hints(cls)
        except (NameError, TypeError):
            hints = {}
        kwargs = {name: _decode(value, hints.get(name, object)) for name, value in parameters.items()}
        return cls(**kwargs)


def policy_to_document(policy: RetryPolicy) -> dict[str, object]:
    """The ``{class, parameters}`` document of ``policy``."""
    if not isinstance(policy, RetryPolicy):
        raise TypeError(f"expected a RetryPolicy, got {policy!r}")
    return policy.to_document()


def policy_from_document(doc: object) -> RetryPolicy:
    """Rebuild a policy from its ``{class, parameters}`` document.

    Raises :class:`~recruiter.naming.UnknownClass` if the class cannot be
    imported, and ``ValueError`` if the document or its parameters are invalid.
    """
    if not isinstance(doc, Mapping) or not isinstance(doc.get("class"), str):
        raise ValueError(f"a retry policy document needs a 'class' string, got {doc!r}")
    name = doc["class"]
    parameters = doc.get("parameters", {})
    if not isinstance(parameters, Mapping):
        raise ValueError(f"parameters of retry policy {name} must be a mapping, got {parameters!r}")
    cls = import_qualified(name)
    if not (isinstance(cls, type) and issubclass(cls, RetryPolicy)):
        raise ValueError(f"{name} is not a RetryPolicy subclass")
    try:
        return cls.from_parameters(dict(parameters))
    except TypeError as exc:
        raise ValueError(f"invalid parameters for retry policy {name}: {exc}") from exc


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
        _set(self, times=_times(times), wait=_duration(wait, "wait"))

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
            initial=_duration(initial, "initial"),
            cap=None if cap is None else _duration(cap, "cap"),
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
        _set(self, wait=_duration(wait, "wait"))

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
            within, every = _duration(pair[0], "within"), _duration(pair[1], "every")
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
        _set(self, group=group, after=_policy(after, "after"), wait=_duration(wait, "wait"))

    def decide(self, failure: Failure, now: datetime) -> Decision:
        decision = self.after.decide(failure, now)
        if isinstance(decision, Archive) and failure.group != self.group:
            return MoveToGroup(self.group, _after(now, self.wait))
        return decision
