"""Why a job is not running: one reason, in one line (``recruiter jobs explain``): pure, no I/O.

:func:`explain` takes what the store holds about one job (its document in
``scheduled`` or ``archived``), the facts around it that decide whether a round
would hand it out (the pause switches, the workers that take its group and their
heartbeats, how many ready jobs come before it), and ``now`` (server time), and
returns an :class:`Explanation`: a code (:class:`Waiting`), a line of text and
the details behind it. The reasons are checked in the order a round meets them,
and the first that holds is the answer:

1. archived: the job ended (``why``);
2. locked: ``running`` on a worker, or assigned to one not started yet, or to one
   whose heartbeat is late (not fresh: it may be frozen or dead; the round or the
   cleaner takes the job back, see :mod:`recruiter.domain.liveness`);
3. not due yet: a first attempt due later, a retry's backoff, a snooze the job asked
   for (:mod:`recruiter.domain.snooze`), or a job a worker
   refused given back a little later (:mod:`recruiter.domain.refusals`);
4. due: its group paused, its tenant paused; aimed at a worker that is gone
   (:mod:`recruiter.domain.placement`); no live worker takes its group; every live
   worker of its group refused it; held by a limit (flow control: ``Around.held_by``,
   which :func:`recruiter.admin.explain.held_by` reads); behind N ready jobs of its
   group and tenant; else next in line, waiting for a free worker.

"Behind N" counts the ready jobs of the same group and tenant that the candidates
index orders before this one (due retrying jobs first, then high priority, then
``scheduled_at``, then ``_id``): :func:`ahead_filters` gives the index ranges, each
an equality prefix of ``candidates``, which the store counts with a cap. The
counting scheme (``4,1``) lets a low-priority job in between high ones, and other
tenants of the group take turns, so N is the queue in front of the job within its
tenant, not a countdown of rounds.

Invariant: total and pure. The documents are untrusted: a field of the wrong type
reads as absent (and a job whose fields no round can read is ``malformed``);
nothing here raises on data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from recruiter.domain.dependencies import waiting_line as waiting_for
from recruiter.domain.documents import PRIORITIES
from recruiter.domain.durations import format_duration
from recruiter.domain.lanes import slot_of
from recruiter.domain.liveness import is_fresh
from recruiter.domain.naming import ANY_GROUP
from recruiter.domain.placement import deadline_of, is_worker_group, worker_of, worker_of_group
from recruiter.domain.records import Query, Raw
from recruiter.domain.refusals import refused_by
from recruiter.domain.refused import Refused, refused_of
from recruiter.domain.selection import FreeWorker
from recruiter.domain.snooze import SNOOZED, max_snoozes_of, snoozes_of

# "Behind N" is counted up to this many jobs (then "at least N").
AHEAD_CAP = 1000


class Waiting(StrEnum):
    """What a job waits for (or that it waits for nothing: running, archived)."""

    ARCHIVED = "archived"
    RUNNING = "running"
    ASSIGNED = "assigned"  # handed to a live worker that has not shown it running yet
    HEARTBEAT_LATE = "heartbeat-late"  # assigned to a worker whose heartbeat is late (or that left)
    DUE_LATER = "due-later"
    WAITING_FOR_JOBS = "waiting-for-jobs"  # .after(...): until the jobs it waits for end (domain.dependencies)
    RETRYING = "retrying"  # a retry's backoff
    SNOOZED = "snoozed"  # it returned Snooze(...): until the time it asked (recruiter.domain.snooze)
    REFUSED = "refused"  # given back by workers that could not run it (rolling deploys, --allow-module)
    GROUP_PAUSED = "group-paused"
    TENANT_PAUSED = "tenant-paused"
    WORKER_GONE = "worker-gone"  # aimed at one worker (.on_worker) that is not live
    NO_WORKER = "no-worker"  # no live worker takes its group
    HELD_BY_LIMIT = "held-by-limit"  # flow control (a limit on running jobs): the ``held_by`` hook
    BEHIND = "behind"  # behind N ready jobs of its group and tenant
    NEXT = "next"  # next in line: waits for a worker of its group to be free
    MALFORMED = "malformed"  # no round can read it: the recruiter sets it aside


@dataclass(frozen=True)
class WorkerFact:
    """A roster entry that takes the job's group, as judged at ``now``."""

    id: str
    groups: tuple[str, ...]
    live: bool  # its own heartbeat is fresh (recruiter.domain.liveness.is_fresh)
    available: bool  # waiting for work
    process: str  # its process key (registration token), as refusals name it
    last_seen: datetime | None = None


