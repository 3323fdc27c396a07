"""Liveness: which workers may be given work, and what becomes of a dead worker's jobs.

Heartbeats live in a collection of their own, ``heartbeats``: one document per
worker *process*, whose ``_id`` is the process's registration token (the ``process``
of its roster entries, as an ObjectId), and which names each of its roster entries
(slots and look-ahead lanes) with that entry's ``session`` and what it runs::

    {_id, kind: "process", token, pid, hostname, heartbeat_interval_s,
     last_seen_at, fresh_until, registered_at, release, ids: [entry ids],
     slots: {<escaped entry id>: {id, session, worker_group, working, working_on,
                                  working_token, working_since, working_in_thread, progress}}}

A beat is one update of that document, whatever the number of slots: a process
that dies leaves all its slots silent at once. Readers see one *beat* per roster
entry (:func:`expand_beats`): the process's fields with the slot's, under the
entry's ``_id``; an older version's document of one entry, ``{_id: <entry id>,
session, last_seen_at, fresh_until, ..., working_on, working_token}``, reads as it
is. An entry's beat is the one that carries its ``session`` (:func:`pick_beats`);
a malformed process document names no slot, so its entries are never fresh.

Only the worker writes it (at registration, then from its heartbeat thread) and
only the cleaner deletes it (or removes a dead slot from it), so a recruiter round,
whose transaction writes roster entries, never meets a heartbeat in a write conflict. ``working_token``
is the lock token of the job the slot was running at its last beat: the
evidence that an attempt started. A slot wakes its heartbeat thread when it
starts a job, so the evidence follows within a fraction of an interval.

Invariants:

1. The recruiter assigns only to entries whose heartbeat is fresh: their
   document carries the entry's session and ``fresh_until`` (the last beat plus
   ``FRESH_BEATS`` intervals) is after ``now`` by the server clock. A beat dated
   further ahead than a process could have written it (:func:`dated_ahead`: a day
   past ``now``, :data:`recruiter.domain.clock.MAX_AHEAD`) is malformed: never
   fresh, and its worker is silent and dead to the recruiter and the cleaner.
2. A job whose worker died is **returned** when that worker's heartbeats never
   showed it started: unlocked as it was before, its attempt given back, no
   crash counted, nothing archived. Otherwise it is a **crash**
   (:func:`recruiter.domain.outcome.crash_update`), judged by
   :func:`recruiter.domain.attempt.judge_crash`. A worker cannot prove that it did not
   start a job (that would cost a write before each start), so two cases are
   treated as crashes all the same: an ``at_most_once`` job, and a job already
   returned ``MAX_UNPROVEN_RETURNS`` times (one that kills its worker before the
   first beat would otherwise go round forever). A job handed out *ahead* to a
   look-ahead lane and never marked started (:func:`recruiter.domain.lanes.held_ahead`)
   is the exception: its worker wrote before starting it, so its return is proven
   (not counted in ``unproven_returns``), ``at_most_once`` or not.
3. An entry that holds an assignment, has missed its heartbeats (none for
   ``TAKE_BACK_BEATS`` of its intervals) and never showed that job started is taken back by the next round
   or cleaner pass, whichever comes first, without waiting for
   ``--considered-dead-after``. The entry is deleted with it, fenced on its
   session and assignment: a worker that was only frozen finds itself
   declared dead at its next beat or poll, halts what it may have started (a
   job in a thread ends the process) and registers again.

This module is pure: finding stranded jobs and taking them back, which read and
write, are :func:`recruiter.processes.upkeep.find_stranded` and
:func:`~recruiter.processes.upkeep.take_back`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar, cast

from recruiter.domain import versions
from recruiter.domain.clock import MAX_AHEAD, too_far_ahead
from recruiter.domain.job import Status
from recruiter.domain.lanes import held_ahead
from recruiter.domain.outcome import LOCK_FIELDS, crash_update
from recruiter.domain.records import Query, Raw

# An entry is fresh while its last heartbeat is within this many of its intervals.
FRESH_BEATS = 2
# An entry silent this many of its intervals has missed its heartbeats: its stranded job
# is taken back. More than FRESH_BEATS, so that a live worker whose beat is late (a
# busy machine) is first only given no more work.
TAKE_BACK_BEATS = 3
# Returns without evidence of a start, after which the next one counts as a crash.
MAX_UNPROVEN_RETURNS = 3

Rescue = Literal["returned", "crashed"]


def fresh_until(now: datetime, interval_s: float) -> datetime:
    return now + timedelta(seconds=FRESH_BEATS * interval_s)


def heartbeat_document(worker_id: str, session: object, now: datetime, interval_s: float,
                       pid: int, hostname: str) -> dict[str, object]:
    """The heartbeat document a worker slot starts with when it registers."""
    return {"_id": worker_id, "session": session, "last_seen_at": now,
            "fresh_until": fresh_until(now, interval_s), "heartbeat_interval_s": interval_s,
            "pid": pid, "hostname": hostname, "working": False, "working_on": None,
            "working_token": None, "working_since": None, versions.FIELD: versions.record()}


# ``kind`` of a worker process's heartbeat document (an older version's per-entry one has none).
PROCESS_KIND = "process"
# What a process document holds for all its slots, and what each slot adds.
PROCESS_FIELDS = ("last_seen_at", "fresh_until", "heartbeat_interval_s", "pid", "hostname", "worker_group")
SLOT_FIELDS = ("session", "working", "working_on", "working_token", "working_since", "working_in_thread",
               "progress")
# The key under which an expanded beat names the process document it came from.
FROM_PROCESS = "process_beat"


def slot_key(entry_id: str) -> str:
    """The field name of an entry's slot in its process document: ``%``, ``.`` and ``$`` escaped
    as :func:`recruiter.domain.control.escape` does (``~`` and ``-`` are kept); ``%`` for none."""
    if not entry_id:
        return "%"
    return entry_id.replace("%", "%25").replace(".", "%2E").replace("$", "%24")


def process_document(token: str, now: datetime, interval_s: float, pid: int, hostname: str,
                     worker_group: str) -> dict[str, object]:
    """The fields of a process's heartbeat document that its registrations set (and refresh).
    ``worker_group`` is the reserved group of the jobs aimed at the process: the cleaner
    reads it when it removes the process's last slot as dead (:mod:`recruiter.domain.placement`)."""
    return {"kind": PROCESS_KIND, "token": token, "pid": pid, "hostname": hostname, "worker_group": worker_group,
            "heartbeat_interval_s": interval_s, "last_seen_at": now, "fresh_until": fresh_until(now, interval_s),
            "registered_at": now, versions.FIELD: versions.record()}


