"""``recruiter jobs list|show|retry`` against a real server, on jobs written as the processes write them.

The jobs are built with the producer's builder (``build_job_document``) and put
in the state under test directly (archived, locked, with a heartbeat), so each
state is exact and no process runs.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId
from click.testing import CliRunner, Result

from recruiter.cli.main import main
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.domain.listing import JobFilter, PageKey, parse_states
from recruiter.store import SyncCollections, ensure_indexes_sync, history
from recruiter.store.history import sources
from tests.workables import AlwaysFails, Record

COLLECTIONS = ("scheduled", "archived", "roster", "heartbeats", "metadata")
RECORD = "tests.workables:Record"


def cli(*args: str, db_uri: str) -> Result:
    return CliRunner().invoke(main, [*args, "--target", db_uri], catch_exceptions=False)


def snapshot(db: Any) -> dict[str, list[Any]]:
    return {name: sorted(db[name].find(), key=lambda d: str(d["_id"])) for name in COLLECTIONS}


def one_line_error(result: Result, code: int, *fragments: str) -> None:
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], result.stderr


def job(db_uri: str, n: int, now: datetime, **options: Any) -> dict[str, Any]:
    workable = options.pop("workable", None) or Record(db_uri, n=n)
    return dict(build_job_document(workable, JobOptions(**options), now))


def archive(doc: dict[str, Any], why: str, at: datetime, **extra: Any) -> dict[str, Any]:
    copy = {k: v for k, v in doc.items() if k != "status"}
    copy.update({"why": why, "archived_at": at, "done": why == "done", "attempts": extra.pop("attempts", 1)})
    copy.update(extra)
    return copy


@pytest.fixture
def populated(db: Any, db_uri: str) -> dict[str, Any]:
    """Waiting jobs in every state, and archived jobs with several whys, groups and times."""
    ensure_indexes_sync(db)
    now = datetime.now(UTC).replace(microsecond=0)
    ids: dict[str, Any] = {}
    queued = [job(db_uri, i, now - timedelta(seconds=30 - i)) for i in range(3)]
    delayed = job(db_uri, 10, now - timedelta(seconds=20), schedule_in=timedelta(hours=1), group="later")
    retrying = {**job(db_uri, 11, now - timedelta(seconds=19), tenant="acme"), "status": "retrying", "attempts": 1}
    assigned = {**job(db_uri, 12, now - timedelta(seconds=18)), "status": "assigned", "locked": True,
                "locked_by": "w-a", "lock_token": ObjectId(), "locked_at": now}
    token = ObjectId()
    running = {**job(db_uri, 13, now - timedelta(seconds=17), tags=("nightly",)), "status": "assigned",
               "locked": True, "locked_by": "w-r", "lock_token": token, "locked_at": now}
    db.scheduled.insert_many([*queued, delayed, retrying, assigned, running])
    db.heartbeats.insert_one({"_id": "w-r", "working": True, "working_on": running["_id"], "working_token": token,
                              "last_seen_at": now, "progress": {"value": 0.4, "message": "4 of 10", "at": now}})
    done = [archive(job(db_uri, 20 + i, now - timedelta(minutes=5)), "done", now - timedelta(seconds=60 - i),
                    result=20 + i) for i in range(5)]
    failed = [archive(job(db_uri, 30 + i, now - timedelta(hours=2), workable=AlwaysFails(db_uri), group="mail",
                          tenant="acme"), "tried-too-many-times", now - timedelta(minutes=90 + i), attempts=3)
              for i in range(3)]
    db.archived.insert_many([*done, *failed])
    ids.update(queued=[d["_id"] for d in queued], delayed=delayed["_id"], retrying=retrying["_id"],
               assigned=assigned["_id"], running=running["_id"], done=[d["_id"] for d in done],
               failed=[d["_id"] for d in failed], now=now)
    return ids


def listed(db_uri: str, *args: str) -> list[dict[str, Any]]:
    result = cli("jobs", "list", "--json", *args, db_uri=db_uri)
    assert result.exit_code == 0, result.stderr
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows


def test_every_state_newest_first(populated: dict[str, Any], db_uri: str) -> None:
    rows = listed(db_uri, "--limit", "100")
    assert len(rows) == 15
    by_id = {r["id"]: r for r in rows}
    assert by_id[str(populated["delayed"])]["state"] == "delayed"
    assert by_id[str(populated["retrying"])]["state"] == "retrying"
    assert by_id[str(populated["assigned"])]["state"] == "assigned"
    running = by_id[str(populated["running"])]
    assert running["state"] == "running"
    assert running["worker"] == "w-r"
    assert running["progress"]["value"] == 0.4
    assert running["progress"]["message"] == "4 of 10"
    assert {by_id[str(i)]["state"] for i in populated["queued"]} == {"queued"}
    assert by_id[str(populated["failed"][0])]["why"] == "tried-too-many-times"
    times = [r["archived_at"] or r["created_at"] for r in rows]
    assert times == sorted(times, reverse=True)
    assert datetime.fromisoformat(times[0])  # dates are ISO 8601


@pytest.mark.parametrize(("args", "expected"), [
    (["--state", "queued"], "queued"),
    (["--state", "running,assigned"], ["running", "assigned"]),
    (["--state", "running"], ["running"]),
    (["--why", "done"], "done"),
    (["--group", "mail"], "failed"),
    (["--tenant", "acme"], ["retrying", "failed"]),
    (["--tag", "nightly"], ["running"]),
    (["--class", "tests.workables:AlwaysFails"], "failed"),
    (["--state", "archived", "--since", "10m"], "done"),
    (["--why", "tried-too-many-times", "--group", "mail", "--tenant", "acme"], "failed"),
])
def test_filters(populated: dict[str, Any], db_uri: str, args: list[str], expected: str | list[str]) -> None:
    names = [expected] if isinstance(expected, str) else expected
    wanted: set[str] = set()
    for name in names:
        value = populated[name]
        wanted |= {str(v) for v in value} if isinstance(value, list) else {str(value)}
    assert {r["id"] for r in listed(db_uri, *args)} == wanted


def test_a_time_range(populated: dict[str, Any], db_uri: str) -> None:
    now = populated["now"]
    rows = listed(db_uri, "--state", "archived", "--from", (now - timedelta(hours=3)).isoformat(),
                  "--until", (now - timedelta(minutes=30)).isoformat())
    assert {r["id"] for r in rows} == {str(i) for i in populated["failed"]}


def test_pages_follow_each_other_without_gaps_or_repeats(populated: dict[str, Any], db: Any, db_uri: str) -> None:
    # Jobs at the very same time: the page key's _id breaks the tie.
    now = populated["now"]
    same = [archive(job(db_uri, 50 + i, now), "cancelled", now - timedelta(seconds=45)) for i in range(5)]
    db.archived.insert_many(same)
    everything = [r["id"] for r in listed(db_uri, "--limit", "100")]
    seen: list[str] = []
    args = ["jobs", "list", "--limit", "3"]
    for _ in range(20):
        result = cli(*args, db_uri=db_uri)
        assert result.exit_code == 0, result.stderr
        lines = result.stdout.splitlines()
        seen += [line.split()[0] for line in lines[1:] if not line.startswith("next page:")]
        follow = [line for line in lines if line.startswith("next page: ")]
        if not follow:
            break
        args = follow[0].removeprefix("next page: recruiter ").split()
    assert seen == everything
    assert len(seen) == 20


@pytest.mark.parametrize("batch", [1, 2, 3])
def test_small_batches_cut_inside_a_time_give_the_same_listing(populated: dict[str, Any], db: Any, db_uri: str,
                                                              batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    now = populated["now"]
    same = [archive(job(db_uri, 50 + i, now), "cancelled", now - timedelta(seconds=45)) for i in range(5)]
    db.archived.insert_many([same[i] for i in (2, 0, 4, 1, 3)])  # stored out of _id order
    expected = [r["id"] for r in listed(db_uri, "--limit", "100")]
    monkeypatch.setattr(history, "BATCH", batch)
    assert [r["id"] for r in listed(db_uri, "--limit", "100")] == expected
    pages: list[str] = []
    args = ["--limit", "4"]
    while True:
        result = cli("jobs", "list", "--json", *args, db_uri=db_uri)
        pages += [r["id"] for r in json.loads(result.stdout)]
        if "next page:" not in result.stderr:
            break
        args = ["--limit", "4", "--after", result.stderr.split("--after ")[1].split()[0]]
    assert pages == expected


def test_unknown_state_and_bad_options_are_one_line_and_change_nothing(populated: dict[str, Any], db: Any,
                                                                       db_uri: str) -> None:
    before = snapshot(db)
    one_line_error(cli("jobs", "list", "--state", "queued,finished", db_uri=db_uri), 2,
                   "unknown state 'finished'", "queued, delayed, retrying, assigned, running, archived")
    one_line_error(cli("jobs", "list", "--after", "garbage!", db_uri=db_uri), 2, "not a page token")
    one_line_error(cli("jobs", "list", "--why", "done", "--state", "queued", db_uri=db_uri), 2, "--why")
    one_line_error(cli("jobs", "list", "--class", "Record", db_uri=db_uri), 2, "module:Qualname")
    one_line_error(cli("jobs", "list", "--since", "1h", "--until", "2001-01-01", db_uri=db_uri), 2, "empty")
    one_line_error(cli("jobs", "list", "--since", "1h", "--from", "2001-01-01", db_uri=db_uri), 2, "not both")
    one_line_error(cli("jobs", "list", "--until", "yesterday", db_uri=db_uri), 2, "not a date")
    assert snapshot(db) == before


def test_show_prints_every_execution_with_trace_and_logs(db: Any, db_uri: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    base = job(db_uri, 1, now - timedelta(minutes=1))
    runs = [{"attempt": i, "outcome": "failed" if i < 3 else "done", "worker": "w-1", "pid": 7, "hostname": "h",
             "started_at": now - timedelta(seconds=30 - i), "ended_at": now - timedelta(seconds=29 - i),
             "crashed": False, "logs": f"log line of attempt {i}\n", "logs_cut": 1234 if i == 2 else 0,
             **({"class": "ValueError", "message": f"boom {i}"} if i < 3 else {})} for i in (1, 2, 3)]
    last = {**runs[-1], "trace": None}
    runs[1]["trace"] = None
    failed = {**runs[1], "attempt": 2}
    doc = archive(base, "done", now, attempts=3, executions=runs, last_execution=last, result={"n": 1})
    db.archived.insert_one(doc)
    out = cli("jobs", "show", str(doc["_id"]), db_uri=db_uri)
    assert out.exit_code == 0, out.stderr
    text = out.stdout
    assert "archived: done" in text
    assert '"n": 1' in text
    assert text.index("attempt 1: failed") < text.index("attempt 2: failed") < text.index("attempt 3: done")
    assert "ValueError: boom 1" in text
    assert text.index("[… 1234 bytes cut …]") < text.index("log line of attempt 2")
    assert text.count("bytes cut") == 1
    db.archived.update_one({"_id": doc["_id"]}, {"$set": {"crashes": 1, "cancel_reason": "operator"}})
    again = cli("jobs", "show", str(doc["_id"]), db_uri=db_uri).stdout
    assert "attempts   3 (1 crashed)" in again
    assert "cancelled  operator" in again
    assert "no longer kept" not in again
    db.archived.update_one({"_id": doc["_id"]}, {"$set": {"executions.0.details_dropped": True},
                                                 "$unset": {"executions.0.logs": ""}})
    dropped = cli("jobs", "show", str(doc["_id"]), db_uri=db_uri).stdout
    assert dropped.index("(trace and logs no longer kept") < dropped.index("attempt 2: failed")
    assert "log line of attempt 1" not in dropped
    db.archived.update_one({"_id": doc["_id"]}, {"$set": {"executions.0.logs": runs[0]["logs"]},
                                                 "$unset": {"executions.0.details_dropped": ""}})
    shown = json.loads(cli("jobs", "show", "--json", str(doc["_id"]), db_uri=db_uri).stdout)
    assert [e["logs"] for e in shown["executions"]] == [r["logs"] for r in runs]
    assert shown["executions"][1]["logs_cut"] == failed["logs_cut"]
    assert shown["result"] == {"n": 1}


def test_show_a_running_job_with_its_progress_and_last_trace(populated: dict[str, Any], db: Any,
                                                            db_uri: str) -> None:
    out = cli("jobs", "show", str(populated["running"]), db_uri=db_uri)
    assert out.exit_code == 0, out.stderr
    assert "state      running" in out.stdout
    assert "progress   40% 4 of 10" in out.stdout
    trace = "Traceback (most recent call last):\n  File x\nValueError: boom"
    failed = populated["failed"][0]
    db.archived.update_one({"_id": failed}, {"$set": {
        "executions": [{"attempt": 3, "outcome": "failed", "class": "ValueError", "message": "boom"}],
        "last_execution": {"attempt": 3, "outcome": "failed", "class": "ValueError", "message": "boom",
                           "trace": trace}}})
    out = cli("jobs", "show", str(failed), db_uri=db_uri)
    assert "      ValueError: boom" in out.stdout  # the trace, indented under its execution


def test_show_unknown_and_malformed_ids(populated: dict[str, Any], db_uri: str) -> None:
    one_line_error(cli("jobs", "show", str(ObjectId()), db_uri=db_uri), 1, "no job")
    one_line_error(cli("jobs", "show", "12345", db_uri=db_uri), 2, "not a job id")


def test_retry_by_id_copies_the_job_and_leaves_the_original(populated: dict[str, Any], db: Any,
                                                            db_uri: str) -> None:
    original_id = populated["failed"][0]
    original = db.archived.find_one({"_id": original_id})
    out = cli("jobs", "retry", "--json", str(original_id), str(original_id), db_uri=db_uri)
    assert out.exit_code == 0, out.stderr
    retried = json.loads(out.stdout)["retried"]
    assert [r["retry_of"] for r in retried] == [str(original_id)]
    copy = db.scheduled.find_one({"_id": ObjectId(retried[0]["id"])})
    assert copy["retry_of"] == original_id
    assert (copy["status"], copy["attempts"], copy["crashes"], copy["locked"], copy["executions"]) == (
        "queued", 0, 0, False, [])
    for field in ("workable", "group", "tenant", "tags", "priority", "retry_policy"):
        assert copy[field] == original[field], field
    for field in ("why", "result", "last_execution", "archived_at"):
        assert field not in copy
    # The original is left as it was, but for the name of its copy (written once, with the copy).
    after = db.archived.find_one({"_id": original_id})
    assert after.pop("retried_as") == copy["_id"]
    assert isinstance(after.pop("retried_at"), datetime)
    assert after == original


def test_retry_refuses_every_bad_id_and_writes_nothing(populated: dict[str, Any], db: Any, db_uri: str) -> None:
    quarantined = {"_id": ObjectId(), "why": "malformed", "reason": "group: missing", "archived_at": populated["now"],
                   "workable": 3}
    db.archived.insert_one(quarantined)
    good = str(populated["done"][0])
    before = snapshot(db)
    one_line_error(cli("jobs", "retry", good, "nope", db_uri=db_uri), 2, "'nope' is not a job id")
    unknown = ObjectId()
    one_line_error(cli("jobs", "retry", good, str(unknown), db_uri=db_uri), 1, f"no archived job {unknown}")
    one_line_error(cli("jobs", "retry", good, str(populated["queued"][0]), db_uri=db_uri), 1,
                   "is not archived (it is queued)", "nothing was retried")
    one_line_error(cli("jobs", "retry", good, str(quarantined["_id"]), db_uri=db_uri), 1,
                   "archived malformed (group: missing)", "cannot be retried")
    one_line_error(cli("jobs", "retry", good, "--why", "done", db_uri=db_uri), 2, "not both")
    assert snapshot(db) == before


def test_retry_by_why_since_takes_only_the_recent_ones_and_skips_quarantined(populated: dict[str, Any], db: Any,
                                                                             db_uri: str) -> None:
    now = populated["now"]
    recent = [archive(job(db_uri, 70 + i, now), "tried-too-many-times", now - timedelta(minutes=1), attempts=3)
              for i in range(2)]
    db.archived.insert_many([*recent, {"_id": ObjectId(), "why": "tried-too-many-times", "archived_at": now,
                                       "group": 5}])
    before = {d["_id"]: d for d in db.archived.find()}
    out = cli("jobs", "retry", "--why", "tried-too-many-times", "--since", "10m", db_uri=db_uri)
    assert out.exit_code == 0, out.stderr
    assert "retried 2 job(s)" in out.stdout
    assert "skipped" in out.stderr
    copies = list(db.scheduled.find({"retry_of": {"$exists": True}}))
    assert sorted(c["retry_of"] for c in copies) == sorted(d["_id"] for d in recent)
    # The originals name their copies; nothing else of the archive changed.
    after = {d["_id"]: d for d in db.archived.find()}
    assert {i: after[i].pop("retried_as") for i in after if "retried_as" in after[i]} == {
        c["retry_of"]: c["_id"] for c in copies}
    assert {i: {k: v for k, v in d.items() if k != "retried_at"} for i, d in after.items()} == before
    again = cli("jobs", "retry", "--why", "tried-too-many-times", "--since", "10m", db_uri=db_uri)
    assert "retried 0 job(s)" in again.stdout
    assert db.scheduled.count_documents({"retry_of": {"$exists": True}}) == 2


@pytest.mark.parametrize(("states", "args"), [
    ("", {}), ("archived", {}), ("archived", {"why": "done"}), ("archived", {"group": "g"}),
    ("archived", {"tenant": "t"}), ("archived", {"class_name": "m:C"}), ("archived", {"tag": "x"}),
    ("queued", {}), ("queued,retrying", {"group": "g"}), ("running", {"group": "g", "tenant": "t"}),
    ("retrying", {"class_name": "m:C", "tag": "x"}),
])
def test_listing_reads_are_served_by_an_index(db: Any, states: str, args: dict[str, str]) -> None:
    ensure_indexes_sync(db)
    f = JobFilter.build(parse_states([states]), **args)  # type: ignore[arg-type]
    now = datetime.now(UTC)
    for source in sources(SyncCollections.of(db), f):
        reads = [(source.older(f, None), source.time_field), (source.older(f, now), source.time_field),
                 (source.ties(PageKey(now, ObjectId())), "_id"), (source.ties(PageKey(now, None)), "_id")]
        for query, by in reads:
            plan = json.dumps(source.coll.find(query, hint=source.hint).sort(by, -1).limit(5).explain()[
                "queryPlanner"], default=str)
            assert "IXSCAN" in plan, (query, plan)
            assert "COLLSCAN" not in plan, (query, plan)
            assert source.hint in plan


def test_every_list_command_prints_json_and_workers_show_progress(populated: dict[str, Any], db: Any,
                                                                   db_uri: str) -> None:
    session = ObjectId()
    db.roster.insert_one({"_id": "w-r", "work_on": ["generic"], "available": False, "session": session,
                          "pid": 1, "hostname": "h"})
    db.heartbeats.update_one({"_id": "w-r"}, {"$set": {"session": session, "fresh_until": populated["now"]}})
    workers = cli("workers", "list", "--json", db_uri=db_uri)
    assert workers.exit_code == 0, workers.stderr
    (row,) = json.loads(workers.stdout)
    assert row["job"] == str(populated["running"])
    assert row["progress"]["value"] == 0.4
    assert row["progress"]["message"] == "4 of 10"
    assert "40% 4 of 10" in cli("workers", "list", db_uri=db_uri).stdout
    db.metadata.insert_one({"_id": "paused", "groups": ["mail"], "tenants": []})
    assert json.loads(cli("groups", "list", "--json", db_uri=db_uri).stdout) == ["mail"]
    assert json.loads(cli("tenants", "list", "--json", db_uri=db_uri).stdout) == []
    status = json.loads(cli("status", "--json", db_uri=db_uri).stdout)
    assert status["archived"] == {"done": 5, "tried-too-many-times": 3}


def test_a_database_no_process_has_opened_lists_nothing(db_uri: str) -> None:
    out = cli("jobs", "list", db_uri=db_uri)
    assert out.exit_code == 0, out.stderr
    assert out.stdout.strip() == "no jobs match"


@pytest.mark.parametrize("group", [None, "mail"])
def test_retry_by_why_is_served_by_an_index(db: Any, group: str | None) -> None:
    ensure_indexes_sync(db)
    query = history.retry_selection("tried-too-many-times", datetime.now(UTC) - timedelta(hours=1), group)
    plan = json.dumps(db.archived.find(query, hint=history.RETRY_INDEX).explain()["queryPlanner"], default=str)
    assert "IXSCAN" in plan
    assert "COLLSCAN" not in plan
    assert "by_why" in plan