@dataclass(frozen=True)
class HeldBy:
    """A limit that holds a due job back (flow control, :mod:`recruiter.domain.limits`): what it
    limits (``group billing``, ``tenant acme of group billing``) and what it says now."""

    name: str
    text: str


@dataclass(frozen=True)
class Ahead:
    """How many ready jobs come before the job in its group and tenant (``capped``: at least that many)."""

    count: int
    capped: bool = False

    def describe(self) -> str:
        return f"at least {self.count}" if self.capped else str(self.count)


@dataclass(frozen=True)
class Around:
    """The facts around a waiting job that decide whether a round hands it out."""

    paused_groups: frozenset[str] = frozenset()
    paused_tenants: frozenset[str] = frozenset()
    workers: tuple[WorkerFact, ...] = ()  # the roster entries whose groups name the job's group or ``*``
    ahead: Ahead | None = None  # None: not counted
    held_by: HeldBy | None = None  # the flow-control hook: a limit that holds it, if any


@dataclass(frozen=True)
class Explanation:
    """Why job ``job_id`` is not running: ``code``, one line of ``text``, and the facts behind it."""

    job_id: object
    code: Waiting
    text: str
    details: Mapping[str, object] = field(default_factory=dict)

    @property
    def waiting(self) -> bool:
        """Whether the job waits for something (not running, not archived)."""
        return self.code not in (Waiting.RUNNING, Waiting.ARCHIVED)


def _date(value: object) -> datetime | None:
    return value if isinstance(value, datetime) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _at(when: datetime, now: datetime) -> str:
    """``2026-11-27 03:00:00 UTC (in 5m)`` / ``(3s ago)``."""
    seconds = round((when - now).total_seconds())
    span = format_duration(timedelta(seconds=abs(seconds)))
    return f"{when.strftime('%Y-%m-%d %H:%M:%S')} UTC ({'in ' + span if seconds >= 0 else span + ' ago'})"


def _ago(when: datetime | None, now: datetime) -> str:
    if when is None:
        return "never seen"
    return f"last seen {format_duration(timedelta(seconds=max(0, round((now - when).total_seconds()))))} ago"


def is_due(job: Raw, now: datetime) -> bool:
    """Whether an unlocked job is due at ``now`` (a job without a readable date is not)."""
    due = _date(job.get("scheduled_at"))
    return due is not None and due <= now


def needs_around(job: Raw | None, now: datetime) -> bool:
    """Whether explaining ``job`` (its ``scheduled`` document) needs :class:`Around`: it is unlocked and due."""
    return job is not None and job.get("locked") is False and is_due(job, now) and _readable(job)


def _readable(job: Raw) -> bool:
    group = job.get("group")
    return (isinstance(group, str) and group not in ("", ANY_GROUP) and job.get("status") in ("queued", "retrying")
            and job.get("priority") in ("high", "low") and isinstance(job.get("tenant"), str | None))


