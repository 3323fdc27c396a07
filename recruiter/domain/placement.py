"""Jobs aimed at one worker (``.on_worker("billing-1")``): pure, no I/O.

Invariant: such a job's ``group`` is the reserved group :func:`worker_group` of
its worker's id (``@worker:billing-1``, a name no user group may have, see
:func:`recruiter.domain.naming.name_problem`), and every roster entry of the
worker process started with ``--id billing-1`` (its slots ``billing-1`` or
``billing-1-0``, ``billing-1-1``...) takes that group besides its own. So the
selection, the candidates index, the read-ahead and the assignment need no
path of their own, and only those slots can take the job; ``*`` workers never
take a reserved group (:meth:`recruiter.domain.selection.FreeWorker.takes`).
The group the job was enqueued in is kept in ``on_worker.group``: it is the
group the job sees (``ctx.group``).

The job waits while its worker is absent, stopped or restarting. It is archived

- ``worker-gone`` when the cleaner declares the last slot of that worker dead (its
  heartbeat is older than ``--considered-dead-after``) and removes it. A slot's
  heartbeat document names the worker's reserved group (``worker_group``), so this
  holds even when a round took the slot's entry back earlier for missed beats. A
  graceful stop deregisters without the cleaner, and a restart under the same
  ``--id`` takes the entry over: the jobs wait for the worker to start again;
- ``worker-deadline`` once ``on_worker.deadline`` has passed and the job is not
  locked (a job running at its deadline finishes; it is not retried after it).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from recruiter.domain.clock import utc
from recruiter.domain.naming import MAX_NAME_CHARS, WORKER_GROUP_PREFIX
from recruiter.domain.records import OnWorkerDoc, Raw

WORKER_GONE = "worker-gone"
WORKER_DEADLINE = "worker-deadline"
MAX_WORKER_ID_CHARS = MAX_NAME_CHARS - len(WORKER_GROUP_PREFIX)


def worker_group(worker_id: str) -> str:
    """The reserved group of the jobs aimed at the worker ``worker_id``."""
    return WORKER_GROUP_PREFIX + worker_id


def is_worker_group(group: object) -> bool:
    return isinstance(group, str) and group.startswith(WORKER_GROUP_PREFIX)


def worker_of_group(group: str) -> str:
    """The worker id a reserved group names (``worker_group`` reversed)."""
    return group[len(WORKER_GROUP_PREFIX):]


def worker_id_problem(worker_id: object) -> str | None:
    """Why ``worker_id`` cannot name a worker (the rule of ``worker start --id``); None if it can."""
    if not isinstance(worker_id, str) or not worker_id.strip():
        return f"on_worker needs a worker id, a non-empty string, got {worker_id!r}"
    if "." in worker_id or worker_id.startswith("$") or worker_id != worker_id.strip():
        return f"invalid worker id {worker_id!r}: it cannot contain '.', start with '$' or a space, or end with a space"
    if any(ord(c) < 32 or ord(c) == 127 for c in worker_id):
        return f"invalid worker id {worker_id!r}: it contains a control character"
    if len(worker_id) > MAX_WORKER_ID_CHARS:
        return f"worker id is {len(worker_id)} characters long; on_worker takes at most {MAX_WORKER_ID_CHARS}"
    return None


def deadline_at(deadline: object, now: datetime) -> datetime | None:
    """The deadline as a UTC time: a ``datetime`` as given, a ``timedelta`` from ``now``.

    Raises ValueError (one line) for anything else or a non-positive delay."""
    if deadline is None:
        return None
    if isinstance(deadline, timedelta):
        if deadline <= timedelta():
            raise ValueError(f"on_worker deadline must be a positive delay, got {deadline}")
        try:
            return utc(now) + deadline
        except OverflowError:
            raise ValueError(f"on_worker deadline is too far: {deadline}") from None
    if isinstance(deadline, datetime):
        return utc(deadline)
    raise ValueError(f"on_worker deadline must be a datetime or a timedelta, got {deadline!r}")


def on_worker_document(worker_id: str, declared_group: str, deadline: datetime | None) -> OnWorkerDoc:
    doc: OnWorkerDoc = {"worker": worker_id, "group": declared_group}
    if deadline is not None:
        doc["deadline"] = deadline
    return doc


def declared_group(job: object) -> str | None:
    """The group a job aimed at a worker was enqueued in (read tolerantly); None for other jobs."""
    on = job.get("on_worker") if isinstance(job, dict) else None
    group = on.get("group") if isinstance(on, dict) else None
    return group if isinstance(group, str) else None


def gone_reason(worker_id: str) -> str:
    return (f"worker {worker_id} was removed by the cleaner (it stopped heartbeating) and the job "
            "was aimed at it")


def deadline_reason(worker_id: str, deadline: object) -> str:
    when = deadline.isoformat() if isinstance(deadline, datetime) else str(deadline)
    return f"worker {worker_id} did not start the job before its deadline {when}"


def unplaced_outcome(why: str, reason: str) -> dict[str, object]:
    """The outcome that archives a waiting job aimed at a worker that will not run it: no
    attempt, none counted back (for :func:`recruiter.domain.outcome.archived_document`)."""
    return {"decision": {"archive": why, "reason": reason}, "executed": True}


def worker_of(job: Raw) -> str:
    """The worker id a job is aimed at, for messages (read tolerantly)."""
    on = job.get("on_worker")
    worker = on.get("worker") if isinstance(on, dict) else None
    group = job.get("group")
    if isinstance(worker, str):
        return worker
    return worker_of_group(group) if isinstance(group, str) and is_worker_group(group) else "?"


def deadline_of(job: Raw) -> object:
    on = job.get("on_worker")
    return on.get("deadline") if isinstance(on, dict) else None