def slot_document(entry_id: str, session: object) -> dict[str, object]:
    """An idle slot's part of its process's heartbeat document."""
    return {"id": entry_id, "session": session, "working": False, "working_on": None,
            "working_token": None, "working_since": None, "progress": None}


def is_process_doc(doc: Raw) -> bool:
    return doc.get("kind") == PROCESS_KIND


def expand_beats(docs: Iterable[Raw]) -> list[dict[str, Any]]:
    """One beat per roster entry named by ``docs`` (documents of ``heartbeats``, untrusted, pure).

    An older version's document is its own entry's beat; a process document gives one
    per slot it names, with the process's fields; a malformed slot, or a process
    document whose ``slots`` is not a document, gives none."""
    out: list[dict[str, Any]] = []
    for doc in docs:
        if not is_process_doc(doc):
            if isinstance(doc.get("_id"), str):
                out.append(dict(doc))
            continue
        slots = doc.get("slots")
        if not isinstance(slots, Mapping):
            continue
        common = {k: doc.get(k) for k in PROCESS_FIELDS}
        for key, slot in slots.items():
            if isinstance(slot, Mapping) and isinstance(slot.get("id"), str) and slot_key(slot["id"]) == key:
                out.append({**common, **{k: slot.get(k) for k in SLOT_FIELDS}, "_id": slot["id"],
                            FROM_PROCESS: doc.get("_id")})
    return out


def malformed_process_docs(docs: Iterable[Raw]) -> list[object]:
    """The ``_id`` of each process document that names no slot it could be read for (pure)."""
    return [d.get("_id") for d in docs if is_process_doc(d) and (
        not isinstance(d.get("slots"), Mapping) or date_or_none(d.get("last_seen_at")) is None)]


_Beat = TypeVar("_Beat", bound=Mapping[str, Any])


def pick_beats(beats: Iterable[_Beat], entries: Mapping[object, Raw] | None = None) -> dict[object, _Beat]:
    """One beat per entry id: the one that carries the entry's ``session`` if ``entries`` has it,
    else the one last seen latest (pure)."""
    picked: dict[object, _Beat] = {}
    for b in beats:
        entry = (entries or {}).get(b["_id"])
        old = picked.get(b["_id"])
        if old is None or _better(b, old, entry):
            picked[b["_id"]] = b
    return picked


