"""Jobs that wait for other jobs: the stored form and every decision about it (pure, no I/O).

A job enqueued with ``.after(a, b)`` is stored *held*: its ``scheduled_at`` is
:data:`HELD_UNTIL` (far in the future) and its own due time is kept in
``after.due_at``. The ``after`` field says what it waits for, readable in ``mongosh``::

    after: {ids: [a, b],             # every job it waits for (kept for history)
            pending: [b],            # those not seen archived yet
            failed: [{id: a, why: "tried-too-many-times"}],   # those archived other than done
            if_failed: "cancel",     # or "run"
            on: [{ids, policy}],     # per-dependency, per-outcome policies, when not uniform
            due_at: ISODate(...),    # when it runs once released
            held: true}              # while held (the only documents in the `waiting_for` index)

What an upstream's end means (``if_failed``, ``on``, the ``skipped`` fate, and the guard that
keeps a 0.2.0 leader off a job it would decide otherwise): :mod:`recruiter.domain.dependency_policy`.

Skew rule: a 0.1.1 leader knows nothing of ``after``; it hands out only jobs with
``scheduled_at`` up to now, so a held job is never handed out by it, and its
sweep of unreachable jobs accepts a date up to 9999-12-31, so it never quarantines one.

Release: whoever archives a job pulls its id from the ``pending`` of its dependents
(one conditional write per dependent, recording a failure with it); the write that
empties ``pending`` is followed by :func:`decide`: release (``scheduled_at`` becomes
``due_at``, conditional on the job still held: exactly once) or archive the dependent
(``why: "upstream-failed"``, naming the dependency), which in turn resolves its own
dependents. A periodic sweep in the leader does the same for held jobs whose dependencies
are archived (or gone: pruned from ``archived``), so a crash between an archive and its
release leaves nothing waiting for ever.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bson import ObjectId

from recruiter.domain.dependency_policy import (
    CANCEL_ALL,
    RUN_ALL,
    SKIPPED,
    Policy,
    fate_of,
    parse_on,
    stored_on,
)
from recruiter.domain.edges import (
    FATE_OF_SEVERITY,
    NONE_FAILED,
    Counted,
    counted_line,
    front_of,
    is_counted,
    parse_counted,
)

HELD_UNTIL = datetime(9999, 1, 1, tzinfo=UTC)
DONE = "done"
UPSTREAM_FAILED = "upstream-failed"
# The why recorded for a dependency found neither in ``scheduled`` nor in ``archived``
# (its archived copy was pruned, or deleted by hand): not done.
GONE = "gone"
IF_FAILED = ("cancel", "run")
# Most jobs one job may wait for (its ``after.ids`` is read whole when it is decided).
MAX_DEPENDENCIES = 10_000


class DependencyRefused(ValueError):
    """A dependency that cannot be stored; one line, nothing written."""


@dataclass(frozen=True)
class After:
    """What a job waits for, as checked (from the builder or from a stored document)."""

    ids: tuple[ObjectId, ...]
    pending: tuple[ObjectId, ...]
    failed: tuple[tuple[ObjectId, str], ...]
    if_failed: str
    due_at: datetime
    # Per-dependency policies (``after.on``); a dependency not in it follows ``if_failed``.
    policies: Mapping[ObjectId, Policy] | None = None
    guarded: bool = False  # its own id kept in ``pending`` (0.2.0 never decides it)
    # Stored with edges (recruiter.domain.edges): its counters; ``ids`` and ``pending`` are then empty.
    counted: Counted | None = None

    def default_policy(self) -> Policy:
        return RUN_ALL if self.if_failed == "run" else CANCEL_ALL


@dataclass(frozen=True)
class Release:
    due_at: datetime


@dataclass(frozen=True)
class Archive:
    why: str
    reason: str


@dataclass(frozen=True)
class Wait:
    pending: tuple[ObjectId, ...]


Decision = Release | Archive | Wait


def is_held(job: Mapping[str, Any]) -> bool:
    """Whether a ``scheduled`` document waits for other jobs."""
    after = job.get("after")
    return isinstance(after, Mapping) and after.get("held") is True


def waited_for(job: Mapping[str, Any]) -> tuple[str, ...]:
    """The ids (as strings) of the jobs ``job`` waited for, for its context; () when it waited for none."""
    after = job.get("after")
    ids = after.get("ids") if isinstance(after, Mapping) else None
    return tuple(str(i) for i in ids if isinstance(i, ObjectId)) if isinstance(ids, list) else ()


def checked_ids(items: Iterable[object]) -> tuple[ObjectId, ...]:
    """Job ids from handles, ObjectIds or their 24 hex digits, without repeats (in order)."""
    out: list[ObjectId] = []
    seen: set[ObjectId] = set()  # a list's `in` made this quadratic: 18 s for 10 000 ids
    for item in items:
        if isinstance(item, ObjectId):
            job_id = ObjectId(item.binary)  # a JobHandle is an ObjectId
        elif isinstance(item, str) and ObjectId.is_valid(item):
            job_id = ObjectId(item)
        else:
            raise DependencyRefused(f"after needs job handles or ids, got {item!r:.60}")
        if job_id not in seen:
            seen.add(job_id)
            out.append(job_id)
    if not out:
        raise DependencyRefused("after needs at least one job to wait for")
    if len(out) > MAX_DEPENDENCIES:
        raise DependencyRefused(f"a job may wait for at most {MAX_DEPENDENCIES} jobs, got {len(out)}")
    return tuple(out)


def checked_if_failed(value: object) -> str:
    if value not in IF_FAILED:
        raise DependencyRefused(f"if_failed must be one of {', '.join(IF_FAILED)}, got {value!r:.40}")
    return str(value)


def held_fields(policies: Sequence[tuple[ObjectId, Policy]], due_at: datetime,
                job_id: object) -> dict[str, Any]:
    """The fields a job (``job_id``) waiting for these dependencies, each with its policy, is
    stored with (``scheduled_at`` and ``after``); guarded (its own id pending) if it has ``on``."""
    ids = [i for i, _ in policies]
    if_failed, on = stored_on(policies)
    after: dict[str, Any] = {"ids": ids, "pending": ids + ([job_id] if on else []), "failed": [],
                             "if_failed": if_failed, "due_at": due_at, "held": True}
    if on:
        after["on"] = on
    return {"scheduled_at": HELD_UNTIL, "after": after}


def missing_problem(job_id: object, missing: Sequence[ObjectId]) -> str | None:
    """The one-line refusal of a job that waits for ids of no job, or None."""
    if not missing:
        return None
    names = ", ".join(str(m) for m in missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    return f"job {job_id} waits for {names}: no such job (neither queued nor archived)"


def cycle_problem(docs: Sequence[Mapping[str, Any]]) -> str | None:
    """Jobs of one batch that wait for each other in a cycle (their ids are in the batch): one line,
    or None. Kahn's order: what is left once every job whose batch dependencies are placed is placed."""
    waits: dict[object, set[object]] = {d["_id"]: set((d.get("after") or {}).get("ids", [])) for d in docs}
    waits = {k: {i for i in v if i in waits} for k, v in waits.items()}
    feeds: dict[object, list[object]] = {}
    for k, v in waits.items():
        for i in v:
            feeds.setdefault(i, []).append(k)
    ready = [k for k, v in waits.items() if not v]
    placed = 0
    while ready:
        node = ready.pop()
        placed += 1
        for k in feeds.get(node, []):
            waits[k].discard(node)
            if not waits[k]:
                ready.append(k)
    if placed == len(waits):
        return None
    stuck = next(k for k, v in waits.items() if v)
    return f"jobs of this batch wait for each other in a cycle (job {stuck} among them)"