def ahead_filters(job: Raw, now: datetime) -> list[Query]:
    """The index ranges of the ready jobs ordered before ``job`` in its group and tenant, in
    the candidates index's order (status descending, priority, scheduled_at, _id): disjoint,
    each an equality prefix of ``candidates`` down to ``priority`` then one range (a range
    that left ``priority`` open was read as a collection scan on the embedded server). At
    most five. ``job`` must be unlocked and due."""
    base: Query = {"locked": False, "group": job.get("group"), "tenant": job.get("tenant")}
    status, priority, due = job.get("status"), job.get("priority"), job.get("scheduled_at")
    filters: list[Query] = []
    if status == "queued":  # due retrying jobs come first, whatever their priority (one range each)
        filters += [{**base, "status": "retrying", "priority": p, "scheduled_at": {"$lte": now}} for p in PRIORITIES]
    if priority == "low":
        filters.append({**base, "status": status, "priority": "high", "scheduled_at": {"$lte": now}})
    filters.append({**base, "status": status, "priority": priority, "scheduled_at": {"$lt": due}})
    filters.append({**base, "status": status, "priority": priority, "scheduled_at": due,
                    "_id": {"$lt": job.get("_id")}})
    return filters


def takes(worker: WorkerFact, group: str) -> bool:
    """Whether ``worker`` takes ``group``, by the selection's rule (``*``: any group but a worker's
    reserved one, :meth:`recruiter.domain.selection.FreeWorker.takes`)."""
    return FreeWorker(worker.id, worker.groups).takes(group)


def explain(job_id: object, scheduled: Raw | None, archived: Raw | None, now: datetime, *,
            holder: WorkerFact | None = None, beat: Raw | None = None,
            around: Around | None = None) -> Explanation | None:
    """Why the job is not running (see the module doc); None if neither collection holds it.

    ``holder``/``beat``: for a locked job, the roster entry of the worker holding it (None: gone)
    and that worker's heartbeat document. ``around``: for an unlocked, due job (:func:`needs_around`)."""
    if archived is not None:
        return _archived(job_id, archived)
    if scheduled is None:
        return None
    if scheduled.get("locked") is True:
        return _locked(job_id, scheduled, holder, beat, now)
    if not _readable(scheduled) or _date(scheduled.get("scheduled_at")) is None:
        return Explanation(job_id, Waiting.MALFORMED, "malformed: no round can read it (a field has a wrong type "
                           "or value); the recruiter archives it as malformed", {})
    if (line := waiting_for(scheduled.get("after"), scheduled.get("_id"))) is not None:
        return Explanation(job_id, Waiting.WAITING_FOR_JOBS, line, {"after": scheduled.get("after")})
    if not is_due(scheduled, now):
        return _not_due(job_id, scheduled, now)
    return _due(job_id, scheduled, around or Around(), now)


def _archived(job_id: object, doc: Raw) -> Explanation:
    why = _str(doc.get("why")) or "?"
    reason = _str(doc.get("reason"))
    at = _date(doc.get("archived_at"))
    # The code says "archived" already: the text starts with how it ended (jobs explain prints "code: text").
    text = why + (f" ({reason[:200]})" if reason else "")
    text += f" at {at.strftime('%Y-%m-%d %H:%M:%S')} UTC" if at is not None else ""
    return Explanation(job_id, Waiting.ARCHIVED, text, {"why": why, "reason": reason, "archived_at": at})


def _locked(job_id: object, job: Raw, holder: WorkerFact | None, beat: Raw | None, now: datetime) -> Explanation:
    worker = _str(job.get("locked_by")) or "?"
    since = _date(job.get("locked_at"))
    started = (beat is not None and beat.get("working_on") == job.get("_id")
               and beat.get("working_token") is not None and beat.get("working_token") == job.get("lock_token"))
    details: dict[str, object] = {"worker": worker, "locked_at": since, "started": started}
    if holder is None:
        return Explanation(job_id, Waiting.HEARTBEAT_LATE,
                           f"assigned to worker {worker}, which has left the roster; the cleaner returns the job "
                           "(or counts a crash if it had started)", details)
    details["last_seen"] = holder.last_seen
    if not holder.live:
        doing = "it was running the job" if started else "it had not shown the job started"
        return Explanation(job_id, Waiting.HEARTBEAT_LATE,
                           f"assigned to worker {worker}, whose heartbeat is late ({_ago(holder.last_seen, now)}; "
                           f"{doing})", details)
    if started:
        begun = _date(beat.get("working_since")) if beat is not None else None
        return Explanation(job_id, Waiting.RUNNING, f"running on worker {worker}"
                           + (f" since {_at(begun, now)}" if begun is not None else ""), details)
    return Explanation(job_id, Waiting.ASSIGNED,
                       f"assigned to worker {worker}" + (f" at {_at(since, now)}" if since is not None else "")
                       + ", not started yet", details)


