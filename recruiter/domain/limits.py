"""Flow control: rate limits and concurrency caps per group and per tenant of a group; pure, no I/O.

What a limit counts (the guarantees, stated for the tests and the docs):

- ``max_running``: jobs of the group (or of the tenant within the group) that are
  *assigned or running* at once, cluster-wide. A job counts from the moment the
  recruiter hands it out (a job held ahead by look-ahead counts) until its outcome
  is applied or it is taken back. The recruiter counts what ``scheduled`` says is
  locked in the limited groups at the start of every round (one indexed read,
  only while a ``max_running`` limit exists), so a new leader never exceeds the
  cap even when its predecessor's last round is unknown.
- ``rate`` ``N/interval`` with ``burst`` B: *starts*, retries included; a start is
  counted when the job is handed out. The rate is paced, as a token bucket of
  ``1 + B`` tokens refilled at ``N`` per interval: one start every ``interval/N``
  in steady state, and up to ``1 + B`` at once after a quiet spell. Over any
  window of one interval (half-open), the starts handed out never exceed
  ``N + B``. A rate-limited group's jobs go only to idle slots, never held ahead
  by look-ahead, and each starts ``PACED_START_S`` after the round that handed
  it out (its copy carries ``start_at``), so the starts the workers make keep the
  hand-outs' spacing, and their bound, whenever a hand-off takes less than that.
- The token state lives in the fairness cursor document and is written by the
  round that spent tokens, inside its fenced transaction: a new leader goes on
  from the state of the last committed round, and a round that did not commit
  spent nothing.
- Clock steps: the refill never goes backwards (a clock stepped back adds no
  token until it passes the last spend again); a clock stepped forward adds at
  most a full bucket (``1 + B`` starts), never more.

Fairness: a limit only removes a group, or a tenant of a group, from the round
once its allowance is spent; the others are served as before, and workers that
take several groups go on to the next one (work-conserving: no slot idles while
a job that no limit holds back waits for it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from recruiter.domain.clock import MAX_AHEAD, too_far_ahead
from recruiter.domain.control import escape, unescape
from recruiter.domain.selection import Allowance

LIMITS_ID = "limits"
# A rate-limited job starts this long after the round that hands it out (the copy it carries
# says when: ``start_at``), so the starts the workers make keep the spacing of the hand-outs
# whatever each hand-off takes, up to this long.
PACED_START_S = 0.3
START_AT = "start_at"
# Rates and caps a user may ask for; beyond them the number is surely a typo.
MAX_COUNT = 1_000_000
MAX_BURST = 1_000_000
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*(?:\.\d+)?)\s*([smhd])\s*$")


@dataclass(frozen=True)
class Rate:
    """``count`` starts per ``per_s`` seconds, and ``burst`` more at once after a quiet spell."""

    count: int
    per_s: float
    burst: int = 0
    text: str = ""

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_COUNT:
            raise ValueError(f"invalid rate {self.text or self.count!r}: the count must be 1 to {MAX_COUNT}")
        if not 0 < self.per_s <= 366 * 86400:
            raise ValueError(f"invalid rate {self.text!r}: the interval must be positive and at most a year")
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
        return cls(count, per, burst, text.strip().replace(" ", ""))

    @property
    def capacity(self) -> float:
        return 1.0 + self.burst

    @property
    def per_second(self) -> float:
        return self.count / self.per_s

    def __str__(self) -> str:
        return self.text + (f" (burst {self.burst})" if self.burst else "")


@dataclass(frozen=True)
class Limit:
    max_running: int | None = None
    rate: Rate | None = None

    def __post_init__(self) -> None:
        if self.max_running is not None and not 1 <= self.max_running <= MAX_COUNT:
            raise ValueError(f"invalid max_running {self.max_running}: expected 1 to {MAX_COUNT} "
                             "(pause the group to run none)")
        if self.max_running is None and self.rate is None:
            raise ValueError("a limit needs max_running, a rate, or both")

    def document(self) -> dict[str, object]:
        doc: dict[str, object] = {}
        if self.max_running is not None:
            doc["max_running"] = self.max_running
        if self.rate is not None:
            doc["rate"] = self.rate.text
            doc["burst"] = self.rate.burst
        return doc

    def __str__(self) -> str:
        parts = []
        if self.rate is not None:
            parts.append(f"rate {self.rate}")
        if self.max_running is not None:
            parts.append(f"max_running {self.max_running}")
        return ", ".join(parts)


# A limit's key: (group, None) for the whole group, (group, tenant) for one tenant of it.
Key = tuple[str, str | None]


def describe_key(key: Key) -> str:
    group, tenant = key
    if tenant is None:
        return f"group {group}"
    return f"tenant {tenant or '(default)'} of group {group}"


@dataclass(frozen=True)
class Limits:
    """Every limit set, by key."""

    by_key: Mapping[Key, Limit] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.by_key)

    def capped_groups(self) -> list[str]:
        """The groups with a ``max_running`` limit, on the group or on one of its tenants."""
        return sorted({g for (g, _), lim in self.by_key.items() if lim.max_running is not None})

    def paced(self) -> frozenset[Key]:
        return frozenset(k for k, lim in self.by_key.items() if lim.rate is not None)


NO_LIMITS = Limits()


@dataclass(frozen=True)
class Bucket:
    """Tokens of a rate limit at time ``at``."""

    tokens: float
    at: datetime

    def refilled(self, rate: Rate, now: datetime) -> Bucket:
        """The bucket at ``now``: never back in time, never above the capacity."""
        if now <= self.at:
            return Bucket(min(self.tokens, rate.capacity), self.at)
        gained = (now - self.at).total_seconds() * rate.per_second
        return Bucket(min(rate.capacity, self.tokens + gained), now)


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


def allowance(limits: Limits, state: LimitState, running: Mapping[Key, int], now: datetime) -> Allowance:
    """How many more jobs each limited group, and tenant of a group, may be handed out now:
    the least of what ``max_running`` leaves (``running`` counts assigned and running jobs) and
    the whole tokens of its rate."""
    remaining: dict[Key, int] = {}
    for key, lim in limits.by_key.items():
        left = math.inf
        if lim.max_running is not None:
            left = lim.max_running - running.get(key, 0)
        if lim.rate is not None:
            left = min(left, math.floor(state.bucket(key, lim.rate, now).tokens + 1e-9))
        remaining[key] = max(0, int(left))
    return Allowance(remaining, limits.paced())


def spend(limits: Limits, state: LimitState, started: Mapping[Key, int], now: datetime) -> dict[Key, Bucket]:
    """The buckets that change when ``started`` jobs are handed out at ``now`` (only those)."""
    changed: dict[Key, Bucket] = {}
    for key, n in started.items():
        lim = limits.by_key.get(key)
        if not n or lim is None or lim.rate is None:
            continue
        bucket = state.bucket(key, lim.rate, now)
        changed[key] = Bucket(max(0.0, bucket.tokens - n), bucket.at)
    return changed


def with_buckets(state: LimitState, changed: Mapping[Key, Bucket]) -> LimitState:
    return replace(state, buckets={**state.buckets, **changed}) if changed else state


def keys_of(group: str, tenant: str) -> tuple[Key, Key]:
    """The two keys a job of ``group`` and ``tenant`` counts against."""
    return (group, None), (group, tenant)


def count_by_key(jobs: Iterable[tuple[str, str]], limits: Limits) -> dict[Key, int]:
    """How many of ``jobs`` ((group, tenant) pairs) count against each limited key."""
    counts: dict[Key, int] = {}
    for group, tenant in jobs:
        for key in keys_of(group, tenant):
            if key in limits.by_key:
                counts[key] = counts.get(key, 0) + 1
    return counts


def count_locked(docs: Iterable[Mapping[str, object]], limits: Limits) -> dict[Key, int]:
    """How many of the locked jobs ``docs`` (their ``group`` and ``tenant``, as read: untrusted)
    count against each limited key; a job whose group or tenant is not a name counts nowhere."""
    pairs = [(g, t) for d in docs
             if isinstance(g := d.get("group"), str) and isinstance(t := d.get("tenant") or "", str)]
    return count_by_key(pairs, limits)


# -- the documents: {_id: "limits"} (set by the CLI and the API), the state in the cursor ------

_escape, _unescape = escape, unescape  # names as field names: the cursor's escaping


def limit_path(group: str, tenant: str | None) -> str:
    """Where a limit is kept in the ``limits`` document."""
    if tenant is None:
        return f"groups.{_escape(group)}"
    return f"tenants.{_escape(group)}.{_escape(tenant)}"


def limit_from(doc: object) -> tuple[Limit | None, str | None]:
    """A stored limit, or None and what is wrong with it (untrusted: mongosh edits, other versions)."""
    if not isinstance(doc, Mapping):
        return None, "expected an embedded document"
    max_running, rate, burst = doc.get("max_running"), doc.get("rate"), doc.get("burst", 0)
    if max_running is not None and not _integer(max_running):
        return None, f"max_running: expected an integer, got {type(max_running).__name__}"
    if rate is not None and not isinstance(rate, str):
        return None, f"rate: expected a text such as 5/s, got {type(rate).__name__}"
    if not _integer(burst):
        return None, f"burst: expected an integer, got {type(burst).__name__}"
    try:
        return Limit(None if max_running is None else int(max_running),
                     Rate.parse(rate, int(burst)) if rate is not None else None), None
    except ValueError as exc:
        return None, str(exc)


def _integer(value: object) -> bool:
    """An integer as stored: an int or a BSON Int64 (mongosh's NumberLong, an int subclass), not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def read_limits(doc: object) -> tuple[Limits, list[str]]:
    """The limits in the stored document, and what is wrong in it (a malformed limit is left out:
    that group or tenant is not limited until it is fixed, and the round says so once)."""
    if doc is None:
        return NO_LIMITS, []
    if not isinstance(doc, Mapping):
        return NO_LIMITS, ["document: expected an embedded document"]
    found: dict[Key, Limit] = {}
    problems: list[str] = []
    groups, tenants = doc.get("groups") or {}, doc.get("tenants") or {}
    if not isinstance(groups, Mapping):
        problems.append("groups: expected an embedded document")
        groups = {}
    if not isinstance(tenants, Mapping):
        problems.append("tenants: expected an embedded document")
        tenants = {}
    for g, value in groups.items():
        _add(found, problems, (_unescape(str(g)), None), value, f"groups.{g}")
    for g, by_tenant in tenants.items():
        if not isinstance(by_tenant, Mapping):
            problems.append(f"tenants.{g}: expected an embedded document")
            continue
        for t, value in by_tenant.items():
            _add(found, problems, (_unescape(str(g)), _unescape(str(t))), value, f"tenants.{g}.{t}")
    return Limits(found), problems


def _add(found: dict[Key, Limit], problems: list[str], key: Key, value: object, path: str) -> None:
    limit, problem = limit_from(value)
    if limit is None:
        problems.append(f"{path}: {problem}")
    else:
        found[key] = limit


STATE_FIELD = "limiter"  # in the fairness cursor document


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
        buckets[(_unescape(g), None)] = Bucket(float(b["t"]), b["at"])
    for g, by_tenant in (raw.get("tenants") or {}).items():
        for t, b in by_tenant.items():
            buckets[(_unescape(g), _unescape(t))] = Bucket(float(b["t"]), b["at"])
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
        path = (f"{STATE_FIELD}.groups.{_escape(group)}" if tenant is None
                else f"{STATE_FIELD}.tenants.{_escape(group)}.{_escape(tenant)}")
        sets[path] = {"t": round(b.tokens, 6), "at": b.at}
    return sets


def state_document(state: LimitState) -> dict[str, object]:
    """The whole state, for a cursor document written whole."""
    groups: dict[str, object] = {}
    tenants: dict[str, dict[str, object]] = {}
    for (group, tenant), b in state.buckets.items():
        value = {"t": round(b.tokens, 6), "at": b.at}
        if tenant is None:
            groups[_escape(group)] = value
        else:
            tenants.setdefault(_escape(group), {})[_escape(tenant)] = value
    return {"groups": groups, "tenants": tenants}


def waiting_line(key: Key, limit: Limit, running: int, bucket: Bucket | None, now: datetime) -> str:
    """Why a job of ``key`` waits, in one line (``jobs explain``)."""
    what = describe_key(key)
    if limit.max_running is not None and running >= limit.max_running:
        return f"held by a limit: {what} runs {running} of max_running {limit.max_running}"
    if limit.rate is not None and bucket is not None and bucket.tokens < 1:
        wait = timedelta(seconds=(1 - bucket.tokens) / limit.rate.per_second)
        return f"held by a limit: {what} is at its rate of {limit.rate} (next start in {wait.total_seconds():.1f}s)"
    return f"limited ({what}: {limit}), not held now"

