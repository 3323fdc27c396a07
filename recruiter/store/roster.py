"""The ``roster`` collection: one entry per worker slot, its assignment and its outcome.

Invariant: Every fenced roster filter (an entry matched by ``_id`` and ``session``, so a
write never lands on a newer registration of the same id) is written once, in
:mod:`recruiter.store.roster_fences`; a worker's outcome writes are
:mod:`recruiter.store.outcome_writes`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from datetime import datetime

import pymongo
from bson import ObjectId
from pymongo.errors import DuplicateKeyError

from recruiter.domain.cancel import HALTING
from recruiter.domain.outcome import REFERENCE_FIELDS
from recruiter.domain.records import Query
from recruiter.store.layout import AsyncColl, Document, SyncColl

# The fenced filters and the worker's outcome writes live in modules of their own; their names
# are also this module's, as callers use them.
from recruiter.store.outcome_writes import OutcomeRefused as OutcomeRefused
from recruiter.store.outcome_writes import mark_started as mark_started
from recruiter.store.outcome_writes import read_recorded_token as read_recorded_token
from recruiter.store.outcome_writes import record_outcome as record_outcome
from recruiter.store.outcome_writes import record_outcome_and_mark as record_outcome_and_mark
from recruiter.store.roster_fences import entry_as_read as entry_as_read
from recruiter.store.roster_fences import holding_as_read as holding_as_read
from recruiter.store.roster_fences import mark_as_read
from recruiter.store.roster_fences import registration_as_read as registration_as_read

# -- the worker: its own entry, its job, its heartbeat (processes/worker) --------------

# A registration's ``session``: every write of the slot is fenced by it.
Session = ObjectId


def new_session() -> Session:
    """A fresh ``session`` for a registration."""
    return ObjectId()


def new_worker_id() -> str:
    """An id for a worker started without ``--id``: unique, and ordered by start time."""
    return str(ObjectId())


async def insert_entry(roster: AsyncColl, entry: Query) -> bool:
    """Enter the roster; False when an entry with that id is there already."""
    try:
        await roster.insert_one(entry)
    except DuplicateKeyError:
        return False
    return True


async def read_entry(roster: AsyncColl, slot_id: str) -> Document | None:
    """The whole entry of ``slot_id``, whoever registered it."""
    return await roster.find_one({"_id": slot_id})


async def take_over_entry(roster: AsyncColl, old: Mapping[str, object], entry: Query) -> bool:
    """Replace the entry ``old`` a previous registration left, unless it changed since it was
    read (:func:`holding_as_read`)."""
    result = await roster.replace_one(holding_as_read(old), entry)
    return result.matched_count > 0


async def read_assignment(roster: AsyncColl, slot_id: str) -> Document | None:
    """What a slot reads to learn of its work: availability, assignment, job copy, session, stop."""
    return await roster.find_one(
        {"_id": slot_id},
        {"available": 1, f"assigned_to.{slot_id}": 1, "job": 1, "session": 1, "stop_requested": 1,
         "ahead": 1, "started": 1})


async def read_slot_entries(roster: AsyncColl, slot_ids: Sequence[str]) -> list[Document]:
    """A worker process's safety read: what each of its entries says of it (one read for all of them)."""
    return await roster.find({"_id": {"$in": list(slot_ids)}},
                             {"available": 1, "session": 1, "stop_requested": 1}).to_list()


async def release_entry(roster: AsyncColl, slot_id: str, session: ObjectId, now: datetime, *,
                        stopping: bool, assignment: object = None, recovered: bool = False) -> Document | None:
    """Make a slot's own entry available again (unless stopping), with no job and no ``halting``
    (:mod:`recruiter.store.halting`): the one "available again" write, made once its job has
    stopped. The entry as it was (its ``halting``), or None if the fence matched nothing.

    - ``assignment``: the assignment is dropped, fenced by it still naming that job (a stale one);
    - ``recovered``: the entry this registration took over is done releasing the old jobs;
    - neither: the assignment is gone already (the job was taken away), and the entry is not
      being recovered.
    """
    fence = entry_as_read(slot_id, session)
    unset = {"job": "", HALTING: ""}
    if assignment is not None:
        fence[f"assigned_to.{slot_id}"] = {"$eq": assignment}  # as read from the entry (untrusted)
        unset["assigned_to"] = ""
    elif recovered:
        unset["recovering"] = ""
    else:
        fence.update({"assigned_to": {"$exists": False}, "recovering": {"$exists": False}})
    done: Query = {"available": not stopping, "stopping": stopping, "available_since": now, FREED: freed_mark()}
    return await roster.find_one_and_update(fence, {"$set": done, "$unset": unset}, {HALTING: 1})


