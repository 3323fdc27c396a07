"""Malformed documents next to normal jobs, with the real processes: nothing stops.

Documents are written straight into ``scheduled`` (as an older version, another
language or a hand edit in mongosh would), next to 50 normal jobs, with ``*``
workers and with named-group workers. Every normal job is archived ``done``
once, every malformed one ``malformed`` with a reason naming its field, and no
process exits. Malformed roster entries and metadata documents ride along.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import Int64, ObjectId

from recruiter import Recruiter
from recruiter.domain.job import JobOptions, build_job_document
from tests.conftest import wait_for
from tests.processes.conftest import Processes
from tests.workables import Record

NORMAL = 50


def _without(*fields: str) -> Any:
    return lambda d: {k: v for k, v in d.items() if k not in fields}


def _with(**changes: Any) -> Any:
    return lambda d: {**d, **changes}


def _nested(field: str, sub: str, value: Any) -> Any:
    return lambda d: {**d, field: {**d[field], sub: value}}


def _no_class(d: dict[str, Any]) -> dict[str, Any]:
    return {**d, "workable": {k: v for k, v in d["workable"].items() if k != "class"}}


def _locked_without_token(d: dict[str, Any]) -> dict[str, Any]:
    return {**d, "locked": True, "status": "assigned", "locked_by": "nobody", "locked_at": d["created_at"]}


def _deep(levels: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"s": 1}
    for _ in range(1, levels):
        doc = {"s": doc}
    return doc


# kind -> (change to a valid job document, the field its reason must name)
KINDS: dict[str, tuple[Any, str]] = {
    "group is a number": (_with(group=7), "group"),
    "group is '*'": (_with(group="*"), "group"),
    "group holds a NUL": (_with(group="al\x00pha"), "group"),
    "tenant is a number": (_with(tenant=42), "tenant"),
    "tenant is empty": (_with(tenant=""), "tenant"),
    "tenant is a document": (_with(tenant={"name": "acme"}), "tenant"),
    "no created_at": (_without("created_at"), "created_at"),
    "scheduled_at is a string": (_with(scheduled_at="2026-01-01T00:00:00Z"), "scheduled_at"),
    # (A date outside Python's range is refused by the embedded server itself; see test_documents.py.)
    "no locked": (_without("locked"), "locked"),
    "no status": (_without("status"), "status"),
    "locked is a string": (_with(locked="false"), "locked"),
    "status unknown": (_with(status="running"), "status"),
    "unlocked but assigned": (_with(status="assigned"), "status"),
    "priority unknown": (_with(priority="urgent"), "priority"),
    "attempts NaN": (_with(attempts=math.nan), "attempts"),
    "attempts huge": (_with(attempts=Int64(2**62)), "attempts"),
    "attempts a string": (_with(attempts="0"), "attempts"),
    "workable a string": (_with(workable="tests.workables:Record"), "workable"),
    "workable without class": (_no_class, "workable.class"),
    "parameters a list": (_nested("workable", "parameters", [1, 2]), "workable.parameters"),
    "no retry_policy": (_without("retry_policy"), "retry_policy"),
    "timeout infinite": (_with(timeout_s=math.inf), "timeout_s"),
    "tags a string": (_with(tags="a,b"), "tags"),
    "executions a string": (_with(executions="none"), "executions"),
    "last_execution a string": (_with(last_execution="boom"), "last_execution"),
    "locked without a token": (_locked_without_token, "lock_token"),
    # Names MongoDB inserts but an update cannot write (the round copies the job into the roster):
    # with the write guard on, the recruiter's copy of these failed the test before the reader checked them.
    "$-prefixed parameter key": (_nested("workable", "parameters", {"order": {"$where": "1"}}),
                                 "workable.parameters.order.$where"),
    "dotted parameter key": (_nested("workable", "parameters", {"usd.cents": 1}), "workable.parameters.usd.cents"),
    "$-prefixed field": (_with(**{"$comment": "by hand"}), "$comment"),
    "nested too deep": (_nested("workable", "parameters", {"d": _deep(97)}), "document"),
}


def malformed_documents(db_uri: str, group: str) -> dict[Any, tuple[str, str]]:
    """Writes one document per kind; returns _id -> (kind, field the reason names)."""
    now = datetime.now(UTC)
    docs: dict[Any, tuple[str, str]] = {}
    for n, (kind, (change, field)) in enumerate(KINDS.items()):
        doc = change(build_job_document(Record(db_uri, n=1000 + n), JobOptions(group=group, tenant="acme"), now))
        docs[doc["_id"]] = (kind, field)
        KIND_DOCS.append(doc)
    # An _id that is itself a document, and a document with only an _id.
    odd = {**build_job_document(Record(db_uri, n=2000), JobOptions(group=group), now), "_id": {"id": 1},
           "tenant": 5}
    KIND_DOCS.append(odd)
    docs["{'id': 1}"] = ("an _id that is a document", "_id")
    bare = {"_id": ObjectId()}
    KIND_DOCS.append(bare)
    docs[bare["_id"]] = ("only an _id", "group")
    return docs


KIND_DOCS: list[dict[str, Any]] = []


def write_untrusted_metadata(db: Any) -> None:
    now = datetime.now(UTC)
    db.roster.insert_many([
        {"_id": "ghost-1", "available": True, "work_on": "alpha", "last_seen_at": now - timedelta(hours=1)},
        {"_id": "ghost-2", "available": True, "work_on": [1, 2], "available_since": "now", "last_seen_at": "now"},
        {"_id": "ghost-3", "available": True, "work_on": ["alpha"], "last_seen_at": now - timedelta(hours=1),
         "outcome": {"job": ObjectId(), "decision": "done"}},
        # Seen "in the future": not taken for dead while the test runs, so read every round.
        {"_id": "odd-live", "available": True, "work_on": "alpha", "last_seen_at": now + timedelta(hours=1)},
    ])
    # Its heartbeat document (recruiter.liveness) keeps it alive; the ghosts have none.
    db.heartbeats.insert_one({"_id": "odd-live", "last_seen_at": now + timedelta(hours=1),
                              "fresh_until": now + timedelta(hours=1)})
    db.metadata.insert_many([
        {"_id": "fairness", "last_group": 5, "last_tenant": "alpha", "counts": [1]},
        {"_id": "paused", "groups": [1, {"x": 1}], "tenants": "acme"},
    ])


def events(proc_log: str) -> list[dict[str, Any]]:
    out = []
    for line in proc_log.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


@pytest.mark.parametrize("workers", [["*", "*"], ["alpha", "beta"]], ids=["star-workers", "named-workers"])
def test_malformed_documents_are_quarantined_and_normal_jobs_all_run(
        processes: Processes, db: Any, db_uri: str, workers: list[str]) -> None:
    KIND_DOCS.clear()
    with Recruiter.connect(db_uri) as rec:
        normal = rec.enqueue_many(
            Record(db_uri, n=i).as_job_of(rec).in_group("alpha" if i % 2 else "beta").for_tenant(f"t{i % 3}")
            for i in range(NORMAL))
    malformed = malformed_documents(db_uri, "alpha")
    # As mongosh or another driver could, past the collection's validator (recruiter.store).
    db.scheduled.insert_many(KIND_DOCS, ordered=False, bypass_document_validation=True)
    assert len(malformed) >= 20
    write_untrusted_metadata(db)

    procs = [processes.recruiter("--sweep-interval", "1s"), processes.cleaner()]
    procs += [processes.worker("--group", g, "--concurrency", "2") for g in workers]

    try:
        wait_for(lambda: db.archived.count_documents({}) == NORMAL + len(malformed), timeout_s=120,
                 message="every job archived, done or malformed")
    except AssertionError:
        print("LEFT", list(db.scheduled.find({}, {"group": 1, "tenant": 1, "status": 1, "locked": 1, "priority": 1})))
        raise

    archived = {str(d["_id"]) if isinstance(d["_id"], dict) else d["_id"]: d
                for d in db.archived.find({}, {"why": 1, "reason": 1})}
    assert Counter(archived[i]["why"] for i in normal) == {"done": NORMAL}
    starts = Counter(d["n"] for d in db.ledger.find({"event": "start"}))
    assert starts == {i: 1 for i in range(NORMAL)}, "each normal job ran once, no malformed one ran"
    for job_id, (kind, field) in malformed.items():
        doc = archived[job_id]
        assert doc["why"] == "malformed", kind
        assert doc["reason"].startswith(f"{field}:") or doc["reason"].startswith(f"{field}."), (kind, doc["reason"])
    assert db.scheduled.count_documents({}) == 0
    # Malformed roster entries that do not heartbeat are removed; the cursor is rewritten whole.
    wait_for(lambda: db.roster.count_documents({"_id": {"$regex": "^ghost"}}) == 0, timeout_s=30,
             message="the malformed roster entries removed by the cleaner")
    cursor = db.metadata.find_one({"_id": "fairness"})
    assert isinstance(cursor.get("last_tenant", {}), dict), cursor
    assert all(p.popen.poll() is None for p in procs), "no process exited"
    recruiter_events = events(procs[0].log())
    quarantined = [e for e in recruiter_events if e.get("event") == "job.quarantined"]
    cleaner_quarantined = [e for e in events(procs[1].log()) if e.get("event") == "job.quarantined"]
    assert len(quarantined) + len(cleaner_quarantined) == len(malformed)
    warned = Counter(e.get("worker_id") for e in recruiter_events if e.get("event") == "worker.malformed")
    assert warned["odd-live"] == 1, "one warning per malformed entry, not per round"
    assert set(warned.values()) == {1}, "one warning per malformed entry, not per round"
    assert db.roster.find_one({"_id": "odd-live"}) is not None  # heartbeating: left alone
    assert sum(1 for e in recruiter_events if e.get("event") == "paused.malformed") == 2  # groups and tenants
