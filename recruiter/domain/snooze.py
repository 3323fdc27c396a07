"""Snooze: a job asks to run again later, without an attempt counted and without its retry policy asked.

A job's method returns ``Snooze(30)`` (seconds, or a ``timedelta``) or ``Snooze(until=when)``
(an aware datetime). Its worker records an execution of kind ``snoozed`` and the job goes back
to ``scheduled``, due at the time asked: unlocked, its ``attempts`` as before the attempt, its
retry policy not asked, its unique key kept (it is unfinished), its turn taken by due time as
any waiting job's. The job's ``snoozes`` counts them, and each ``snoozed`` entry of its history
names its number (``snooze``) and its end (``snoozed_until``).

Why a returned value and not a raised exception: an outcome is a value here (the worker turns
an attempt into one and writes it once); a snooze is not a failure, so it must not pass through
the code that judges failures, nor be swallowed by the job's own ``except Exception``; and a
value reads the same from a sync method, an ``async`` one, a thread, a child process and a
function job.

Bounded, both ways:

- **How often.** A job may snooze ``max_snoozes`` times (the job's, set by the builder's
  ``.max_snoozes(n)``, the class attribute or ``@job(max_snoozes=n)``; else
  :data:`DEFAULT_MAX_SNOOZES`). The snooze past that archives it, ``why: "snoozed-too-often"``,
  saying how many times and the cap: a job that snoozes for ever is visible, and ends.
- **How long.** One snooze lasts at most :data:`MAX_SNOOZE` (30 days) from the worker's clock:
  a far-future date cannot make a job unreachable. A longer wait belongs in a schedule.

Everything a job hands back is untrusted: :func:`asked_of` reads a returned ``Snooze`` (or a
subclass whose fields were tampered with) once, at the boundary, and a negative, NaN, infinite
or too long delay, a naive or wrongly typed date, is refused with its reason: the attempt then
fails with :class:`SnoozeRefused` and its retry policy judges it, like any bug of the job's.
The constructor applies the same checks, so a wrong ``Snooze(-1)`` fails in the job's own code.

Skew: a snoozed job is a waiting job with a later due time. A 0.2.0 process reads it as one
(the new fields ``snoozes`` and ``max_snoozes``, and the ``snoozed`` history entries, are
ignored); a 0.2.0 leader applies a snooze outcome as a give-back (attempt not counted) due at
the time asked, status ``retrying``, without updating ``snoozes``: the next 0.3.0 leader counts
those from the ``snoozed`` entries of the history (:func:`snoozes_of`; a worker is not sent the
history, so until then the cap counts only the snoozes a 0.3.0 leader applied).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import cast

from recruiter.domain.policy import Archive, Decision, RetryAt

DEFAULT_MAX_SNOOZES = 100
# The highest cap a job may be given: far above any use, low enough to bound a job's history of snoozes.
MAX_SNOOZES_CEILING = 100_000
MAX_SNOOZE = timedelta(days=30)
SNOOZED = "snoozed"  # the kind (``outcome``) of an execution that snoozed
SNOOZED_TOO_OFTEN = "snoozed-too-often"  # ``why`` of a job archived at its cap


class SnoozeRefused(ValueError):
    """A snooze that cannot be honoured as asked: the attempt fails with this, judged by the retry policy."""


def _delay_problem(value: object) -> str | None:
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif type(value) in (int, float):
        try:
            seconds = float(cast("float", value))
        except OverflowError:
            return f"a snooze lasts at most {MAX_SNOOZE.days} days, got a number too large for a float"
    else:
        return f"a snooze needs seconds (a number or a timedelta), got {type(value).__name__}"
    if not math.isfinite(seconds):
        return f"a snooze needs a finite number of seconds, got {seconds!r}"
    if seconds < 0:
        return f"a snooze cannot be negative, got {seconds:g}s"
    if seconds > MAX_SNOOZE.total_seconds():
        return f"a snooze lasts at most {MAX_SNOOZE.days} days, got {seconds:g}s"
    return None


def _until_problem(value: object) -> str | None:
    if type(value) is not datetime:
        return f"a snooze's until needs a datetime, got {type(value).__name__}"
    if value.tzinfo is None or value.utcoffset() is None:
        return "a snooze's until needs an aware datetime (with its time zone), got a naive one"
    return None


@dataclass(frozen=True, init=False)
class Snooze:
    """Returned by a job's method: run me again in ``seconds`` (a number or a ``timedelta``), or at
    ``until`` (an aware datetime), without counting this attempt. Raises :class:`SnoozeRefused`
    when neither or both are given, or a value is out of bounds (see :mod:`recruiter.domain.snooze`)."""

    seconds: float | None
    until: datetime | None

    def __init__(self, seconds: float | timedelta | None = None, *, until: datetime | None = None) -> None:
        if (seconds is None) == (until is None):
            raise SnoozeRefused("a snooze needs either seconds or until, not both nor neither")
        problem = _delay_problem(seconds) if seconds is not None else _until_problem(until)
        if problem:
            raise SnoozeRefused(problem)
        delay = seconds.total_seconds() if isinstance(seconds, timedelta) else seconds
        object.__setattr__(self, "seconds", None if delay is None else float(delay))
        object.__setattr__(self, "until", until)


@dataclass(frozen=True)
class Asked:
    """A snooze as read at the boundary: plain values (it crosses the pipe from a child process)."""

    delay_s: float | None = None
    until: datetime | None = None


def is_snooze(value: object) -> bool:
    """Whether an attempt's value asks for a snooze (a :class:`Snooze`, or one read in a child)."""
    return isinstance(value, Snooze | Asked)