def pending_of(raw: object) -> list[object] | str:
    """The ``pending`` list of a stored ``after`` (untrusted: a release reads only this part of it
    before pulling from it), or why it is malformed. A dependent matched by its ``pending`` may
    still hold no list there: an id alone matches, and so does an ``after`` that is an array of
    documents; a ``$pullAll`` on either fails the write, and with it the round that releases."""
    if not isinstance(raw, Mapping):
        return "after: not a document"
    pending = raw.get("pending")
    return pending if isinstance(pending, list) else "after.pending: not a list of job ids"


def parse_after(raw: object, job_id: object = None) -> After | str:
    """A stored ``after`` field, checked (it is untrusted input), or the reason it is malformed.
    ``job_id``: the job's own, read as the guard when it is in ``pending``, not as a dependency."""
    if not isinstance(raw, Mapping):
        return "after: not a document"
    if is_counted(raw):
        return _parse_counted(raw)
    ids, pending, failed = raw.get("ids"), raw.get("pending"), raw.get("failed", [])
    if not (isinstance(ids, list) and 0 < len(ids) <= MAX_DEPENDENCIES and all(isinstance(i, ObjectId) for i in ids)):
        return f"after.ids: not a list of 1 to {MAX_DEPENDENCIES} job ids"
    if not (isinstance(pending, list) and all(isinstance(i, ObjectId) for i in pending)):
        return "after.pending: not a list of job ids"
    if not (isinstance(failed, list) and all(isinstance(f, Mapping) and isinstance(f.get("id"), ObjectId)
                                             and isinstance(f.get("why"), str) for f in failed)):
        return "after.failed: not a list of {id, why}"
    if raw.get("if_failed") not in IF_FAILED:
        return f"after.if_failed: not one of {', '.join(IF_FAILED)}"
    due_at = raw.get("due_at")
    if not isinstance(due_at, datetime):
        return "after.due_at: not a date"
    policies = parse_on(raw["on"]) if "on" in raw else None
    if isinstance(policies, str):
        return policies
    return After(tuple(i for i in ids), tuple(i for i in pending if i != job_id),
                 tuple((f["id"], f["why"]) for f in failed), str(raw["if_failed"]),
                 due_at if due_at.tzinfo else due_at.replace(tzinfo=UTC), policies,
                 job_id is not None and job_id in pending)


