"""Every index and the validator of ``scheduled``: the one place that knows the database layout.

Every query the loops run is backed by one of the indexes below; the comment on
each says which query it serves.
"""

from __future__ import annotations

from typing import Any

import structlog
from pymongo import ASCENDING, DESCENDING, IndexModel
from pymongo.errors import OperationFailure

from recruiter.store.layout import ARCHIVED, EDGES, HEARTBEATS, ROSTER, SCHEDULED, SCHEDULES, TIMELINE, UNIQUE_KEYS

log = structlog.get_logger("recruiter.store")

INDEXES: dict[str, list[IndexModel]] = {
    SCHEDULED: [
        # Recruiter candidates (recruiter/candidates.py explains the plan): equality on
        # locked, then group and tenant (equality, or a range for a ring), status and
        # priority as points, scheduled_at <= now, and _id for a total order. Queries sort
        # by these keys in this order, so the scan yields jobs in order and stops after
        # `limit` matches; status is descending so due retrying jobs come first.
        IndexModel([("locked", ASCENDING), ("group", ASCENDING), ("tenant", ASCENDING), ("status", DESCENDING),
                    ("priority", ASCENDING), ("scheduled_at", ASCENDING), ("_id", ASCENDING)],
                   name="candidates"),
        # Jobs aimed at one worker, by deadline (the cleaner archives those past it): only
        # the documents that have one are in it (recruiter.domain.placement).
        IndexModel([("on_worker.deadline", ASCENDING)], name="worker_deadline", sparse=True),
        # recruiter jobs list reads scheduled through `candidates` too: equality on locked,
        # then group and tenant when given; its other filters and its order (created_at) are
        # not served by an index (the listing walks the jobs of that prefix).
        # Jobs held by one worker (cleaner unlocking a dead worker's jobs).
        IndexModel([("locked_by", ASCENDING)], name="by_worker", sparse=True),
        # Unique jobs (domain/unique.py): at most one unfinished job per key; the producer's
        # conflict read (find by unique.key) uses it too. Partial: jobs without a key are not in it.
        IndexModel([("unique.key", ASCENDING)], name="unique_key", unique=True,
                   partialFilterExpression={"unique.key": {"$type": "string"}}),
        # Jobs waiting for other jobs (domain/dependencies.py), only while held: the leader's
        # sweep walks them by _id, and whoever archives a job finds its dependents by `pending`.
        IndexModel([("after.held", ASCENDING), ("_id", ASCENDING)], name="waiting_for",
                   partialFilterExpression={"after.held": True}),
        IndexModel([("after.pending", ASCENDING)], name="dependents", partialFilterExpression={"after.held": True}),
        # The steps of a workflow (domain/workflow.py; recruiter workflows list|show): jobs with a
        # `workflow` field only (a malformed one too, so that the views can set it aside).
        IndexModel([("workflow.id", ASCENDING)], name="by_workflow",
                   partialFilterExpression={"workflow": {"$exists": True}}),
    ],
    ARCHIVED: [
        # Retention: the cleaner deletes by archived_at range.
        IndexModel([("archived_at", ASCENDING)], name="retention"),
        # History reads in mongosh: db.archived.find({why: ...}).
        IndexModel([("why", ASCENDING), ("archived_at", ASCENDING)], name="by_why"),
        # Whether a group or tenant was ever used (recruiter groups|tenants pause), and
        # history reads by group in mongosh.
        IndexModel([("group", ASCENDING), ("tenant", ASCENDING)], name="by_group"),
        # recruiter jobs list (store/history.py), newest first within a time range: with no
        # filter it reads `retention`, with --why `by_why`, and these for --class, --group and
        # --tenant (the first of them given; the other filters are checked on what it yields).
        IndexModel([("workable.class", ASCENDING), ("archived_at", ASCENDING)], name="by_class_time"),
        IndexModel([("group", ASCENDING), ("archived_at", ASCENDING)], name="by_group_time"),
        IndexModel([("tenant", ASCENDING), ("archived_at", ASCENDING)], name="by_tenant_time"),
        # History of a unique key in mongosh: db.archived.find({"unique.key": ...}).
        IndexModel([("unique.key", ASCENDING)], name="by_unique_key", sparse=True),
        # A workflow's history (recruiter workflows list|show): as `by_workflow` of scheduled.
        IndexModel([("workflow.id", ASCENDING)], name="by_workflow",
                   partialFilterExpression={"workflow": {"$exists": True}}),
    ],
    UNIQUE_KEYS: [
        # Reservations whose period is over are taken over by the next enqueue anyway; where
        # the server runs TTL monitors, they are also removed. Forever ones have no `until`.
        IndexModel([("until", ASCENDING)], name="expiry", expireAfterSeconds=0),
    ],
    SCHEDULES: [
        # The leader: due schedules (next_fire_at <= now), the earliest next fire (its wake-up
        # timer), and those needing a next fire time (null: paused or resumed).
        IndexModel([("next_fire_at", ASCENDING)], name="next_fire"),
        # The leader: schedules asked to run now (recruiter schedules run-now).
        IndexModel([("run_now", ASCENDING)], name="run_now", partialFilterExpression={"run_now": {"$type": "date"}}),
    ],
    TIMELINE: [
        # The history's reads (dashboard, recruiter stats --history): a resolution, a range of buckets.
        IndexModel([("res", ASCENDING), ("at", ASCENDING)], name="by_time"),
        # Minute buckets a day after they end, hour buckets 30 days after (recruiter.domain.timeline.KEPT).
        IndexModel([("expires_at", ASCENDING)], name="expiry", expireAfterSeconds=0),
    ],
    ROSTER: [
        # Recruiter: available workers and workers holding an outcome.
        IndexModel([("available", ASCENDING)], name="available"),
        IndexModel([("outcome.token", ASCENDING)], name="pending_outcomes", sparse=True),
        # Recruiter: entries freed or stopped by their worker since it last read them (roster.FREED).
        IndexModel([("freed", ASCENDING)], name="freed", sparse=True),
        # Recruiter (flow control): entries still stopping a cancelled job of a limited group
        # (recruiter.store.halting); only those entries are in it.
        IndexModel([("halting.group", ASCENDING)], name="halting", sparse=True),
        # Cleaner: entries of an older version, which heartbeat in the entry itself.
        IndexModel([("last_seen_at", ASCENDING)], name="heartbeat"),
    ],
    EDGES: [
        # A large fan-in's edges (domain/edges.py): whoever archives a job finds its edges by
        # upstream; the sweep, the views and the decision read a dependent's by dependent.
        IndexModel([("upstream", ASCENDING)], name="edges_by_upstream"),
        IndexModel([("dependent", ASCENDING), ("_id", ASCENDING)], name="edges_by_dependent"),
    ],
    HEARTBEATS: [
        # Cleaner: workers whose heartbeat is older than --considered-dead-after.
        IndexModel([("last_seen_at", ASCENDING)], name="last_seen"),
        # Recruiter and cleaner: workers that missed their heartbeats (recruiter/liveness.py);
        # the recruiter's freshness check reads by _id.
        IndexModel([("fresh_until", ASCENDING)], name="fresh_until"),
        # Everyone who looks up an entry's beat by its id: the roster entries a process document names.
        IndexModel([("ids", ASCENDING)], name="process_ids", sparse=True),
    ],
}