def asked_of(value: object) -> Asked | str:
    """The snooze ``value`` asks for, checked (its fields read once, whatever a subclass did to
    them), or why it is refused. Never raises."""
    names = ("delay_s", "until") if isinstance(value, Asked) else ("seconds", "until")  # Asked: read in a child
    try:
        seconds, until = (object.__getattribute__(value, name) for name in names)
        if (seconds is None) == (until is None):
            return "a snooze needs either seconds or until, not both nor neither"
        problem = _delay_problem(seconds) if seconds is not None else _until_problem(until)
        if problem:
            return problem
        if until is not None:
            return Asked(until=cast("datetime", until).astimezone(UTC))
        return Asked(delay_s=float(cast("float", seconds)))
    except BaseException as exc:  # noqa: BLE001 - a hostile object's fields
        return f"the snooze could not be read ({type(exc).__name__})"


def due_of(asked: Asked, now: datetime) -> datetime | str:
    """When a snooze asked at ``now`` ends (``now`` for a date already past), or why it is refused."""
    if asked.until is None:
        return now + timedelta(seconds=asked.delay_s or 0.0)
    try:
        if asked.until - now > MAX_SNOOZE:
            return (f"a snooze lasts at most {MAX_SNOOZE.days} days; until "
                    f"{asked.until.isoformat().replace('+00:00', 'Z')} is further")
        return max(asked.until, now)
    except (TypeError, OverflowError) as exc:
        return f"the snooze's until cannot be compared with the time ({type(exc).__name__})"


def max_snoozes_problem(value: object) -> str | None:
    """Why ``value`` is not a cap on snoozes (an integer from 0 to ``MAX_SNOOZES_CEILING``)."""
    if type(value) is not int:
        return f"max_snoozes must be an integer, got {type(value).__name__}"
    if not 0 <= value <= MAX_SNOOZES_CEILING:
        return f"max_snoozes must be from 0 to {MAX_SNOOZES_CEILING}, got {value}"
    return None


def max_snoozes_of(job: Mapping[str, object]) -> int:
    """The job's cap on snoozes: its ``max_snoozes``, or the default when absent or malformed (the
    cap is never lifted by a bad value)."""
    value = job.get("max_snoozes")
    return cast(int, value) if max_snoozes_problem(value) is None else DEFAULT_MAX_SNOOZES


def _number(value: object) -> int:
    return value if type(value) is int and value >= 0 else 0


def snoozes_of(job: Mapping[str, object]) -> int:
    """How many times the job snoozed: its ``snoozes``, or, when its history is read (the leader
    reads it; a worker is not sent it), the ``snoozed`` entries the history holds or the highest
    number one of them holds, whichever is more: a 0.2.0 leader applied those without counting."""
    executions = job.get("executions")
    entries = [e for e in executions if isinstance(e, Mapping) and e.get("outcome") == SNOOZED] \
        if isinstance(executions, list) else []
    return max([_number(job.get("snoozes")), len(entries), *(_number(e.get("snooze")) for e in entries)])


@dataclass(frozen=True)
class Snoozed:
    """What the worker decided of a snooze: the job's decision, and this snooze's number and end."""

    decision: Decision
    number: int
    until: datetime


def decide_snooze(job: Mapping[str, object], asked: Asked, now: datetime) -> Snoozed | str:
    """Back in the queue at the end of the snooze, or archived ``snoozed-too-often`` past the job's cap;
    or why the snooze is refused (pure)."""
    until = due_of(asked, now)
    if isinstance(until, str):
        return until
    number, cap = snoozes_of(job) + 1, max_snoozes_of(job)
    if number > cap:
        reason = (f"it asked to snooze a {_ordinal(number)} time; a job may snooze {cap} times "
                  f"(max_snoozes)")
        return Snoozed(Archive(SNOOZED_TOO_OFTEN, reason), number, until)
    return Snoozed(RetryAt(until), number, until)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"