async def step_down(roster: AsyncColl, slot_id: str, session: ObjectId, timeout_s: float) -> Document | None:
    """Stop an available entry from being given work; if it is not available, what it holds
    (its assignment, job copy, ``ahead`` and ``started``), else None. Bounded by ``timeout_s``."""
    with pymongo.timeout(timeout_s):
        result = await roster.update_one({**entry_as_read(slot_id, session), "available": True},
                                         {"$set": {"stopping": True, "available": False, FREED: freed_mark()}})
        if result.matched_count:
            return None
        doc: Document | None = await roster.find_one(
            entry_as_read(slot_id, session), {f"assigned_to.{slot_id}": 1, "job": 1, "ahead": 1, "started": 1})
    return doc


async def delete_own_entry(roster: AsyncColl, slot_id: str, session: ObjectId, timeout_s: float) -> bool:
    """Delete the slot's own entry unless it holds an outcome; True once it is gone."""
    with pymongo.timeout(timeout_s):
        deleted = await roster.delete_one({**entry_as_read(slot_id, session), "outcome": {"$exists": False}})
        return bool(deleted.deleted_count) or await roster.find_one(entry_as_read(slot_id, session), {"_id": 1}) is None


def read_fences(roster: SyncColl, slot_ids: list[str]) -> dict[str, Document]:
    """The session and assignment of each entry, by id (from the heartbeat thread)."""
    return {d["_id"]: d for d in roster.find({"_id": {"$in": slot_ids}}, {"session": 1, "assigned_to": 1})}


# -- the recruiter and the cleaner (processes/recruiter.py, processes/cleaner.py) ------


# What a round reads of an entry: everything but the job it holds.
ROUND_FIELDS = {"assigned_to": 0, "job": 0}
# Set by a worker on each write that changes whether its entry may be given work, other than an
# outcome (its registration, a release, a step down): a new value each time, so the leader, which
# keeps the free entries it has read (recruiter.processes.roster_view), reads the entry again;
# removed by the leader once read.
FREED = "freed"


def freed_mark() -> ObjectId:
    """The value of ``FREED`` for one write that changes whether an entry may be given work."""
    return ObjectId()


async def read_round_entries(roster: AsyncColl) -> list[Document]:
    """The entries a round works on: available, or holding an outcome (without their job copy)."""
    return await roster.find({"$or": [{"available": True}, {"outcome.token": {"$exists": True}}]},
                             ROUND_FIELDS).to_list()


async def read_changed_entries(roster: AsyncColl) -> list[Document]:
    """The entries that changed in a way a round must see since they were last read: holding an
    outcome, or freed (``FREED``). Two reads at once, each on a sparse index, so what they cost
    is what changed, not the roster's size. An entry both holding an outcome and freed comes twice
    (as read: its ``_id`` is not checked yet, :mod:`recruiter.processes.roster_view` drops the twin)."""
    outcomes, freed = await asyncio.gather(
        roster.find({"outcome.token": {"$exists": True}}, ROUND_FIELDS).to_list(),
        roster.find({FREED: {"$exists": True}}, ROUND_FIELDS).to_list())
    return [*outcomes, *freed]


# A registration's ``session`` as a number, for the leader's check (:func:`settled_free`): an
# ObjectId's creation time in milliseconds, anything else 0 (the same on both sides).
_SESSION_STAMP = {"$cond": [{"$eq": [{"$type": "$session"}, "objectId"]}, {"$toLong": {"$toDate": "$session"}}, 0]}


def session_stamp(session: object) -> int:
    """What :func:`settled_free` adds up for an entry of ``session``, computed from the entry kept."""
    return int(session.generation_time.timestamp()) * 1000 if isinstance(session, ObjectId) else 0


# A free entry the leader has nothing left to read of: no ``FREED`` mark, no outcome.
_SETTLED: Query = {FREED: {"$exists": False}, "outcome.token": {"$exists": False}}


def is_settled(entry: Mapping[str, object]) -> bool:
    """Whether ``entry`` as read matches ``_SETTLED`` (the same rule, on the leader's side)."""
    outcome = entry.get("outcome")
    return FREED not in entry and not (isinstance(outcome, Mapping) and "token" in outcome)