def _not_due(job_id: object, job: Raw, now: datetime) -> Explanation:
    due = _date(job.get("scheduled_at"))
    assert due is not None
    details: dict[str, object] = {"due_at": due, "group": job.get("group"), "tenant": job.get("tenant")}
    last = job.get("last_execution")
    if isinstance(last, Mapping) and last.get("outcome") == SNOOZED:
        count, cap = snoozes_of(job), max_snoozes_of(job)
        details.update(snoozes=count, max_snoozes=cap, snoozed_until=due)
        return Explanation(job_id, Waiting.SNOOZED, f"snoozed {count} time{'s' if count != 1 else ''} (of at most "
                           f"{cap}): due at {_at(due, now)}", details)
    refused = refused_of(job)
    # Given back and not run since (also past refusals_until: the next refusal archives it).
    if job.get("status") == "retrying" and refused is not None and refused.current and refused_by(job):
        details.update(_refused_details(refused))
        return Explanation(job_id, Waiting.REFUSED, f"{refused.describe()}; offered to other workers at "
                           f"{_at(due, now)}", details)
    if job.get("status") == "retrying":
        return Explanation(job_id, Waiting.RETRYING, f"retrying: {_failed(job)}backoff until {_at(due, now)}",
                           details)
    return Explanation(job_id, Waiting.DUE_LATER, f"due later: at {_at(due, now)}", details)


def _refused_details(refused: Refused) -> dict[str, object]:
    """What ``jobs explain --json`` details of a refused job: counts, who, why, until, the fix."""
    return {"refusals": refused.count, "refused_by": list(refused.workers), "refusal_kind": refused.kind,
            "refusal_reason": refused.reason, "refused_until": refused.until, "fix": refused.fix}


def _failed(job: Raw) -> str:
    """``attempt 2 failed (ValueError: bad input); `` from the job's last execution ('' if none)."""
    last = job.get("last_execution")
    if not isinstance(last, Mapping):
        return ""
    error = ": ".join(s[:200] for s in (_str(last.get("class")), _str(last.get("message"))) if s)
    attempt = _count(last.get("attempt")) or _count(job.get("attempts"))
    return f"attempt {attempt} {_str(last.get('outcome')) or 'failed'}" + (f" ({error})" if error else "") + "; "


def _due(job_id: object, job: Raw, around: Around, now: datetime) -> Explanation:
    group = str(job.get("group"))
    tenant = _str(job.get("tenant"))
    where = f"group {group}" + (f", tenant {tenant}" if tenant else "")
    details: dict[str, object] = {"group": group, "tenant": tenant, "due_at": job.get("scheduled_at")}
    if group in around.paused_groups and not is_worker_group(group):
        return Explanation(job_id, Waiting.GROUP_PAUSED, f"its group {group} is paused "
                           f"(recruiter groups resume {group})", details)
    if tenant is not None and tenant in around.paused_tenants:
        return Explanation(job_id, Waiting.TENANT_PAUSED, f"its tenant {tenant} is paused "
                           f"(recruiter tenants resume {tenant})", details)
    return _workers(job_id, job, group, where, around, now, details)


