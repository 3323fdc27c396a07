"""Periodic jobs: a schedule's definition, its slots, and which slots a firing fires (pure).

A schedule (one ``schedules`` document, ``_id`` its name) has either a cron
expression, read in its IANA timezone by `cronsim <https://github.com/cuu508/cronsim>`_,
or an interval (``every``). Its slots are the instants it is due at:

- cron: cronsim's matches, in UTC, strictly increasing. Across DST changes,
  an expression with a fixed minute and hour (``30 2 * * *``) follows Debian
  cron: a time in the skipped hour fires at the transition (02:30 on the day
  clocks go 02:00 -> 03:00 fires at 03:00), and a time in the repeated hour
  fires once (the first pass). An expression with ``*`` in its minute or hour
  (``*/15 * * * *``) runs on real time: wall times of the skipped hour do not
  exist and do not fire (the slots stay 15 minutes apart), and both passes of
  the repeated hour fire, being different instants (still 15 minutes apart);
- ``every``: the multiples of the interval since the Unix epoch, so every
  recruiter (and every restart) computes the same slots.

Each slot fires at ``slot + jitter``, the jitter a hash of (name, slot) below
``jitter_s``: repeated rounds compute the same fire time. A slot's occurrence
has the unique key ``"<name>@<slot ISO 8601 UTC>"`` with scope ``forever``
(:mod:`recruiter.domain.unique`), which is what makes a slot fire at most once.

When a firing finds several slots passed (the recruiter was down), catch-up
says which fire: ``none`` the latest only, ``all`` the last ``limit``, ``within``
those at most ``within_s`` old; the others are skipped and counted (reason
``catch-up``). With ``overlap="skip"``, while the previous occurrence is
unfinished every passed slot is skipped and counted (reason ``overlap``).

Invariant: pure; every definition is checked before it is stored
(:class:`ScheduleRefused`, one line), and every document read back is checked
again (:func:`definition_of`): a malformed one is a problem string, never an exception.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from recruiter.domain.durations import MAX_DURATION, as_timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX_NAME_CHARS = 200
MAX_CRON_CHARS = 200
MIN_EVERY_S = 1.0
DEFAULT_CATCH_UP_LIMIT = 10
MAX_CATCH_UP_LIMIT = 1_000
# A cron schedule's jitter must be shorter than the shortest gap among its next matches.
GAPS_SAMPLED = 24
# Counting the slots a long downtime missed stops here (a cron firing every second for days).
MAX_SLOTS_SCANNED = 100_000
OVERLAP = ("skip", "allow")
CATCH_UP = ("none", "all", "within")


class ScheduleRefused(ValueError):
    """A schedule definition that cannot be stored; one line, nothing was written."""


@dataclass(frozen=True)
class CatchUp:
    mode: str = "none"
    limit: int = DEFAULT_CATCH_UP_LIMIT
    within_s: float | None = None

    def document(self) -> dict[str, Any]:
        return {"mode": self.mode, "limit": self.limit, "within_s": self.within_s}


@dataclass(frozen=True)
class Definition:
    """What a schedule fires and when: everything its ``version`` covers."""

    name: str
    cron: str | None
    every_s: float | None
    tz: str
    job: dict[str, Any] = field(hash=False)
    overlap: str = "skip"
    catch_up: CatchUp = CatchUp()
    jitter_s: float = 0.0

    def fields(self) -> dict[str, Any]:
        """The definition's fields of the ``schedules`` document (with ``version``)."""
        doc = {"cron": self.cron, "every_s": self.every_s, "tz": self.tz, "job": self.job,
               "overlap": self.overlap, "catch_up": self.catch_up.document(), "jitter_s": self.jitter_s}
        return {**doc, "version": version_of(doc)}