def _better(new: Raw, old: Raw, entry: Raw | None) -> bool:
    if entry is not None:
        mine_new, mine_old = new.get("session") == entry.get("session"), old.get("session") == entry.get("session")
        if mine_new != mine_old:
            return mine_new
    seen_new, seen_old = date_or_none(new.get("last_seen_at")), date_or_none(old.get("last_seen_at"))
    return seen_new is not None and (seen_old is None or seen_new > seen_old)


def date_or_none(value: object) -> datetime | None:
    """A stored value if it is a date, else None (a malformed field reads as absent)."""
    return value if isinstance(value, datetime) else None


def is_fresh(beat: Raw | None, entry: Raw, now: datetime) -> bool:
    """Whether ``entry`` may be given work: its own heartbeat (same session) is fresh, and not
    dated too far ahead to be believed (:func:`dated_ahead`)."""
    if beat is None or beat.get("session") != entry.get("session"):
        return False
    until = date_or_none(beat.get("fresh_until"))
    return until is not None and until > now and dated_ahead(beat, now) is None


# The longest heartbeat interval a worker's registration is believed for (a longer stored one
# is read as none: a hand-written 1e300 must not make a dead worker live for ever).
MAX_BELIEVED_INTERVAL_S = 86_400.0
# How far ahead of the reader's clock a beat's ``fresh_until`` may be: its ``last_seen_at``'s
# allowance (recruiter.domain.clock.MAX_AHEAD) plus FRESH_BEATS of the longest believed interval.
MAX_FRESH_AHEAD = MAX_AHEAD + timedelta(seconds=FRESH_BEATS * MAX_BELIEVED_INTERVAL_S)


def believed_interval_s(stored: object) -> float | None:
    """A heartbeat interval as stored (untrusted): a number in (0, :data:`MAX_BELIEVED_INTERVAL_S`],
    or None when it is not one to believe."""
    if isinstance(stored, int | float) and not isinstance(stored, bool) and 0 < stored <= MAX_BELIEVED_INTERVAL_S:
        return float(stored)
    return None


def dated_ahead(beat: Raw, now: datetime) -> str | None:
    """What makes ``beat`` malformed by its dates, or None: ``last_seen_at`` further ahead of ``now``
    than :data:`~recruiter.domain.clock.MAX_AHEAD`, or ``fresh_until`` further than
    :data:`MAX_FRESH_AHEAD` (a worker beats at its own ``now``, which follows the server's clock).
    Such a beat is read as a malformed one: never fresh, its worker silent and dead, so a dead
    worker's document dated in year 9999 does not keep it live, and its jobs held, for ever."""
    seen, until = date_or_none(beat.get("last_seen_at")), date_or_none(beat.get("fresh_until"))
    if seen is not None and too_far_ahead(seen, now):
        return f"last_seen_at {seen.isoformat()} is more than {MAX_AHEAD} ahead of this clock ({now.isoformat()})"
    if until is not None and too_far_ahead(until, now, MAX_FRESH_AHEAD):
        return (f"fresh_until {until.isoformat()} is more than {MAX_FRESH_AHEAD} ahead of this clock "
                f"({now.isoformat()})")
    return None


def seen_ahead(now: datetime) -> Query:
    """A filter of ``heartbeats`` for the beats :func:`dated_ahead` at ``now`` by ``last_seen_at`` (indexed)."""
    return {"last_seen_at": {"$gt": now + MAX_AHEAD}}


def fresh_ahead(now: datetime) -> Query:
    """A filter of ``heartbeats`` for the beats :func:`dated_ahead` at ``now`` by ``fresh_until`` (indexed):
    the stale reads add it, so a beat dated too far ahead is read as silent, not passed over."""
    return {"fresh_until": {"$gt": now + MAX_FRESH_AHEAD}}


def is_dead(beat: Raw, now: datetime, considered_dead_after_s: float) -> bool:
    """Whether the worker of ``beat`` is dead: silent ``considered_dead_after_s``, and at least
    twice the heartbeat interval it registered, so a live worker that beats less often than the
    cleaner was told (one registered after it started) is never taken for dead. A beat whose
    dates are not believed (none, or :func:`dated_ahead`) is a dead worker's."""
    seen, interval = date_or_none(beat.get("last_seen_at")), believed_interval_s(beat.get("heartbeat_interval_s"))
    if seen is None or dated_ahead(beat, now) is not None:
        return True
    silent_s = max(considered_dead_after_s, 2 * interval if interval is not None else 0.0)
    return seen < now - timedelta(seconds=silent_s)