async def settled_free(roster: AsyncColl) -> tuple[int, int]:
    """How many entries are free with no ``FREED`` mark and no outcome (those a leader that missed
    nothing keeps from earlier rounds, :mod:`recruiter.processes.roster_view`, invariant 3), and the
    sum of their :func:`session_stamp` (a registration again, without a mark, changes it). One
    aggregation on the ``available`` index: one document comes back, however large the roster."""
    got = await (await roster.aggregate([
        {"$match": {"available": True, **_SETTLED}},
        {"$group": {"_id": None, "n": {"$sum": 1}, "stamps": {"$sum": _SESSION_STAMP}}},
    ])).to_list()
    return (int(got[0]["n"]), int(got[0]["stamps"])) if got else (0, 0)


async def clear_freed(roster: AsyncColl, marks: Sequence[tuple[object, object]]) -> None:
    """Remove the ``FREED`` marks read, each ``(entry id, mark)`` only if still the same (a newer
    mark is read by the next round), in one write. A mark that is not one :func:`freed_mark` writes
    (a hand edit) goes whatever it holds, matched by its type, never by its value: a document holding
    a ``$`` name in the ``$in`` failed the write, and the round with it, at every round."""
    written = [(w, m) for w, m in marks if isinstance(m, ObjectId)]
    odd = [w for w, m in marks if not isinstance(m, ObjectId)]
    which: list[Query] = [{"_id": {"$in": [w for w, _ in written]}, FREED: {"$in": [m for _, m in written]}}] \
        if written else []
    if odd:
        which.append({"_id": {"$in": odd}, FREED: {"$not": {"$type": "objectId"}}})
    if which:
        await roster.update_many(which[0] if len(which) == 1 else {"$or": which}, {"$unset": {FREED: ""}})


async def clear_outcomes(roster: AsyncColl, outcomes: Sequence[tuple[object, object]]) -> None:
    """Remove applied outcomes, each ``(entry id, outcome token)`` only if still the same: ONE
    ``update_many`` (ids in the ids, token in the tokens: a token names one lock of one job, held
    by one entry, so the pair matches exactly as a filter per entry would)."""
    if outcomes:
        await roster.update_many({"_id": {"$in": [w for w, _ in outcomes]},
                                  "outcome.token": {"$in": [t for _, t in outcomes]}},
                                 {"$unset": {"outcome": ""}})


async def assign(roster: AsyncColl, picks: Sequence[Mapping[str, object]], now: datetime) -> int:
    """Hand each pick (``{w: worker id, j: job id, job: copy or reference, a: lock token if
    handed out ahead, else false}``) to its entry, if still
    available and not stopping, with ONE ``update_many``: an update pipeline keeps in each entry
    only its own part (recruiter.processes.rounds.RoundWrites.assign); how many entries took theirs."""
    return int((await roster.update_many(*assign_statement(picks, now))).modified_count)


def assign_statement(picks: Sequence[Mapping[str, object]], now: datetime) -> tuple[Query, list[Query]]:
    """The ``update_many`` of :func:`assign`, as (filter, pipeline)."""
    workers = [p["w"] for p in picks]
    # Each entry's own pick, found by its position (one lookup per entry, not a filter of the list).
    own_pick = {"$arrayElemAt": [{"$literal": list(picks)}, {"$indexOfArray": [{"$literal": workers}, "$_id"]}]}
    return (
        {"_id": {"$in": list(dict.fromkeys(workers))}, "available": True, "stopping": {"$ne": True}},
        [
            {"$set": {"_pick": own_pick}},
            {"$set": {"available": False, "assigned_since": now,
                      "assigned_to": {"$arrayToObject": [[{"k": "$_pick.w", "v": "$_pick.j"}]]},
                      "job": "$_pick.job", "ahead": "$_pick.a"}},
            {"$unset": ["_pick", "outcome", "started", "hot"]},
        ],
    )


async def read_assignments(roster: AsyncColl, ids: Sequence[object]) -> list[Document]:
    return await roster.find({"_id": {"$in": list(ids)}}, {"assigned_to": 1}).to_list()


async def read_references(roster: AsyncColl, ids: Sequence[object]) -> list[Document]:
    """The entries of ``ids`` with the fields that name the jobs they hold (recruiter.domain.outcome)."""
    return await roster.find({"_id": {"$in": list(ids)}}, REFERENCE_FIELDS).to_list()


async def read_entries(roster: AsyncColl, ids: Sequence[object]) -> list[Document]:
    return await roster.find({"_id": {"$in": list(ids)}}).to_list()


