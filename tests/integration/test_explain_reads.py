"""``Admin.explain`` (recruiter.admin.explain) on a real server: "behind N" equals a brute-force
count of the ready jobs ahead in the candidates order, is capped at AHEAD_CAP, and the whole
explanation costs a bounded handful of round trips, whatever the queue holds."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from bson import ObjectId
from pymongo import MongoClient

from bench.commands import Commands
from recruiter.admin import Admin, Waiting
from recruiter.domain.control import CURSOR_ID
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.domain.waiting import AHEAD_CAP, ahead_filters
from recruiter.store import ensure_indexes_sync
from tests.workables import Record

ORDER = {"retrying": 0, "queued": 1}


def ms(t: datetime) -> datetime:
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


def seed(db: Any, db_uri: str, now: datetime) -> list[dict[str, Any]]:
    rnd = random.Random(3)
    template = dict(build_job_document(Record(db_uri, n=0), JobOptions(), now))
    docs = []
    for i in range(2000):
        due = ms(now - timedelta(seconds=rnd.choice([1, 2, 3, 60, 600]))) if i % 10 else ms(now + timedelta(hours=1))
        docs.append({**template, "_id": ObjectId(), "group": "mail", "tenant": rnd.choice(["acme", "acme", "beta"]),
                     "priority": rnd.choice(["high", "low"]), "status": "retrying" if i % 7 == 0 else "queued",
                     "scheduled_at": due})
    db.scheduled.insert_many(docs)
    session = ObjectId()
    db.roster.insert_one({"_id": "w1", "work_on": ["mail"], "available": False, "session": session})
    db.heartbeats.insert_one({"_id": "w1", "session": session, "last_seen_at": now,
                              "fresh_until": now + timedelta(minutes=5)})
    return docs


def brute_ahead(docs: list[dict[str, Any]], job: dict[str, Any], now: datetime) -> int:
    def key(d: dict[str, Any]) -> tuple[Any, ...]:
        return ORDER[d["status"]], d["priority"], d["scheduled_at"], d["_id"]
    return sum(1 for d in docs if d["group"] == job["group"] and d["tenant"] == job["tenant"]
               and d["scheduled_at"] <= now and key(d) < key(job))


def test_each_range_counted_ahead_is_read_on_the_candidates_index(db: Any, db_uri: str) -> None:
    ensure_indexes_sync(db)
    now = datetime.now(UTC)
    docs = seed(db, db_uri, now)
    shapes = {(d["status"], d["priority"]): d for d in docs if d["scheduled_at"] <= now}
    assert len(shapes) == 4
    for job in shapes.values():
        for where in ahead_filters(job, now):
            plan = json.dumps(db.command("explain", {"aggregate": "scheduled", "pipeline": [
                {"$match": where}, {"$limit": AHEAD_CAP}, {"$group": {"_id": 1, "n": {"$sum": 1}}}], "cursor": {}}),
                default=str)
            assert "COLLSCAN" not in plan, (where, plan[:800])
            assert '"indexName": "candidates"' in plan, (where, plan[:800])


def test_behind_n_is_the_exact_count_ahead_then_capped_at_a_bounded_cost(db: Any, db_uri: str) -> None:
    ensure_indexes_sync(db)
    now = datetime.now(UTC)
    docs = seed(db, db_uri, now)
    commands = Commands()
    client: MongoClient[Any] = MongoClient(db_uri, tz_aware=True, event_listeners=[commands])
    try:
        admin = Admin(client.get_default_database())
        admin.now()  # the clock's calibration is not the explanation's cost
        due = [d for d in docs if d["scheduled_at"] <= now]
        checked = 0
        for job in random.Random(5).sample(due, 40):
            expected = brute_ahead(docs, job, now)
            commands.clear()
            found = admin.explain(job["_id"])
            assert found is not None
            assert len(commands.events) <= 11, [e[0] for e in commands.events]
            assert commands.documents <= 10  # the job, the switches, one entry, one beat, up to 5 counts
            if expected == 0:
                assert found.code == Waiting.NEXT, found.text
            elif expected < AHEAD_CAP:
                assert found.code == Waiting.BEHIND, found.text
                assert found.details["ahead"] == expected, (found.text, expected)
                assert f"behind {expected} ready job(s) of its tenant in group mail, tenant {job['tenant']}" \
                    in found.text
                checked += 1
            else:
                assert found.details["ahead"] == AHEAD_CAP
                assert found.details["ahead_capped"] is True
                assert f"behind at least {AHEAD_CAP}" in found.text
        assert checked >= 10
        last = max((d for d in due if d["tenant"] == "acme"),
                   key=lambda d: (ORDER[d["status"]], d["priority"], d["scheduled_at"], d["_id"]))
        assert brute_ahead(docs, last, now) >= AHEAD_CAP
        commands.clear()
        capped = admin.explain(last["_id"])
        assert capped is not None
        assert capped.code == Waiting.BEHIND
        assert capped.details["ahead_capped"] is True
        print(f"explain of the last of {len(due)} ready jobs: {len(commands.events)} round trips "
              f"({', '.join(e[0] for e in commands.events)}), {commands.documents} documents returned")
        later = next(d for d in docs if d["scheduled_at"] > now and d["status"] == "queued")
        commands.clear()
        assert (found := admin.explain(later["_id"])) is not None
        assert found.code == Waiting.DUE_LATER
        assert len(commands.events) <= 2  # the job by _id: nothing else to read
        assert admin.explain(ObjectId()) is None
    finally:
        client.close()


def test_held_by_a_limit_names_the_limit_that_holds_the_job_now(db: Any, db_uri: str) -> None:
    ensure_indexes_sync(db)
    now = datetime.now(UTC)
    template = dict(build_job_document(Record(db_uri, n=0), JobOptions(), now))
    due = ms(now - timedelta(seconds=5))
    waiting = {**template, "_id": ObjectId(), "group": "mail", "tenant": "acme", "scheduled_at": due}
    other = {**template, "_id": ObjectId(), "group": "mail", "tenant": "beta", "scheduled_at": due}
    running = {**template, "_id": ObjectId(), "group": "mail", "tenant": "acme", "scheduled_at": due, "locked": True,
               "status": "assigned", "locked_by": "w1", "lock_token": ObjectId(), "locked_at": now}
    db.scheduled.insert_many([waiting, other, running])
    session = ObjectId()
    db.roster.insert_one({"_id": "w1", "work_on": ["mail"], "available": False, "session": session})
    db.roster.insert_one({"_id": "w2", "work_on": ["mail"], "available": True, "session": session})
    for wid in ("w1", "w2"):
        db.heartbeats.insert_one({"_id": wid, "session": session, "last_seen_at": now,
                                  "fresh_until": now + timedelta(minutes=5)})
    admin = Admin(db)
    assert (found := admin.explain(waiting["_id"])) is not None
    assert found.code == Waiting.NEXT  # no limit

    admin.set_limit("mail", tenant="acme", max_running=1)
    found = admin.explain(waiting["_id"])
    assert found is not None
    assert found.code == Waiting.HELD_BY_LIMIT, found.text
    assert found.text == "held by a limit: tenant acme of group mail runs 1 of max_running 1"
    assert found.details["limit"] == "tenant acme of group mail"
    beta = admin.explain(other["_id"])
    assert beta is not None
    assert beta.code == Waiting.NEXT  # the limit of another tenant does not hold it

    admin.set_limit("mail", tenant="acme", max_running=2)  # room again
    assert (found := admin.explain(waiting["_id"])) is not None
    assert found.code == Waiting.NEXT
    # A rate whose tokens the rounds have spent (the state they keep in the cursor document).
    admin.set_limit("mail", rate="1/h")
    db.metadata.update_one({"_id": CURSOR_ID}, {"$set": {"limiter.groups.mail": {"t": 0.0, "at": now}}}, upsert=True)
    found = admin.explain(other["_id"])
    assert found is not None
    assert found.code == Waiting.HELD_BY_LIMIT, found.text
    assert found.text.startswith("held by a limit: group mail is at its rate of 1/h (next start in ")
    # A limit edited by hand into something malformed holds the job, and says why.
    db.metadata.update_one({"_id": "limits"}, {"$set": {"groups.mail": {"max_running": 1.5}}})
    found = admin.explain(other["_id"])
    assert found is not None
    assert found.code == Waiting.HELD_BY_LIMIT, found.text
    assert found.text.startswith("held by a limit: the stored limit of group mail is malformed "
                                 "(max_running: expected an integer, got float 1.5)"), found.text
