"""The rate of a limit and its token bucket: when the jobs a round hands out may start; pure, no I/O.

A rate ``N/interval`` with ``burst`` B is a token bucket of ``1 + B`` tokens refilled one token
every *slot* of ``interval/N × (1 + MARGIN)``. A round does not spend a token when it runs: it
gives each job it hands out a *start time* (the copy carries it, ``start_at``), the moment its
token is due, at least ``PACED_START_S`` after the round (the hand-off) and at most
``PACED_AHEAD_S`` after that; the worker starts the job then. So:

- the starts follow the bucket exactly, whenever the rounds run: a round that comes late
  (up to ``PACED_AHEAD_S``) loses nothing, as the token is spent at the moment it was due,
  not at the moment the round ran. In steady state (a backlog, free workers, a round at least
  every ``PACED_AHEAD_S``) a rate starts ``N / (1 + MARGIN)`` jobs per interval: 98% of N.
- over any half-open window of one interval, the start times never exceed ``N + B`` (the
  bucket holds at most ``1 + B`` at the window's start and refills fewer than ``N`` in it);
  with no burst, never more than ``N``. The ``MARGIN`` keeps that true of the starts the
  workers really make when one of them starts a job late by up to ``MARGIN`` of the interval
  (20 ms for a rate per second): N + 1 start times are at least ``interval × (1 + MARGIN)`` apart.
- a rate counts starts, retries included; a paced job goes only to an idle slot.
- clock steps: the bucket never refills backwards (a clock stepped back adds no token until
  it passes the last start again); a clock stepped forward adds at most a full bucket.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from recruiter.domain.clock import MAX_AHEAD, too_far_ahead
from recruiter.domain.control import escape, unescape

# A paced job starts at least this long after the round that hands it out (the hand-off's budget).
PACED_START_S = 0.3
# ... and at most this much later than that: a round hands out the starts due that soon, so a
# round that comes this much late still starts each job when its token is due.
PACED_AHEAD_S = 0.5
# A worker never waits longer than this for a start time, whatever the copy says.
MAX_START_WAIT_S = 2.0
START_AT = "start_at"
# The slots are this much longer than interval/N (see the module doc).
MARGIN = 0.02
# Rates a user may ask for; beyond them the number is surely a typo, or a limit that limits nothing.
MAX_COUNT = 1_000_000
MAX_BURST = 1_000_000
MAX_PER_SECOND = 10_000  # far more than rounds hand out: a faster rate would limit nothing
MIN_INTERVAL_S = 0.001
MAX_INTERVAL_S = 366 * 86400
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*(?:\.\d+)?)\s*([smhd])\s*$")
_EPS = 1e-9
_TICK = timedelta(microseconds=1)

# A limit's key: (group, None) for the whole group, (group, tenant) for one tenant of it.
Key = tuple[str, str | None]


@dataclass(frozen=True)
class Rate:
    """``count`` starts per ``per_s`` seconds, and ``burst`` more at once after a quiet spell."""

    count: int
    per_s: float
    burst: int = 0
    text: str = ""

    def __post_init__(self) -> None:
        shown = self.text or f"{self.count}/{self.per_s}s"
        if not 1 <= self.count <= MAX_COUNT:
            raise ValueError(f"invalid rate {shown!r}: the count must be 1 to {MAX_COUNT}")
        if not MIN_INTERVAL_S <= self.per_s <= MAX_INTERVAL_S:
            raise ValueError(f"invalid rate {shown!r}: the interval must be positive, "
                             f"from {MIN_INTERVAL_S}s to a year")
        if self.count / self.per_s > MAX_PER_SECOND:
            raise ValueError(f"invalid rate {shown!r}: at most {MAX_PER_SECOND} starts a second "
                             "(a faster rate would limit nothing: clear the limit instead)")
        if not 0 <= self.burst <= MAX_BURST:
            raise ValueError(f"invalid burst {self.burst}: expected 0 to {MAX_BURST}")

    @classmethod
    def parse(cls, text: str, burst: int = 0) -> Rate:
        """``5/s``, ``100/m``, ``1000/h``, ``3/10s``: a count of starts over an interval."""
        m = _RATE.match(text) if isinstance(text, str) else None
        if m is None:
            raise ValueError(f"invalid rate {text!r}: expected COUNT/UNIT such as 5/s, 100/m or 3/10s "
                             "(units s, m, h, d)")
        count, multiple, unit = int(m.group(1)), m.group(2), m.group(3)
        per = (float(multiple) if multiple else 1.0) * _UNITS[unit]
        if count == 0:
            raise ValueError(f"invalid rate {text!r}: the count must be at least 1 (pause the group instead)")
        if per <= 0:
            raise ValueError(f"invalid rate {text!r}: the interval must be positive")
        return cls(count, per, burst, text.strip().replace(" ", ""))

    @property
    def capacity(self) -> float:
        return 1.0 + self.burst

    @property
    def slot_s(self) -> float:
        """The time one token takes to refill."""
        return self.per_s / self.count * (1 + MARGIN)

    @property
    def per_second(self) -> float:
        """The refill, in tokens a second."""
        return 1.0 / self.slot_s

    def __str__(self) -> str:
        return self.text + (f" (burst {self.burst})" if self.burst else "")


@dataclass(frozen=True)
class Bucket:
    """Tokens of a rate limit at time ``at`` (the last start time spent, which may lie ahead)."""

    tokens: float
    at: datetime

    def refilled(self, rate: Rate, now: datetime) -> Bucket:
        """The bucket at ``now``: never back in time, never above the capacity."""
        if now <= self.at:
            return Bucket(min(self.tokens, rate.capacity), self.at)
        gained = (now - self.at).total_seconds() * rate.per_second
        return Bucket(min(rate.capacity, self.tokens + gained), now)


def horizon(now: datetime) -> tuple[datetime, datetime]:
    """The start times a round at ``now`` may give: from ``now + PACED_START_S`` to ``PACED_AHEAD_S`` later."""
    earliest = now + timedelta(seconds=PACED_START_S)
    return earliest, earliest + timedelta(seconds=PACED_AHEAD_S)


def next_start(rate: Rate, bucket: Bucket, earliest: datetime) -> datetime:
    """The first moment from ``earliest`` (and not before the bucket's last start) at which the
    bucket holds a whole token."""
    b = bucket.refilled(rate, earliest)
    if b.tokens >= 1 - _EPS:
        return b.at
    return b.at + timedelta(seconds=(1 - b.tokens) * rate.slot_s)


def take(rate: Rate, bucket: Bucket, at: datetime) -> Bucket:
    """The bucket once one token is spent at ``at`` (a time from :func:`next_start`)."""
    b = bucket.refilled(rate, at)
    return Bucket(max(0.0, b.tokens - 1), b.at)


def starts_available(rate: Rate, bucket: Bucket, now: datetime) -> int:
    """How many start times a round at ``now`` may give (see :func:`horizon`), spending each
    token the moment it is due."""
    earliest, last = horizon(now)
    b = bucket.refilled(rate, earliest)
    # Tokens are spent as soon as they are whole from here on, so the cap no longer binds.
    ahead = max(0.0, (last - b.at).total_seconds()) * rate.per_second
    return max(0, math.floor(b.tokens + ahead + _EPS))


@dataclass(frozen=True)
class LimitState:
    """The token buckets of the rate limits, as of the last committed round."""

    buckets: Mapping[Key, Bucket] = field(default_factory=dict)
    # Set when the stored state was malformed: a key not in ``buckets`` starts empty then,
    # rather than full, so no burst is handed out that was not earned.
    empty_from: datetime | None = None

    def bucket(self, key: Key, rate: Rate, now: datetime) -> Bucket:
        """``key``'s bucket at ``now``; a limit with no state yet starts full."""
        known = self.buckets.get(key)
        if known is None:
            known = Bucket(rate.capacity, now) if self.empty_from is None else Bucket(0.0, self.empty_from)
        return known.refilled(rate, now)


def with_buckets(state: LimitState, changed: Mapping[Key, Bucket]) -> LimitState:
    return replace(state, buckets={**state.buckets, **changed}) if changed else state


def start_times(rates: Mapping[Key, Rate], state: LimitState, jobs: Sequence[tuple[Key, ...]], now: datetime
                ) -> tuple[list[datetime | None], dict[Key, Bucket]]:
    """When each of ``jobs`` (the limit keys it counts against), handed out at ``now`` in this
    order, starts (None: no rate holds it), and the buckets that change (only those). A job
    held by two rates (its group's and its tenant's) starts when both have a token."""
    earliest, _ = horizon(now)
    changed: dict[Key, Bucket] = {}
    starts: list[datetime | None] = []
    for keys in jobs:
        paced = [k for k in keys if k in rates]
        if not paced:
            starts.append(None)
            continue
        buckets = {k: changed.get(k) or state.bucket(k, rates[k], earliest) for k in paced}
        at = max(next_start(rates[k], buckets[k], earliest) for k in paced)
        for k in paced:
            changed[k] = take(rates[k], buckets[k], at)
        starts.append(at)
    return starts, changed


def wake_at(rates: Mapping[Key, Rate], state: LimitState, now: datetime) -> datetime | None:
    """When a round should next run for the rates that allow no start now: the moment the first
    of their next tokens comes within a round's reach (None: every rate allows a start now)."""
    earliest, last = horizon(now)
    lead = last - now
    late = [next_start(rate, bucket, earliest) - lead for k, rate in rates.items()
            if starts_available(rate, bucket := state.bucket(k, rate, earliest), now) == 0]
    # Never ``now`` itself: times are kept to the microsecond, and a wake that rounds to now would spin.
    return max(now + _TICK, min(late)) if late else None


# -- the token state, kept in the fairness cursor document -----------------------------------

STATE_FIELD = "limiter"


def state_from(cursor_doc: object, now: datetime) -> tuple[LimitState, str | None]:
    """The token state kept in the cursor document. A malformed one starts every bucket empty
    at ``now`` (never a burst that was not earned), and says what was wrong."""
    raw = cursor_doc.get(STATE_FIELD) if isinstance(cursor_doc, Mapping) else None
    if raw is None:
        return LimitState(), None
    buckets: dict[Key, Bucket] = {}
    problem = _state_problem(raw) or _dated_ahead(raw, now)
    if problem is not None:
        return LimitState(empty_from=now), problem
    assert isinstance(raw, Mapping)
    for g, b in (raw.get("groups") or {}).items():
        buckets[(unescape(g), None)] = Bucket(float(b["t"]), b["at"])
    for g, by_tenant in (raw.get("tenants") or {}).items():
        for t, b in by_tenant.items():
            buckets[(unescape(g), unescape(t))] = Bucket(float(b["t"]), b["at"])
    return LimitState(buckets), None


def _bucket_problem(b: object) -> bool:
    return not (isinstance(b, Mapping) and type(b.get("t")) in (int, float) and isinstance(b.get("at"), datetime)
                and math.isfinite(b["t"]) and b["t"] >= 0)


def _state_problem(raw: object) -> str | None:
    if not isinstance(raw, Mapping):
        return f"{STATE_FIELD}: expected an embedded document"
    groups, tenants = raw.get("groups") or {}, raw.get("tenants") or {}
    if not isinstance(groups, Mapping) or not isinstance(tenants, Mapping):
        return f"{STATE_FIELD}: groups and tenants must be embedded documents"
    for g, b in groups.items():
        if _bucket_problem(b):
            return f"{STATE_FIELD}.groups.{g}: expected {{t: tokens >= 0, at: a date}}"
    for g, by_tenant in tenants.items():
        if not isinstance(by_tenant, Mapping) or any(_bucket_problem(b) for b in by_tenant.values()):
            return f"{STATE_FIELD}.tenants.{g}: expected tenant -> {{t: tokens >= 0, at: a date}}"
    return None


def _dated_ahead(raw: Mapping[str, Any], now: datetime) -> str | None:
    """A bucket of the well-formed state ``raw`` dated further ahead of ``now`` than a recruiter writes it
    (:data:`recruiter.domain.clock.MAX_AHEAD`): it would refill only after that date (never back in time)."""
    found = [(f"groups.{g}", b["at"]) for g, b in (raw.get("groups") or {}).items()]
    found += [(f"tenants.{g}.{t}", b["at"]) for g, by_tenant in (raw.get("tenants") or {}).items()
              for t, b in by_tenant.items()]
    return next((f"{STATE_FIELD}.{path}.at: {at.isoformat()} is more than {MAX_AHEAD} ahead of this clock"
                 for path, at in found if too_far_ahead(at, now)), None)


def state_sets(changed: Mapping[Key, Bucket]) -> dict[str, object]:
    """The ``$set`` of a cursor update that stores the ``changed`` buckets (only those)."""
    sets: dict[str, object] = {}
    for (group, tenant), b in changed.items():
        path = (f"{STATE_FIELD}.groups.{escape(group)}" if tenant is None
                else f"{STATE_FIELD}.tenants.{escape(group)}.{escape(tenant)}")
        sets[path] = {"t": round(b.tokens, 6), "at": b.at}
    return sets


def state_document(state: LimitState) -> dict[str, object]:
    """The whole state, for a cursor document written whole."""
    groups: dict[str, object] = {}
    tenants: dict[str, dict[str, object]] = {}
    for (group, tenant), b in state.buckets.items():
        value = {"t": round(b.tokens, 6), "at": b.at}
        if tenant is None:
            groups[escape(group)] = value
        else:
            tenants.setdefault(escape(group), {})[escape(tenant)] = value
    return {"groups": groups, "tenants": tenants}