def _parse_counted(raw: Mapping[str, Any]) -> After | str:
    counted = parse_counted(raw)
    if isinstance(counted, str):
        return counted
    if raw.get("if_failed") not in IF_FAILED:
        return f"after.if_failed: not one of {', '.join(IF_FAILED)}"
    due_at = raw.get("due_at")
    if not isinstance(due_at, datetime):
        return "after.due_at: not a date"
    failed = ((counted.by, counted.by_why),) if counted.by is not None and counted.by_why is not None else ()
    return After((), front_of(raw) or (), failed, str(raw["if_failed"]),
                 due_at if due_at.tzinfo else due_at.replace(tzinfo=UTC), None, True, counted)


def decide(after: After) -> Decision:
    """What becomes of a held job: wait, release, or archive it because a dependency failed.
    One stored with edges waits while its ``left`` is above 0: the store sets it to 0 once it
    has read that no edge of it is left (:mod:`recruiter.domain.edges`)."""
    if after.counted is not None:
        return _decide_counted(after.counted, after.due_at)
    if after.pending:
        return Wait(after.pending)
    fate, by, why = fate_of(after.failed, after.policies or {}, after.default_policy())
    if fate == "run":
        return Release(after.due_at)
    more = f" (and {len(after.failed) - 1} more)" if len(after.failed) > 1 else ""
    if fate == "skip":
        return Archive(SKIPPED, f"job {by} it waited for ended {why}, which its policy skips on{more}")
    return Archive(UPSTREAM_FAILED, f"job {by} it waited for ended {why}{more}")


def _decide_counted(counted: Counted, due_at: datetime) -> Decision:
    if counted.left > 0:
        return Wait(())
    if counted.severity <= 0 or counted.severity == NONE_FAILED:
        return Release(due_at)
    more = f" (and {counted.failed_count - 1} more)" if counted.failed_count > 1 else ""
    if FATE_OF_SEVERITY[counted.severity] == "skip":
        return Archive(SKIPPED,
                       f"job {counted.by} it waited for ended {counted.by_why}, which its policy skips on{more}")
    return Archive(UPSTREAM_FAILED, f"job {counted.by} it waited for ended {counted.by_why}{more}")


def failures(ended: Mapping[ObjectId, object]) -> list[dict[str, object]]:
    """The ``after.failed`` entries of dependencies archived with these whys (others than done)."""
    return [{"id": i, "why": why if isinstance(why, str) else "?"} for i, why in ended.items() if why != DONE]


def waiting_line(raw: object, job_id: object = None) -> str | None:
    """What a held job (``job_id``) waits for, in one line (``jobs explain``, views), or None if it is not held."""
    after = parse_after(raw, job_id)
    if isinstance(after, str):
        return f"waits for other jobs, but its {after}" if isinstance(raw, Mapping) and raw.get("held") else None
    if not (isinstance(raw, Mapping) and raw.get("held")):
        return None
    if after.counted is not None:
        return counted_line(after.counted, front_of(raw))
    if not after.pending:
        return "its dependencies have all ended; the leader releases it at its next look"
    shown = ", ".join(str(i) for i in after.pending[:5]) + (" …" if len(after.pending) > 5 else "")
    return f"waiting for {len(after.pending)} job{'s' if len(after.pending) != 1 else ''}: {shown}"


def settle(docs: Sequence[dict[str, Any]], known: set[object], ended: Mapping[object, object]) -> str | None:
    """Check the ``after`` of jobs about to be enqueued together, and count at once what has ended.

    ``known``: the ids of ``after`` found queued or archived; ``ended``: of those, the archived
    ones (id -> why). A dependency on an id of no job (neither known nor in the batch) or a cycle
    within the batch refuses the whole batch (the one-line problem is returned). A job whose
    dependencies have all ended already is stored released (or, if one failed and it is to
    be cancelled or skipped, held with nothing pending but its guard: the leader archives it at
    its next look)."""
    own = {d["_id"] for d in docs}
    for d in docs:
        after = d.get("after")
        if not isinstance(after, dict):
            continue
        problem = missing_problem(d["_id"], [i for i in after["ids"] if i not in known and i not in own])
        if problem:
            return problem
        guard = [d["_id"]] if d["_id"] in after["pending"] else []
        after["pending"] = [i for i in after["ids"] if i not in ended] + guard
        after["failed"] = failures({i: ended[i] for i in after["ids"] if i in ended})
        parsed = parse_after(after, d["_id"])
        if not isinstance(parsed, str) and isinstance(decide(parsed), Release):
            d["scheduled_at"], after["released_at"], after["pending"] = after["due_at"], d["created_at"], []
            del after["held"]
    return cycle_problem(docs)


def held_state(pending: Sequence[object], count: int | None = None) -> str:
    """A held job's state as the lists say it (``jobs list``, the dashboard): ``waiting for 2 jobs``;
    ``count``: how many, when ``pending`` is only the front of them (stored with edges)."""
    n = len(pending) if count is None else count
    return f"waiting for {n} job{'' if n == 1 else 's'}" if n else "waiting: released at the leader's next look"