# A second line behind recruiter.documents: the server refuses a new job whose fields
# that candidate reads depend on have the wrong type (DocumentValidationFailure, code 121),
# whoever writes it, so it cannot sit in scheduled unseen. The reader checks the rest
# when the job is read. "moderate": documents already stored that fail it can still be
# updated and deleted, so the quarantine of one is never blocked. Only the types the
# recruiter's own writes always keep; kept short, as the embedded server evaluates it
# per write (measured there: inserts about 1.4x slower, lock updates no slower).
JOB_SCHEMA: dict[str, Any] = {
    "bsonType": "object",
    "required": ["group", "status", "locked", "priority", "scheduled_at", "attempts"],
    "properties": {
        "group": {"bsonType": "string", "minLength": 1},
        "tenant": {"bsonType": ["string", "null"], "minLength": 1},
        "status": {"enum": ["queued", "retrying", "assigned"]},
        "locked": {"bsonType": "bool"},
        "priority": {"enum": ["high", "low"]},
        "scheduled_at": {"bsonType": "date"},
        "attempts": {"bsonType": ["int", "long", "double"], "minimum": 0},
    },
}
VALIDATION = {"validator": {"$jsonSchema": JOB_SCHEMA}, "validationLevel": "moderate", "validationAction": "error"}


def ensure_indexes_sync(db: Any) -> None:
    for name, models in INDEXES.items():
        db[name].create_indexes(models)
    try:
        db.command("collMod", db[SCHEDULED].name, **VALIDATION)
    except OperationFailure as exc:
        _no_validator(exc)


async def ensure_indexes(db: Any) -> None:
    """The indexes, and the validator of ``scheduled`` where the server has validators."""
    for name, models in INDEXES.items():
        await db[name].create_indexes(models)
    try:
        await db.command("collMod", db[SCHEDULED].name, **VALIDATION)
    except OperationFailure as exc:
        _no_validator(exc)


def _no_validator(exc: OperationFailure) -> None:
    # No validators (or no right to set one): recruiter.documents still checks every read.
    log.info("validator.unavailable", collection=SCHEDULED, reason=(str(exc).splitlines() or [""])[0][:200])
