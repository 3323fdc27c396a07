"""The read model (recruiter.admin) called directly, as the CLI, the Python API and a dashboard call it:
every figure against a count the test makes itself, and every action all or nothing."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId
from bson.int64 import Int64

from recruiter import Recruiter
from recruiter.admin import Admin, RetryRefusedAll, UnusedNames
from recruiter.admin.roster import checked_entries
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.domain.listing import EARLIEST
from recruiter.store import Change, ensure_indexes_sync
from tests.workables import Record

SNAPSHOT = ("scheduled", "archived", "metadata", "roster")


def snapshot(db: Any) -> dict[str, list[Any]]:
    return {name: sorted(db[name].find(), key=lambda d: str(d["_id"])) for name in SNAPSHOT}


def job(db_uri: str, n: int, now: datetime, **options: Any) -> dict[str, Any]:
    return dict(build_job_document(Record(db_uri, n=n), JobOptions(**options), now))


def archived(doc: dict[str, Any], why: str, at: datetime) -> dict[str, Any]:
    return {**{k: v for k, v in doc.items() if k != "status"}, "why": why, "archived_at": at,
            "done": why == "done", "attempts": 1}


@pytest.fixture
def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def admin(db: Any) -> Admin:
    ensure_indexes_sync(db)
    return Admin(db)


@pytest.fixture
def jobs(db: Any, db_uri: str, now: datetime) -> dict[str, Any]:
    """Queued jobs in two groups, one delayed, archived jobs done and failed."""
    queued = [job(db_uri, i, now - timedelta(seconds=40 - i), group=("mail" if i % 3 else "billing"),
                  tenant=f"t{i % 2}") for i in range(7)]
    delayed = job(db_uri, 50, now, schedule_in=timedelta(hours=1), group="mail")
    done = [archived(job(db_uri, 100 + i, now - timedelta(minutes=2)), "done", now - timedelta(seconds=30 - i))
            for i in range(4)]
    failed = [archived(job(db_uri, 200 + i, now - timedelta(hours=2), group="mail"), "tried-too-many-times",
                       now - timedelta(minutes=90 + i)) for i in range(3)]
    db.scheduled.insert_many([*queued, delayed])
    db.archived.insert_many([*done, *failed])
    return {"queued": queued, "delayed": delayed, "done": done, "failed": failed}


def worker(db: Any, worker_id: str, now: datetime, *, groups: list[str], fresh: bool, **entry: Any) -> None:
    session = ObjectId()
    db.roster.insert_one({"_id": worker_id, "work_on": groups, "available": True, "session": session,
                          "created_at": now, "last_seen_at": now, "pid": 42, "hostname": "h", **entry})
    db.heartbeats.insert_one({"_id": worker_id, "session": session, "last_seen_at": now - timedelta(seconds=3),
                              "fresh_until": now + timedelta(seconds=30 if fresh else -30)})


def test_status_counts_equal_the_collections(db: Any, admin: Admin, jobs: dict[str, Any], now: datetime) -> None:
    worker(db, "w-1", now, groups=["mail"], fresh=True)
    worker(db, "w-2", now, groups=["mail", "billing"], fresh=False, available=False)
    db.metadata.insert_many([
        {"_id": "recruiter", "owner": "host:1", "epoch": 7, "expires_at": now + timedelta(seconds=30)},
        {"_id": "cleaner", "owner": "host:2", "epoch": 3, "expires_at": now - timedelta(seconds=30)},
    ])
    s = admin.status()
    assert dict(s.scheduled) == dict(Counter(d["status"] for d in db.scheduled.find()))
    assert dict(s.archived) == dict(Counter(d["why"] for d in db.archived.find()))
    assert (s.workers.total, s.workers.available, s.workers.missed_heartbeats) == (2, 1, 1)
    assert dict(s.workers.by_group) == {"billing": 1, "mail": 2}
    assert s.leases["recruiter"].held
    assert s.leases["recruiter"].epoch == 7
    assert not s.leases["cleaner"].held
    assert s.leases["cleaner"].owner == "host:2"
    assert {lease.name for lease in admin.leases()} == {"recruiter", "cleaner"}
    st = admin.stats()  # recruiter stats, through the same object
    assert sum(g.depth.ready + g.depth.delayed for g in st.groups) == db.scheduled.count_documents({})
    assert sum(g.windows[-1].archived for g in st.groups) == 4  # done in the last hour; failed 90 minutes ago
    assert s.paused.groups == ()
    assert s.paused.tenants == ()


def test_workers_are_judged_by_their_own_heartbeat(db: Any, admin: Admin, now: datetime) -> None:
    worker(db, "w-a", now, groups=["mail"], fresh=True)
    worker(db, "w-b", now, groups=["*"], fresh=False, stop_requested=True)
    views = {w.id: w for w in admin.workers()}
    assert set(views) == {"w-a", "w-b"}
    assert (views["w-a"].state, views["w-a"].live, views["w-a"].groups) == ("idle", True, ("mail",))
    assert (views["w-b"].state, views["w-b"].live) == ("stopping", False)
    assert views["w-a"].last_seen_s is not None
    assert views["w-a"].last_seen_s >= 2.0
    assert admin.stop_workers(["w-a"]) == ["w-a"]
    assert db.roster.find_one({"_id": "w-a"})["stop_requested"]


def test_jobs_page_through_every_state_newest_first(admin: Admin, jobs: dict[str, Any]) -> None:
    seen: list[object] = []
    after = None
    while True:
        page = admin.jobs(limit=4, after=after)
        seen += [v.id for v in page.views]
        if page.next is None:
            break
        after = page.next
    assert len(seen) == len(set(seen)) == 15
    done = admin.jobs(why="done")
    assert [v.id for v in done.views] == [d["_id"] for d in reversed(jobs["done"])]
    mail = admin.jobs(states=["queued"], group="mail")
    assert {v.id for v in mail.views} == {d["_id"] for d in jobs["queued"] if d["group"] == "mail"}


def test_show_one_job_and_an_unknown_one(admin: Admin, jobs: dict[str, Any]) -> None:
    view = admin.job(str(jobs["failed"][0]["_id"]))
    assert view is not None
    assert (view.state, view.why) == ("archived", "tried-too-many-times")
    assert admin.job(ObjectId()) is None
    with pytest.raises(ValueError, match="is not a job id"):
        admin.job("nope")


def test_retry_by_ids_is_all_or_nothing(db: Any, admin: Admin, jobs: dict[str, Any]) -> None:
    before = snapshot(db)
    bad = [jobs["failed"][0]["_id"], jobs["queued"][0]["_id"]]
    with pytest.raises(RetryRefusedAll, match=r"is not archived .* nothing was retried"):
        admin.retry(bad)
    with pytest.raises(RetryRefusedAll, match="no archived job"):
        admin.retry([jobs["failed"][0]["_id"], ObjectId()])
    assert snapshot(db) == before
    original = jobs["failed"][1]["_id"]
    retried = admin.retry([original, original])
    assert [j.retry_of for j in retried.jobs] == [original]
    assert db.scheduled.find_one({"_id": retried.jobs[0].id})["retry_of"] == original


def test_retry_archived_by_why_skips_the_malformed(db: Any, admin: Admin, jobs: dict[str, Any], now: datetime) -> None:
    db.archived.insert_one({"_id": ObjectId(), "why": "tried-too-many-times", "archived_at": now,
                            "quarantined": "malformed: no workable", "group": "mail"})
    retried = admin.retry_archived("tried-too-many-times", since=EARLIEST, group="mail")
    assert {j.retry_of for j in retried.jobs} == {d["_id"] for d in jobs["failed"]}
    assert len(retried.skipped) == 1


def test_cancel_each_job_says_what_happened(db: Any, admin: Admin, jobs: dict[str, Any]) -> None:
    waiting, done = jobs["queued"][0]["_id"], jobs["done"][0]["_id"]
    results = admin.cancel([waiting, done, ObjectId()], reason="test")
    assert [r.state for r in results] == ["cancelled", "already-archived", "not-found"]
    assert db.archived.find_one({"_id": waiting})["why"] == "cancelled"


def test_pause_switches_refuse_unused_names_and_write_nothing(db: Any, admin: Admin, jobs: dict[str, Any]) -> None:
    before = snapshot(db)
    with pytest.raises(UnusedNames, match="'typo'"):
        admin.pause("group", ["mail", "typo"])
    with pytest.raises(ValueError, match="tenant"):
        admin.pause("tenant", [""])
    assert snapshot(db) == before
    assert admin.pause("group", ["mail"]).paused.groups == ("mail",)
    forced = admin.pause("tenant", ["nobody"], force=True)
    assert (forced.paused.tenants, forced.unused) == (("nobody",), ("nobody",))
    assert admin.status().paused.groups == ("mail",)
    assert admin.resume("group", ["mail"]).paused.groups == ()
    assert admin.paused().tenants == ("nobody",)
    before = snapshot(db)
    idle = admin.resume("group", ["mail", "billing"])  # neither is paused: nothing written, and said
    assert idle.not_paused == ("billing", "mail")
    assert snapshot(db) == before


def test_schedules_through_the_python_api(db_uri: str, db: Any) -> None:
    with Recruiter.connect(db_uri) as rec:
        rec.schedule("nightly", job=Record(db_uri, n=1), cron="0 2 * * *")
        listing = rec.admin.schedules()
        assert [s.name for s in listing.schedules] == ["nightly"]
        assert not listing.stale
        assert rec.admin.pause_schedule("nightly") is Change.DONE
        assert rec.admin.pause_schedule("nightly") is Change.ALREADY
        detail = rec.admin.schedule("nightly")
        assert detail is not None
        assert detail.schedule.paused
        assert rec.admin.run_schedule_now("nightly") is Change.DONE
        assert rec.admin.schedule("nightly").schedule.run_now is not None  # type: ignore[union-attr]
        assert rec.admin.resume_schedule("missing") is Change.UNKNOWN
        assert rec.admin.schedule("missing") is None
        assert rec.admin.remove_schedule("nightly") is Change.DONE
        assert rec.admin.schedules().schedules == ()


# Roster entries an older version, another language or a mongosh edit may have left: each is
# malformed (recruiter.domain.documents.entry_problem), and the recruiter gives it no work. (An
# array _id is refused by MongoDB itself: test_an_entry_of_any_id_is_set_aside checks it without one.)
MALFORMED_ENTRIES: list[dict[str, Any]] = [
    {"_id": {"a": 1}, "work_on": ["mail"], "available": True},
    {"_id": "w-null-group", "work_on": ["mail", None], "available": True},
    {"_id": "w-doc-group", "work_on": [{"a": 1}], "available": True},
    {"_id": "w-list-group", "work_on": [["x"]], "available": True},
    {"_id": "w-text-assigned", "work_on": ["mail"], "assigned_to": "x", "available": False},
]


def test_malformed_roster_entries_are_counted_and_shown_as_such(db: Any, db_uri: str, admin: Admin,
                                                                jobs: dict[str, Any], now: datetime) -> None:
    """Every read of the roster checks its entries once: a malformed one is set aside with its reason
    (state ``malformed`` in ``workers()``, counted as malformed by ``status()`` and ``stats()``), and the
    well-formed ones show as before."""
    worker(db, "w-1", now, groups=["mail"], fresh=True)
    worker(db, "w-2", now, groups=["mail", "billing"], fresh=False, available=False)
    db.roster.insert_many(MALFORMED_ENTRIES)
    db.heartbeats.insert_one({"_id": {"a": 1}, "last_seen_at": now, "fresh_until": now + timedelta(seconds=30)})
    db.scheduled.update_one({"_id": jobs["queued"][0]["_id"]}, {"$set": {"locked": True, "locked_by": {"a": 1}}})
    with Recruiter.connect(db_uri) as rec:
        s = rec.admin.status()
        views = rec.admin.workers()
        st = rec.admin.stats()
    assert (s.workers.total, s.workers.available, s.workers.missed_heartbeats) == (2, 1, 1)
    assert dict(s.workers.by_group) == {"billing": 1, "mail": 2}
    assert s.workers.malformed == len(MALFORMED_ENTRIES)
    good = {w.id: w for w in views if w.state != "malformed"}
    assert (good["w-1"].state, good["w-1"].live, good["w-1"].groups) == ("idle", True, ("mail",))
    assert set(good) == {"w-1", "w-2"}
    bad = {w.id: w for w in views if w.state == "malformed"}
    assert set(bad) == {"{'a': 1}", "w-null-group", "w-doc-group", "w-list-group", "w-text-assigned"}
    assert bad["w-null-group"].problem == "work_on.1: expected a non-empty string, got null"
    assert bad["w-text-assigned"].problem is not None
    assert bad["w-text-assigned"].problem.startswith("assigned_to: ")
    assert all(not w.live and w.groups == () for w in bad.values())
    assert (st.workers.idle, st.workers.zombies, st.workers.malformed) == (1, 1, len(MALFORMED_ENTRIES))
    assert set(st.workers_by_group) == {"billing", "mail"}
    assert sum(g.depth.assigned for g in st.groups) == 1  # held by a malformed holder: assigned, not running


@pytest.mark.parametrize("entry", MALFORMED_ENTRIES, ids=lambda e: str(e["_id"]))
def test_each_kind_of_malformed_entry_alone_is_set_aside(db: Any, db_uri: str, now: datetime,
                                                         entry: dict[str, Any]) -> None:
    worker(db, "w-1", now, groups=["mail"], fresh=True)
    db.roster.insert_one(entry)
    with Recruiter.connect(db_uri) as rec:
        assert rec.admin.status().workers.malformed == 1
        assert [w.state for w in rec.admin.workers()] == ["idle", "malformed"]
        assert rec.admin.stats().workers.malformed == 1


def test_an_entry_of_any_id_is_set_aside() -> None:
    kept, malformed = checked_entries([{"_id": ["w"], "work_on": ["mail"]}, {"_id": "w", "work_on": ["mail"]},
                                       {"_id": "x" * 300, "available": True}])
    assert [e["_id"] for e in kept] == ["w"]
    assert [m.id for m in malformed] == ["['w']", "x" * 100]
    assert [m.problem for m in malformed] == ["_id: expected a non-empty string, got list", "work_on: missing"]


def test_explain_leaves_out_the_malformed_entries_taking_its_group(db: Any, admin: Admin, jobs: dict[str, Any],
                                                                  now: datetime) -> None:
    worker(db, "w-1", now, groups=["mail"], fresh=True)
    db.roster.insert_many(MALFORMED_ENTRIES)
    mail = next(j for j in jobs["queued"] if j["group"] == "mail")
    explanation = admin.explain(mail["_id"])
    assert explanation is not None
    assert explanation.job_id == mail["_id"]


def test_a_limit_stored_as_int64_is_read(db: Any, admin: Admin) -> None:
    """mongosh writes NumberLong (bson Int64, an int subclass) for a number typed by hand: a limit
    holding one is applied, as the same limit with plain integers."""
    db.metadata.insert_one({"_id": "limits", "groups": {
        "mail": {"max_running": Int64(3)}, "billing": {"rate": "5/s", "burst": Int64(2)},
        "flags": {"max_running": True}}})
    listing = admin.limits()
    by_group = {v.group: v.limit for v in listing.limits}
    assert set(by_group) == {"mail", "billing"}
    assert by_group["mail"].max_running == 3
    assert type(by_group["mail"].max_running) is int
    assert by_group["billing"].rate is not None
    assert by_group["billing"].rate.burst == 2
    assert listing.problems == ("groups.flags (group flags): max_running: expected an integer, got bool True",)


def test_status_counts_statuses_and_reasons_of_any_type(db: Any, db_uri: str, now: datetime) -> None:
    """``status()`` counts jobs by their stored ``status`` and ``why``, untrusted: a document or an
    array there is counted under its text instead of failing the whole snapshot."""
    db.scheduled.insert_many([{"status": {"odd": 1}}, {"status": ["a", "b"]}, {"status": "queued"}])
    db.archived.insert_many([{"why": {"odd": 1}}, {"why": "done"}, {"why": "done"}, {}])
    with Recruiter.connect(db_uri) as rec:
        s = rec.admin.status()
    assert s.scheduled == {"['a', 'b']": 1, "queued": 1, "{'odd': 1}": 1}
    assert s.archived == {None: 1, "done": 2, "{'odd': 1}": 1}