def missed_beats(beat: Raw, now: datetime) -> bool:
    """Whether the entry of ``beat`` has been silent ``TAKE_BACK_BEATS`` of its intervals (a beat
    :func:`dated_ahead` has: its dates are not believed)."""
    if dated_ahead(beat, now) is not None:
        return True
    seen, interval = date_or_none(beat.get("last_seen_at")), beat.get("heartbeat_interval_s")
    if seen is None or not isinstance(interval, int | float) or isinstance(interval, bool) or interval <= 0:
        until = date_or_none(beat.get("fresh_until"))
        return until is None or until <= now
    return seen + timedelta(seconds=TAKE_BACK_BEATS * float(interval)) <= now


def shown_started(job: Raw, beat: Raw | None) -> bool:
    """Whether the worker's heartbeats showed this attempt (this lock token) running."""
    token = job.get("lock_token")
    return beat is not None and token is not None and beat.get("working_token") == token


def unproven_returns(job: Raw) -> int:
    n = job.get("unproven_returns", 0)
    # A count that is not a count is read as spent: the conservative side.
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else MAX_UNPROVEN_RETURNS


def rescue_kind(job: Raw, beat: Raw | None, entry: Raw | None = None) -> Rescue:
    """Returned or crashed: the decision of the module doc's invariant 2 (``entry`` is the
    dead worker's roster entry, when known: it may prove the job never started)."""
    if shown_started(job, beat):
        return "crashed"
    if held_ahead(job, entry):
        return "returned"
    if job.get("at_most_once") or unproven_returns(job) >= MAX_UNPROVEN_RETURNS:
        return "crashed"
    return "returned"


def return_update(job: Raw, worker: Raw, now: datetime, reason: str, *, proven: bool = False) -> tuple[Query, Query]:
    """Filter and update that put back a job its dead worker never showed it started.

    The attempt the lock counted is given back and the job keeps its place in
    the queue (its ``scheduled_at``); no execution is recorded, as none is
    known to have happened. ``unproven_returns`` and ``last_return`` say what
    happened; a ``proven`` return (a job held ahead, never started) is not counted in
    ``unproven_returns``.
    """
    attempts = job.get("attempts", 1)
    attempts = max(0, attempts - 1) if isinstance(attempts, int) else 0
    last_return: Query = {"worker": str(job.get("locked_by")), "pid": worker.get("pid"),
                          "hostname": worker.get("hostname"), "assigned_at": job.get("locked_at"),
                          "returned_at": now, "reason": reason}
    set_: Query = {
        "locked": False,
        "attempts": attempts,
        "status": (Status.RETRYING if attempts > 0 else Status.QUEUED).value,
        "last_return": last_return,
    }
    if proven:
        last_return["proven"] = True
    else:
        set_["unproven_returns"] = unproven_returns(job) + 1
    update: Query = {"$set": set_, "$unset": {f: "" for f in LOCK_FIELDS}}
    return {"_id": job["_id"], "lock_token": job.get("lock_token"), "locked": True}, update


def rescue_update(job: Raw, entry: Raw | None, beat: Raw | None,
                  now: datetime, reason: str) -> tuple[Rescue, tuple[Query, Query]]:
    """What to write for a job whose worker (roster ``entry``, heartbeat ``beat``) is dead."""
    worker = {**(entry or {}), **(beat or {})}
    if rescue_kind(job, beat, entry) == "returned":
        return "returned", return_update(job, worker, now, reason, proven=held_ahead(job, entry))
    # crash_update (recruiter.domain.outcome) still reads plain dicts; it only reads them.
    return "crashed", crash_update(cast("dict[str, Any]", job), worker, now, reason)


@dataclass(frozen=True)
class Stranded:
    """A job assigned to an entry that missed its heartbeats before showing it started."""

    entry: Raw
    job: Raw
    beat: Raw

    @property
    def reason(self) -> str:
        seen = date_or_none(self.beat.get("last_seen_at"))
        return (f"worker {self.entry['_id']} (pid {self.entry.get('pid')} on {self.entry.get('hostname')}) "
                f"missed its heartbeats (last seen {seen.isoformat() if seen else 'never'}) "
                f"with no sign it had started the job")
