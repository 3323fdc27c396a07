"""Human-friendly durations: ``"200ms"``, ``"30s"``, ``"5m"``, ``"1h30m"``.

Used by retry policies, configuration and the command line. This module is
pure: it knows nothing about click or the environment.

Units: ``ms`` (milliseconds), ``s`` (seconds), ``m`` (minutes), ``h`` (hours),
``d`` (days), ``w`` (weeks). A bare number means seconds. Components of a
compound duration go from the largest unit to the smallest, each at most once.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

__all__ = ["MAX_DURATION", "as_timedelta", "format_duration", "parse_duration"]

_MICROSECONDS: dict[str, int] = {
    "w": 7 * 24 * 3600 * 1_000_000,
    "d": 24 * 3600 * 1_000_000,
    "h": 3600 * 1_000_000,
    "m": 60 * 1_000_000,
    "s": 1_000_000,
    "ms": 1_000,
}
# Largest first; also the order the components of a compound must follow.
_UNIT_ORDER = ("w", "d", "h", "m", "s", "ms")

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_BARE_NUMBER = re.compile(rf"{_NUMBER}", re.ASCII)
# "ms" must be tried before "m" so that "200ms" is not read as "200m" + "s".
_COMPONENT = re.compile(rf"({_NUMBER})(ms|w|d|h|m|s)", re.ASCII)

_HINT = "use a number with a unit, like 200ms, 30s, 5m, 2h or 5d"
# The longest duration accepted anywhere: a century. Longer ones mean nothing to a job queue,
# and dates computed from them (``now - since``, ``slot + every``) would leave the range of
# ``datetime`` (years 1 to 9999) and raise OverflowError deep inside a process.
MAX_DURATION = timedelta(days=36_525)
_TOO_LARGE = f"too large (at most {MAX_DURATION.days}d, a century)"


def _invalid(text: str, hint: str = _HINT) -> ValueError:
    return ValueError(f"invalid duration {text!r}: {hint}")


def parse_duration(text: str) -> timedelta:
    """Parse ``"200ms"``, ``"30s"``, ``"1h30m"``, ``"0.5s"`` or ``"10"`` (seconds).

    Surrounding whitespace is ignored. Empty, negative and malformed input
    raises ``ValueError`` with a one-line message. The result is exact to the
    microsecond (the resolution of ``timedelta``), rounding half to even below.
    """
    if not isinstance(text, str):
        raise TypeError(f"duration must be a string, got {type(text).__name__}")
    stripped = text.strip()
    if not stripped:
        raise _invalid(text)
    if stripped.startswith("-"):
        raise _invalid(text, "durations cannot be negative")

    if _BARE_NUMBER.fullmatch(stripped):
        total = Decimal(stripped) * _MICROSECONDS["s"]
    else:
        total = Decimal(0)
        position = 0
        last_rank = -1
        for match in _COMPONENT.finditer(stripped):
            if match.start() != position:
                raise _invalid(text)
            number, unit = match.groups()
            rank = _UNIT_ORDER.index(unit)
            if rank <= last_rank:
                raise _invalid(
                    text, "give each unit at most once, largest first, like 1h30m or 1m30s"
                )
            last_rank = rank
            total += Decimal(number) * _MICROSECONDS[unit]
            position = match.end()
        if position != len(stripped) or last_rank < 0:
            raise _invalid(text)

    return _bounded(total, text)


def _bounded(microseconds: Decimal, text: str) -> timedelta:
    """``microseconds`` as a timedelta, refused (one line) beyond :data:`MAX_DURATION`."""
    try:
        result = timedelta(microseconds=int(microseconds.to_integral_value(rounding=ROUND_HALF_EVEN)))
    except (OverflowError, InvalidOperation):
        raise _invalid(text, _TOO_LARGE) from None
    if result > MAX_DURATION:
        raise _invalid(text, _TOO_LARGE)
    return result


def format_duration(td: timedelta) -> str:
    """Compact text for a non-negative ``timedelta``: ``"1h30m"``, ``"200ms"``, ``"0s"``.

    Uses days, hours, minutes, seconds and milliseconds (sub-millisecond
    parts become a decimal number of milliseconds, ``"1.5ms"``), so that
    ``parse_duration(format_duration(td)) == td`` for every such value.
    """
    if not isinstance(td, timedelta):
        raise TypeError(f"expected a timedelta, got {type(td).__name__}")
    if td < timedelta(0):
        raise ValueError(f"cannot format negative duration {td!r}")
    remaining = td // timedelta(microseconds=1)
    if remaining == 0:
        return "0s"
    parts: list[str] = []
    for unit in ("d", "h", "m", "s"):
        amount, remaining = divmod(remaining, _MICROSECONDS[unit])
        if amount:
            parts.append(f"{amount}{unit}")
    if remaining:
        milliseconds, micro = divmod(remaining, 1_000)
        if micro:
            fraction = f"{micro:03d}".rstrip("0")
            parts.append(f"{milliseconds}.{fraction}ms")
        else:
            parts.append(f"{milliseconds}ms")
    return "".join(parts)


def as_timedelta(value: object, name: str) -> timedelta:
    """A duration argument (``timedelta``, seconds or text) as a non-negative ``timedelta``.

    Raises ValueError naming the argument ``name``.
    """
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
        if value > MAX_DURATION.total_seconds():
            raise ValueError(f"{name} is {_TOO_LARGE}, got {value!r:.60}")
        result = timedelta(seconds=value)
    else:
        raise ValueError(
            f"{name} must be a timedelta, a number of seconds or a string like '5m', got {value!r}"
        )
    if result < timedelta(0):
        raise ValueError(f"{name} must not be negative, got {value!r}")
    if result > MAX_DURATION:
        raise ValueError(f"{name} is {_TOO_LARGE}, got {format_duration(result)}")
    return result