def version_of(fields: dict[str, Any]) -> str:
    """A hash of a definition's fields: it changes when the definition changes."""
    text = json.dumps(fields, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# -- checking ------------------------------------------------------------------------------


def check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ScheduleRefused(f"a schedule name must be a non-empty string, got {name!r:.60}")
    if len(name) > MAX_NAME_CHARS:
        raise ScheduleRefused(f"a schedule name must be at most {MAX_NAME_CHARS} characters, got {len(name)}")
    return name


def check_tz(tz: object) -> ZoneInfo:
    if not isinstance(tz, str) or not tz:
        raise ScheduleRefused(f"tz must be an IANA timezone name like 'Europe/Rome', got {tz!r:.60}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleRefused(f"unknown timezone {tz!r:.60} (expected an IANA name like 'Europe/Rome')") from None


def check_cron(expr: object, tz: ZoneInfo) -> str:
    if not isinstance(expr, str) or not expr.strip() or len(expr) > MAX_CRON_CHARS:
        raise ScheduleRefused(f"cron must be a cron expression like '0 3 * * *', got {expr!r:.60}")
    try:
        next(CronSim(expr, datetime.now(tz)))
    except CronSimError as exc:
        raise ScheduleRefused(f"invalid cron expression {expr!r:.60}: {exc}") from None
    except StopIteration:
        raise ScheduleRefused(f"cron expression {expr!r:.60} never matches") from None
    return expr


def check_every(every: object) -> float:
    try:
        td = as_timedelta(every, "every")
    except ValueError as exc:
        raise ScheduleRefused(str(exc)) from None
    seconds = round(td.total_seconds(), 3)
    if seconds < MIN_EVERY_S:
        raise ScheduleRefused(f"every must be at least {MIN_EVERY_S:g}s, got {every!r:.60}")
    return seconds


def _shortest_cron_gap_s(expr: str, zone: ZoneInfo) -> float | None:
    """The shortest gap between the next :data:`GAPS_SAMPLED` matches of a cron expression."""
    try:
        matches = CronSim(expr, datetime.now(zone))
        times = [next(matches) for _ in range(GAPS_SAMPLED + 1)]
    except (StopIteration, CronSimError):
        return None
    return min((b - a).total_seconds() for a, b in itertools.pairwise(times))


def check_catch_up(catch_up: object) -> CatchUp:
    if catch_up in ("none", "all"):
        return CatchUp(str(catch_up))
    if isinstance(catch_up, timedelta | str):
        try:
            within = as_timedelta(catch_up, "catch_up").total_seconds()
        except ValueError:
            within = 0.0
        if within > 0:
            return CatchUp("within", DEFAULT_CATCH_UP_LIMIT, within)
    raise ScheduleRefused(f"catch_up must be 'none', 'all' or a positive timedelta (within), got {catch_up!r:.60}")


def check_jitter(jitter: object) -> float:
    if jitter is None:
        return 0.0
    try:
        return as_timedelta(jitter, "jitter").total_seconds()
    except ValueError as exc:
        raise ScheduleRefused(str(exc)) from None


def define(name: object, *, cron: object = None, every: object = None, tz: object = "UTC",
           job: dict[str, Any], overlap: object = "skip", catch_up: object = "none",
           jitter: object = None) -> Definition:
    """A checked definition; :class:`ScheduleRefused` (one line) for anything that cannot be stored."""
    name = check_name(name)
    zone = check_tz(tz)
    if (cron is None) == (every is None):
        raise ScheduleRefused("a schedule needs exactly one of cron= or every=")
    expr = check_cron(cron, zone) if cron is not None else None
    every_s = check_every(every) if every is not None else None
    if overlap not in OVERLAP:
        raise ScheduleRefused(f"overlap must be 'skip' or 'allow', got {overlap!r:.60}")
    jitter_s = check_jitter(jitter)
    interval_s = every_s if every_s is not None else _shortest_cron_gap_s(str(expr), zone)
    if jitter_s > 0 and interval_s is not None and jitter_s >= interval_s:
        raise ScheduleRefused(f"jitter ({jitter_s:g}s) must be shorter than the interval ({interval_s:g}s)")
    return Definition(name, expr, every_s, str(tz), job, str(overlap), check_catch_up(catch_up), jitter_s)


def _number(value: object) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None  # type: ignore[arg-type]


def _catch_up_of(doc: object) -> CatchUp:
    if not isinstance(doc, dict) or doc.get("mode") not in CATCH_UP:
        raise ScheduleRefused(f"catch_up is malformed: {doc!r:.60}")
    limit = doc.get("limit", DEFAULT_CATCH_UP_LIMIT)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_CATCH_UP_LIMIT:
        raise ScheduleRefused(f"catch_up.limit must be an integer from 1 to {MAX_CATCH_UP_LIMIT}, got {limit!r:.60}")
    within = _number(doc.get("within_s"))
    if doc["mode"] == "within" and (within is None or not 0 < within <= MAX_DURATION.total_seconds()):
        raise ScheduleRefused(f"catch_up.within_s must be a positive number of seconds up to a century, "
                              f"got {doc.get('within_s')!r:.60}")
    return CatchUp(doc["mode"], limit, within)


def definition_of(doc: object) -> Definition | str:
    """The definition a ``schedules`` document holds, or what is wrong with it (untrusted input).
    Its other fields' shape is :func:`recruiter.domain.schedule_view.schedule_problem`'s to check."""
    if not isinstance(doc, dict):
        return "not a document"
    try:
        job = doc.get("job")
        if not isinstance(job, dict):
            raise ScheduleRefused("job is not a document")
        every = _number(doc.get("every_s"))
        if doc.get("every_s") is not None and every is None:
            raise ScheduleRefused(f"every_s is not a number: {doc.get('every_s')!r:.60}")
        jitter = _number(doc.get("jitter_s", 0.0))
        defn = define(doc.get("_id"), cron=doc.get("cron"), every=every, tz=doc.get("tz", "UTC"), job=job,
                      overlap=doc.get("overlap", "skip"), catch_up="none",
                      jitter=jitter if jitter is not None and jitter >= 0 else "bad")
        return Definition(defn.name, defn.cron, defn.every_s, defn.tz, job, defn.overlap,
                          _catch_up_of(doc.get("catch_up", {"mode": "none"})), defn.jitter_s)
    except ScheduleRefused as exc:
        return str(exc)


# -- slots ----------------------------------------------------------------------------------


def _micros(dt: datetime) -> int:
    delta = dt.astimezone(UTC) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def next_slot(defn: Definition, after: datetime) -> datetime | None:
    """The first slot strictly after ``after`` (aware UTC); None if the cron never matches again."""
    if defn.every_s is not None:
        every_us = round(defn.every_s * 1000) * 1000
        k = _micros(after) // every_us + 1
        return EPOCH + timedelta(microseconds=k * every_us)
    assert defn.cron is not None
    after = after.astimezone(UTC)
    try:
        matches = CronSim(defn.cron, after.astimezone(ZoneInfo(defn.tz)))
        for _ in range(MAX_SLOTS_SCANNED):
            slot = next(matches).astimezone(UTC)
            if slot > after:  # a wall time of the repeated hour's second pass maps before ``after``
                return slot
    except (StopIteration, CronSimError):
        return None
    return None


def jitter_of(defn: Definition, slot: datetime) -> timedelta:
    """The slot's jitter: a hash of (name, slot), below ``jitter_s``, whole milliseconds."""
    if defn.jitter_s <= 0:
        return timedelta()
    digest = hashlib.sha256(f"{defn.name}@{slot_iso(slot)}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return timedelta(milliseconds=math.floor(fraction * defn.jitter_s * 1000))


def fire_at(defn: Definition, slot: datetime | None) -> datetime | None:
    return None if slot is None else slot + jitter_of(defn, slot)


def slot_iso(slot: datetime) -> str:
    return slot.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def slot_key(name: str, slot: datetime) -> str:
    """The unique key of a slot's occurrence."""
    return f"{name}@{slot_iso(slot)}"


# A fired slot's reservation is kept this long past the catch-up window: a margin for the
# clocks of the processes that declare schedules (a re-declaration starts from the declaring
# process's "now", so one whose clock is behind could otherwise reach back to a fired slot).
RESERVATION_MARGIN = timedelta(hours=1)
# Expired reservations a firing deletes at most, inside its transaction (a backlog left by an
# older version, which kept them for ever, goes down by this much per firing).
PRUNE_BATCH = 100


def catch_up_window(defn: Definition) -> timedelta:
    """How far back a firing may still reach: the slots ``catch_up`` could fire after a downtime."""
    if defn.catch_up.mode == "within":
        return timedelta(seconds=defn.catch_up.within_s or 0.0)
    if defn.catch_up.mode == "all" and defn.every_s is not None:
        return timedelta(seconds=defn.every_s * defn.catch_up.limit)
    if defn.catch_up.mode == "all":
        return timedelta(days=1)  # cron: slots are irregular; a day covers any limit of usual crons
    return timedelta()


def reservation_until(defn: Definition, slot: datetime) -> datetime:
    """When a fired slot's reservation may go (``unique_keys.until``).

    A slot is planned only while it is at or after the schedule's ``next_slot``, which moves
    forward only, and a re-declaration restarts from its "now"; so once ``slot`` is older
    than the catch-up window plus the jitter and :data:`RESERVATION_MARGIN`, no firing can
    choose it again, and its reservation has nothing left to guard. Keeping each one that
    long bounds their number per schedule, whatever the run time.
    """
    return slot + catch_up_window(defn) + timedelta(seconds=defn.jitter_s) + RESERVATION_MARGIN


def slot_keys_range(name: str) -> tuple[str, str]:
    """Bounds of the ``_id`` of every slot key of schedule ``name`` (``name@<ISO slot>``)."""
    return f"{name}@0", f"{name}@:"


def run_now_key(name: str, asked_at: datetime) -> str:
    return f"{name}@run-now:{slot_iso(asked_at)}"


@dataclass(frozen=True)
class FiringPlan:
    """What a firing does: the slots it fires, those it skips (slot, reason), the next slot."""

    fire: list[datetime]
    skip: list[tuple[datetime, str]]
    next_slot: datetime | None
    more_skipped: int = 0  # slots skipped past MAX_SLOTS_SCANNED, counted but not listed


def plan_firing(defn: Definition, first: datetime, now: datetime, previous_unfinished: bool) -> FiringPlan:
    """The slots from ``first`` (the schedule's ``next_slot``) whose fire time has come at ``now``."""
    passed: list[datetime] = []
    slot: datetime | None = first
    while slot is not None and (fire_at(defn, slot) or slot) <= now and len(passed) < MAX_SLOTS_SCANNED:
        passed.append(slot)
        slot = next_slot(defn, slot)
    more = 0
    if len(passed) >= MAX_SLOTS_SCANNED and slot is not None and slot <= now:
        latest = _latest_at_or_before(defn, now)
        more = 1  # at least one more; the exact count is not worth a scan
        passed.append(latest)
        slot = next_slot(defn, latest)
    if not passed:
        return FiringPlan([], [], first)
    if previous_unfinished and defn.overlap == "skip":
        return FiringPlan([], [(s, "overlap") for s in passed], slot, more)
    fire = _caught_up(defn.catch_up, passed, now)
    chosen = set(fire)
    return FiringPlan(fire, [(s, "catch-up") for s in passed if s not in chosen], slot, more)


def _caught_up(catch_up: CatchUp, passed: list[datetime], now: datetime) -> list[datetime]:
    if catch_up.mode == "all":
        return passed[-catch_up.limit:]
    if catch_up.mode == "within":
        oldest = now - timedelta(seconds=catch_up.within_s or 0.0)
        return [s for s in passed if s >= oldest][-catch_up.limit:]
    return passed[-1:]


def _latest_at_or_before(defn: Definition, now: datetime) -> datetime:
    if defn.every_s is not None:
        every_us = round(defn.every_s * 1000) * 1000
        return EPOCH + timedelta(microseconds=_micros(now) // every_us * every_us)
    assert defn.cron is not None
    return next(CronSim(defn.cron, now.astimezone(ZoneInfo(defn.tz)), reverse=True)).astimezone(UTC)


def occurrence(job: dict[str, Any], name: str, slot: datetime, key: str, job_id: object,
               now: datetime) -> dict[str, Any]:
    """The ``scheduled`` document of one occurrence, from the schedule's stored ``job``."""
    doc = {k: v for k, v in job.items() if k not in ("_id", "created_at", "scheduled_at", "unique", "schedule")}
    return {"_id": job_id, **doc, "created_at": now, "scheduled_at": now,
            "unique": {"key": key, "scope": "forever"}, "schedule": {"name": name, "slot": slot}}


def job_template(doc: dict[str, Any]) -> dict[str, Any]:
    """A built job document as a schedule stores it: without what each occurrence gets of its own."""
    if doc.get("unique") is not None:
        raise ScheduleRefused("a scheduled job gets its unique key from its slot: drop .unique(...)")
    if isinstance(doc.get("on_worker"), dict) and doc["on_worker"].get("deadline") is not None:
        raise ScheduleRefused("a scheduled job cannot have an on_worker deadline (it would be fixed at definition)")
    return {k: v for k, v in doc.items() if k not in ("_id", "created_at", "scheduled_at", "unique")}