def _workers(job_id: object, job: Raw, group: str, where: str, around: Around, now: datetime,
             details: dict[str, object]) -> Explanation:
    taking = [w for w in around.workers if takes(w, group)]
    live = [w for w in taking if w.live]
    slots = {slot_of(w.id) for w in live}
    busy = {slot_of(w.id) for w in live if not w.available}
    details.update(workers=len({slot_of(w.id) for w in taking}), live_workers=len(slots),
                   idle_workers=len(slots - busy))
    if is_worker_group(group) and not live:
        return _gone(job_id, job, group, taking, now, details)
    if not live:
        return Explanation(job_id, Waiting.NO_WORKER,
                           f"no live worker takes its group {group}" + (
                               f" ({len(taking)} registered, heartbeat late)" if taking else " (none registered)"),
                           details)
    refusing = refused_by(job, now)
    if refusing and all(w.process in refusing for w in live):
        until = _date(job.get("refusals_until"))
        refused = refused_of(job)
        text = f"refused by every live worker of its group {group}" + (
            f" until {_at(until, now)}" if until is not None else "")
        if refused is not None:
            details.update(_refused_details(refused))
            text += f" (newest: {refused.by()}): {refused.reason}; to fix: {refused.fix}"
        return Explanation(job_id, Waiting.REFUSED, text, details)
    return _queue(job_id, where, around, details, len(slots))


def _gone(job_id: object, job: Raw, group: str, taking: list[WorkerFact], now: datetime,
          details: dict[str, object]) -> Explanation:
    aimed = worker_of(job)
    aimed = aimed if aimed != "?" else worker_of_group(group)
    if taking:
        seen = max((w.last_seen for w in taking if w.last_seen is not None), default=None)
        state = f"its heartbeat is late ({_ago(seen, now)})"
    else:
        state = "not in the roster (not started, stopped, or removed by the cleaner)"
    deadline = _date(deadline_of(job))
    tail = f"; archived worker-deadline at {_at(deadline, now)} unless it comes back" if deadline else ""
    return Explanation(job_id, Waiting.WORKER_GONE, f"its aimed worker {aimed} is gone: {state}{tail}", details)


def _queue(job_id: object, where: str, around: Around, details: dict[str, object], live: int) -> Explanation:
    if around.held_by is not None:
        details["limit"] = around.held_by.name
        return Explanation(job_id, Waiting.HELD_BY_LIMIT, f"held by a limit: {around.held_by.text}", details)
    ahead = around.ahead
    idle = details.get("idle_workers", 0)
    workers = f"{live} live worker slot(s) take its group, {idle} idle"
    if ahead is not None and ahead.count > 0:
        details.update(ahead=ahead.count, ahead_capped=ahead.capped)
        return Explanation(job_id, Waiting.BEHIND, f"behind {ahead.describe()} ready job(s) of its tenant in {where} "
                           f"({workers})", details)
    if ahead is not None:
        details.update(ahead=0, ahead_capped=False)
    return Explanation(job_id, Waiting.NEXT, f"next in line in {where}: waits for a free worker ({workers})",
                       details)


def worker_fact(entry: Raw, beat: Raw | None, now: datetime) -> WorkerFact:
    """A roster ``entry`` and its heartbeat document ``beat`` (None: none) as a :class:`WorkerFact`
    (live: :func:`recruiter.domain.liveness.is_fresh`)."""
    groups = entry.get("work_on")
    seen = _date(beat.get("last_seen_at")) if beat is not None else None
    return WorkerFact(id=str(entry.get("_id")),
                      groups=tuple(g for g in groups if isinstance(g, str)) if isinstance(groups, Sequence)
                      and not isinstance(groups, str) else (),
                      live=is_fresh(beat, entry, now), available=entry.get("available") is True,
                      process=str(entry.get("process") or entry.get("_id")),
                      last_seen=seen or _date(entry.get("last_seen_at")))
