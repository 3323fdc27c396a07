"""History over time: per group, jobs done, failed and their wait, counted per minute and per hour.

The leading recruiter counts the outcomes its rounds apply (:class:`Tally`) into buckets: a
minute bucket kept :data:`KEPT` ``[MINUTE]`` (a day) and an hour bucket kept ``[HOUR]`` (30
days), for each group and for the whole queue (``group`` None). It writes them once a minute
(:mod:`recruiter.processes.timeline`) into the ``timeline`` collection, one document per
(resolution, bucket, group, leader epoch); a TTL index on ``expires_at`` removes them.

Counting that cannot count twice: a document holds the totals of ONE leader epoch, and each
flush sets them (``$set``) to what that leader has counted so far in the bucket, never adds
to them. A flush sent twice (a retry), or late, writes the same totals again. A new leader
has a new epoch, hence documents of its own; readers sum a bucket's documents over epochs
(:func:`merge`). An outcome is counted by the leader whose round committed it, once: a round
that aborts emits nothing (its events wait for the commit). What a deposed leader counted
after its last flush is lost (its fenced write fails): history undercounts a failover's
minute, it never overcounts.

Coverage: the whole-queue document of a bucket is written for every minute a leader ran,
even with zero counts, so a reader tells "nothing happened" (a document with zero) from
"no leader was recording" (no document: a gap, drawn as one).

Invariant: pure; times are aware UTC datetimes, truncated to the bucket's start.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from recruiter.domain.events import OutcomeApplied

Resolution = Literal["m", "h"]
MINUTE: Resolution = "m"
HOUR: Resolution = "h"
WIDTH: dict[Resolution, timedelta] = {MINUTE: timedelta(minutes=1), HOUR: timedelta(hours=1)}
KEPT: dict[Resolution, timedelta] = {MINUTE: timedelta(days=1), HOUR: timedelta(days=30)}
# The outcomes counted as failures: an attempt that ran and did not end well.
FAILED_KINDS = frozenset({"failed", "timed-out", "crashed", "interrupted"})
FIELDS = ("done", "failed", "wait_n", "wait_s", "wait_max_s")


def bucket_start(at: datetime, resolution: Resolution) -> datetime:
    """The start of the bucket holding ``at``."""
    at = at.replace(second=0, microsecond=0)
    return at.replace(minute=0) if resolution == HOUR else at


@dataclass
class Totals:
    """What a bucket counted: attempts done and failed, and the wait of those that ran
    (from when they were due to when they started): how many, their sum and the longest."""

    done: int = 0
    failed: int = 0
    wait_n: int = 0
    wait_s: float = 0.0
    wait_max_s: float = 0.0

    def add(self, kind: str, wait_s: float | None) -> None:
        if kind == "done":
            self.done += 1
        elif kind in FAILED_KINDS:
            self.failed += 1
        if wait_s is not None and wait_s >= 0:
            self.wait_n += 1
            self.wait_s += wait_s
            self.wait_max_s = max(self.wait_max_s, wait_s)

    def merge(self, other: Totals) -> None:
        self.done += other.done
        self.failed += other.failed
        self.wait_n += other.wait_n
        self.wait_s += other.wait_s
        self.wait_max_s = max(self.wait_max_s, other.wait_max_s)

    @property
    def wait_mean_s(self) -> float | None:
        return self.wait_s / self.wait_n if self.wait_n else None

    @classmethod
    def of(cls, doc: Mapping[str, object]) -> Totals | None:
        """The totals a stored document holds, or None if a field is not a number (set aside)."""
        values: list[float] = []
        for name in FIELDS:
            value = doc.get(name, 0)
            if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value < 1e15:
                return None
            values.append(value)
        done, failed, wait_n, wait_s, wait_max_s = values
        return cls(int(done), int(failed), int(wait_n), float(wait_s), float(wait_max_s))


Key = tuple[Resolution, datetime, str | None]  # (resolution, bucket start, group; None: the whole queue)


@dataclass
class Tally:
    """One leader's counts, by bucket, not yet known to be written; :meth:`documents` for a flush.

    Buckets are kept while they may still change (the current minute and hour) or are not
    written yet; :meth:`written` drops those that are over and written."""

    buckets: dict[Key, Totals] = field(default_factory=dict)
    dirty: set[Key] = field(default_factory=set)

    def count(self, group: str | None, kind: str, wait_s: float | None, at: datetime) -> None:
        """An applied outcome of ``group`` (``kind``: the attempt's outcome), at ``at``."""
        for resolution in (MINUTE, HOUR):
            start = bucket_start(at, resolution)
            for key in ((resolution, start, None), (resolution, start, group)):
                self.buckets.setdefault(key, Totals()).add(kind, wait_s)
                self.dirty.add(key)

    def cover(self, at: datetime) -> None:
        """The leader ran at ``at``: the whole-queue buckets of that minute and hour exist, zero or not."""
        for resolution in (MINUTE, HOUR):
            key = (resolution, bucket_start(at, resolution), None)
            if key not in self.buckets:
                self.buckets[key] = Totals()
                self.dirty.add(key)

    def pending(self) -> list[Key]:
        """The buckets counted since they were last written."""
        return sorted(self.dirty, key=_order)

    def documents(self, keys: Iterable[Key], epoch: int) -> list[dict[str, object]]:
        """The documents a flush sets for ``keys``: their totals so far (see the module doc)."""
        return [bucket_document(key, self.buckets[key], epoch) for key in keys]

    def written(self, keys: Iterable[Key], now: datetime) -> None:
        """``keys`` were written: clean; those whose bucket is over are forgotten."""
        for key in keys:
            self.dirty.discard(key)
            resolution, start, _ = key
            if start + WIDTH[resolution] <= now and key not in self.dirty:
                self.buckets.pop(key, None)

    def expire(self, now: datetime) -> None:
        """Forget the buckets past their retention (:data:`KEPT`): never written, were their writes
        refused for that long, they would be removed at once. Bounds what a leader that cannot write keeps."""
        for key in [k for k in self.buckets if k[1] + WIDTH[k[0]] + KEPT[k[0]] <= now]:
            self.buckets.pop(key)
            self.dirty.discard(key)

    def clear(self) -> None:
        self.buckets.clear()
        self.dirty.clear()


def _order(key: Key) -> tuple[str, datetime, str]:
    return key[0], key[1], key[2] or ""


def bucket_id(key: Key, epoch: int) -> str:
    """The document id of a bucket of one epoch: the same bucket of the same leader is one document."""
    resolution, start, group = key
    return f"{resolution}|{start:%Y-%m-%dT%H:%M}|{epoch}|{'' if group is None else 'g:' + group}"


def bucket_document(key: Key, totals: Totals, epoch: int) -> dict[str, object]:
    resolution, start, group = key
    return {"_id": bucket_id(key, epoch), "res": resolution, "at": start, "group": group, "epoch": epoch,
            "done": totals.done, "failed": totals.failed, "wait_n": totals.wait_n, "wait_s": totals.wait_s,
            "wait_max_s": totals.wait_max_s, "expires_at": start + WIDTH[resolution] + KEPT[resolution]}


@dataclass(frozen=True)
class Series:
    """One group's buckets over a range, oldest first; None where no leader was recording (a gap)."""

    resolution: Resolution
    since: datetime  # the first bucket's start
    points: list[tuple[datetime, Totals | None]]
    malformed: int = 0  # stored documents set aside (a field not a number)


def merge(docs: Iterable[Mapping[str, object]], resolution: Resolution, since: datetime, until: datetime,
          group: str | None) -> Series:
    """The series of ``group`` (None: the whole queue) from the stored documents of the range: each
    bucket's documents summed over epochs; a bucket without a whole-queue document is a gap."""
    width = WIDTH[resolution]
    first = bucket_start(since, resolution)
    covered: set[datetime] = set()
    sums: dict[datetime, Totals] = {}
    malformed = 0
    for doc in docs:
        if doc.get("res") != resolution:
            continue
        at = doc.get("at")
        totals = Totals.of(doc)
        if not isinstance(at, datetime) or totals is None:
            malformed += 1
            continue
        at = bucket_start(at, resolution)
        if doc.get("group") is None:
            covered.add(at)
        if doc.get("group") == group:
            sums.setdefault(at, Totals()).merge(totals)
    points: list[tuple[datetime, Totals | None]] = []
    at = first
    while at <= until:
        points.append((at, sums.get(at, Totals()) if at in covered else None))
        at += width
    return Series(resolution, first, points, malformed)


def applied_event(job: Mapping[str, object], outcome: Mapping[str, object], now: datetime) -> OutcomeApplied:
    """What the history counts of ``outcome`` applied to ``job`` (both as read: untrusted; a field
    of the wrong type counts as unknown): its group, the attempt's outcome and its wait."""
    execution = outcome.get("execution")
    run: Mapping[str, object] = execution if isinstance(execution, Mapping) else {}
    kind = run.get("outcome")
    due, started = run.get("scheduled_at"), run.get("started_at")
    wait_s = (started - due).total_seconds() if isinstance(due, datetime) and isinstance(started, datetime) else None
    group = job.get("group")
    return OutcomeApplied(group if isinstance(group, str) else None,
                          kind if isinstance(kind, str) else "judged", wait_s, now)
