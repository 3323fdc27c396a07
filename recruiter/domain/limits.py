"""Flow control: rate limits and concurrency caps per group and per tenant of a group; pure, no I/O.

What a limit counts (the guarantees, stated for the tests and the docs):

- ``max_running``: jobs of the group (or of the tenant within the group) that are
  *assigned or running* at once, cluster-wide. A job counts from the moment the
  recruiter hands it out (a job held ahead by look-ahead counts) until its outcome
  is applied or it is taken back. The recruiter counts what ``scheduled`` says is
  locked in the limited groups at the start of every round (one indexed read,
  only while a ``max_running`` limit exists), so a new leader never exceeds the
  cap even when its predecessor's last round is unknown.
- ``rate`` ``N/interval`` with ``burst`` B: *starts*, retries included, paced by a token
  bucket; each job handed out carries its start time, the moment its token is due
  (:mod:`recruiter.domain.pacing` states what a rate guarantees).
- The token state lives in the fairness cursor document and is written by the
  round that spent tokens, inside its fenced transaction: a new leader goes on
  from the state of the last committed round, and a round that did not commit
  spent nothing.
- A stored limit that is malformed holds its group or tenant (:mod:`recruiter.domain.stored_limits`):
  at the last good limit the leader read, or whole (``held``: nothing starts) if it read none.

Fairness: a limit only removes a group, or a tenant of a group, from the round
once its allowance is spent; the others are served as before, and workers that
take several groups go on to the next one (work-conserving: no slot idles while
a job that no limit holds back waits for it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from recruiter.domain.pacing import (
    MAX_COUNT,
    PACED_START_S,
    START_AT,
    Bucket,
    Key,
    LimitState,
    Rate,
    next_start,
    starts_available,
)
from recruiter.domain.selection import Allowance

__all__ = ["LIMITS_ID", "PACED_START_S", "START_AT", "Bucket", "Key", "LimitState", "Rate"]

LIMITS_ID = "limits"


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


def describe_key(key: Key) -> str:
    group, tenant = key
    if tenant is None:
        return f"group {group}"
    return f"tenant {tenant or '(default)'} of group {group}"


@dataclass(frozen=True)
class Limits:
    """Every limit set, by key."""

    by_key: Mapping[Key, Limit] = field(default_factory=dict)
    # Keys whose stored limit is malformed with no good one seen: nothing of them starts.
    held: frozenset[Key] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.by_key) or bool(self.held)

    def rates(self) -> dict[Key, Rate]:
        return {k: lim.rate for k, lim in self.by_key.items() if lim.rate is not None}

    def capped_groups(self) -> list[str]:
        """The groups with a ``max_running`` limit, on the group or on one of its tenants."""
        return sorted({g for (g, _), lim in self.by_key.items() if lim.max_running is not None})

    def paced(self) -> frozenset[Key]:
        return frozenset(k for k, lim in self.by_key.items() if lim.rate is not None)

    def counts(self, key: Key) -> bool:
        """Whether jobs of ``key`` are counted (a limit, or held)."""
        return key in self.by_key or key in self.held


NO_LIMITS = Limits()


def allowance(limits: Limits, state: LimitState, running: Mapping[Key, int], now: datetime) -> Allowance:
    """How many more jobs each limited group, and tenant of a group, may be handed out now:
    the least of what ``max_running`` leaves (``running`` counts assigned and running jobs) and
    the starts its rate allows this round (:func:`recruiter.domain.pacing.starts_available`);
    none for a held key."""
    remaining: dict[Key, int] = {}
    for key, lim in limits.by_key.items():
        left = math.inf
        if lim.max_running is not None:
            left = lim.max_running - running.get(key, 0)
        if lim.rate is not None:
            left = min(left, starts_available(lim.rate, state.bucket(key, lim.rate, now), now))
        remaining[key] = max(0, int(left))
    for key in limits.held:
        remaining[key] = 0
    return Allowance(remaining, limits.paced())


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


def waiting_line(key: Key, limit: Limit, running: int, bucket: Bucket | None, now: datetime) -> str:
    """Why a job of ``key`` waits, in one line (``jobs explain``)."""
    what = describe_key(key)
    if limit.max_running is not None and running >= limit.max_running:
        return f"held by a limit: {what} runs {running} of max_running {limit.max_running}"
    if limit.rate is not None and bucket is not None and starts_available(limit.rate, bucket, now) < 1:
        wait = next_start(limit.rate, bucket, now) - now
        return f"held by a limit: {what} is at its rate of {limit.rate} (next start in {wait.total_seconds():.1f}s)"
    return f"limited ({what}: {limit}), not held now"


def held_line(key: Key, problem: str) -> str:
    """Why a job of ``key`` waits when its stored limit is malformed (``jobs explain``)."""
    return (f"held by a limit: the stored limit of {describe_key(key)} is malformed ({problem}); the recruiter "
            "holds it at the last good limit it read, and starts none of its jobs if it read none, until it is fixed")