async def ids_created_before(roster: AsyncColl, cutoff: datetime) -> list[object]:
    """The ids of the entries not created since ``cutoff`` (a missing date counts as old)."""
    return [e["_id"] for e in await roster.find({"created_at": {"$not": {"$gte": cutoff}}}, {"_id": 1}).to_list()]


async def delete_dead_entry(roster: AsyncColl, entry: Mapping[str, object], *, by_last_seen: bool) -> bool:
    """Delete a dead worker's entry as it was read: same registration, same outcome (or none), and
    with ``by_last_seen`` the same ``last_seen_at``; whether it was deleted."""
    fence = {**registration_as_read(entry), **mark_as_read(entry),
             "outcome": {"$eq": entry["outcome"]} if "outcome" in entry else {"$exists": False}}
    if by_last_seen:
        fence["last_seen_at"] = {"$eq": entry["last_seen_at"]}
    return bool((await roster.delete_one(fence)).deleted_count)



# -- liveness, quarantine and the fairness cursor (moved from domain/) -----------------


# What find_stranded needs of an entry.
ENTRY_FIELDS = {"session": 1, "assigned_to": 1, "pid": 1, "hostname": 1, "ahead": 1, "started": 1}


async def read_assigned_entries(roster: AsyncColl, ids: Sequence[object]) -> list[Document]:
    """The entries of ``ids`` that hold an assignment and no outcome."""
    return await roster.find({"_id": {"$in": list(ids)}, "available": False, "outcome": {"$exists": False}},
                             ENTRY_FIELDS).to_list()


async def delete_stranded_entry(roster: AsyncColl, entry: Mapping[str, object], job_id: object) -> bool:
    """Delete an entry that missed its beats, if it still holds ``job_id``, no outcome and the ``started``
    mark as read (same session, compared as a value: a session written as a document is not read as an
    operator). A mark written since means the job may have started: the entry stays, and the next
    pass judges it again from what it reads then."""
    worker_id = entry["_id"]
    deleted = await roster.delete_one({**registration_as_read(entry), **mark_as_read(entry),
                                       f"assigned_to.{worker_id}": {"$eq": job_id},
                                       "outcome": {"$exists": False}})
    return bool(deleted.deleted_count)


async def any_takes_group(roster: AsyncColl, group: str) -> bool:
    """Whether some roster entry's ``work_on`` names ``group`` (the asyncio twin of :func:`names_group`)."""
    return await roster.find_one({"work_on": group}, {"_id": 1}) is not None


def names_group(roster: SyncColl, group: str) -> bool:
    """Whether some worker's ``work_on`` names ``group``."""
    return roster.find_one({"work_on": group}, {"_id": 1}) is not None



# -- the producer and the operator's commands (producer/, cli/) ------------------------


def _ids_filter(ids: list[str]) -> Query:
    """Entries named by ``ids``; ``W`` also names the slots ``W-0``, ``W-1``… of ``--concurrency``
    and the look-ahead lanes ``W~1``, ``W-0~1``… of ``--prefetch``."""
    return {"_id": {"$in": [re.compile(rf"^{re.escape(i)}(-\d+)?(~\d+)?$") for i in ids]}}


def request_stop(roster: SyncColl, ids: list[str] | None) -> list[str]:
    """Ask the named workers (all, when ``ids`` is None) to stop gracefully; returns the entries asked.

    The request is a flag in the roster entry (``stop_requested``); each worker
    reads its entry when it polls, stops taking work, finishes what it runs
    within its grace period and leaves.
    """
    filter_ = {} if ids is None else _ids_filter(ids)
    asked: list[str] = [d["_id"] for d in roster.find(filter_, {"_id": 1})]
    if asked:
        roster.update_many({"_id": {"$in": asked}}, {"$set": {"stop_requested": True}})
    return sorted(asked)


def entries_by_id(roster: SyncColl) -> list[Document]:
    """Every roster entry, by id, without its outcome and job (``recruiter workers list``, ``status``)."""
    return list(roster.find({}, {"outcome": 0, "job": 0}).sort("_id", 1))


async def longest_heartbeat_interval(roster: AsyncColl, above_s: float) -> tuple[str, float] | None:
    """The registered worker with the longest heartbeat interval over ``above_s``, and that interval."""
    worker = await roster.find_one({"heartbeat_interval_s": {"$gt": above_s}},
                                   {"heartbeat_interval_s": 1}, sort=[("heartbeat_interval_s", -1)])
    interval_s = (worker or {}).get("heartbeat_interval_s")
    if worker is None or not isinstance(interval_s, (int, float)):
        return None
    return worker["_id"], float(interval_s)
