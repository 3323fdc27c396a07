"""Reading ``schedules`` documents for the CLI: any document gives a view, a malformed one says why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId

from recruiter.cli.schedules_view import render_show, render_table, row_json, show_json
from recruiter.domain.following import JobView
from recruiter.domain.schedule_view import last_jobs, outcome_of, read_schedule, stale_names

NOW = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)
# A job as rec.schedule stores it (the reader checks the job each occurrence would be).
JOB = {"done": False, "locked": False, "attempts": 0, "crashes": 0, "status": "queued", "group": "g", "tags": [],
       "tenant": None, "priority": "low", "executions": [],
       "workable": {"class": "tests.workables:Record", "parameters": {"ledger_uri": "x", "n": 1}, "method": "execute"},
       "retry_policy": {"class": "recruiter.retry:DoNotDoItAgain", "parameters": {}}}


def doc(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"_id": "s", "cron": None, "every_s": 60, "tz": "UTC", "job": JOB,
                            "declared_at": NOW}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not ...}


@pytest.mark.parametrize(("fields", "reason"), [
    ({"_id": ObjectId("6b03b9053cd7b1f1813ccbb6")}, "_id: expected a non-empty string, got ObjectId"),
    ({"cron": None, "every_s": None}, "cron, every_s: expected exactly one of them"),
    ({"every_s": 0}, "every_s: expected a positive number of seconds or null, got 0"),
    ({"every_s": float("nan")}, "every_s: expected a positive number of seconds or null, got NaN"),
    ({"tz": ...}, "tz: missing"),
    ({"job": "Report"}, "job: expected an embedded document, got str"),
    ({"declared_at": "yesterday"}, "declared_at: expected a date, got str"),
    ({"last_fire": {"slot": NOW, "at": NOW}}, "last_fire.job: missing"),
    ({"last_skip": {"slot": NOW, "reason": 3}}, "last_skip.reason: expected a string, got int"),
    ({"skipped": -1}, "skipped: expected a whole number from 0 to 2147483647, got -1"),
    ({"catch_up": {"mode": "some"}}, "catch_up.mode: expected one of none, all, within, got 'some'"),
    ({"jitter_s": float("inf")}, "jitter_s: expected a number of seconds from 0, got infinity"),
    ({"overlap": None}, "overlap: expected one of skip, allow, got null"),
    ({"job": {"group": "g"}}, "job: status: missing"),
])
def test_malformed_documents_say_why(fields: dict[str, Any], reason: str) -> None:
    view = read_schedule(doc(**fields))
    assert view.problem == reason
    # Rendering a malformed view never raises, and shows the reason.
    assert reason in render_table([view], {}, set())
    assert row_json(view, {}, False)["malformed"] == reason
    assert reason in render_show(view, {}, False)
    assert show_json(view, {}, False)["malformed"] == reason


def test_well_formed_and_its_rule() -> None:
    assert read_schedule(doc()).rule() == "every 1m UTC"
    # Beyond a century: set aside with its reason, as the leader sets it aside (issue 22).
    assert "too large" in str(read_schedule(doc(every_s=1e300)).problem)
    assert read_schedule(doc(cron="*/5 * * * *", every_s=None, tz="Asia/Tokyo")).rule() == "cron */5 * * * * Asia/Tokyo"


def test_stale_is_against_the_newest_declaration_and_ignores_malformed() -> None:
    views = [read_schedule(doc(_id="new")), read_schedule(doc(_id="old", declared_at=NOW - timedelta(hours=2))),
             read_schedule(doc(_id="edge", declared_at=NOW - timedelta(hours=1))),
             read_schedule(doc(_id="bad", declared_at=NOW + timedelta(days=9), tz=5))]
    assert stale_names(views, timedelta(hours=1)) == {"old"}
    assert stale_names(views, timedelta(minutes=59)) == {"old", "edge"}
    assert stale_names([], timedelta(hours=1)) == set()


def test_last_outcome() -> None:
    done, gone, waiting = ObjectId(), ObjectId(), ObjectId()
    views = [read_schedule(doc(_id=n, last_fire={"slot": NOW, "job": j, "at": NOW}))
             for n, j in (("a", done), ("b", gone), ("c", waiting), ("d", done))]
    assert last_jobs(views) == [done, gone, waiting]
    jobs = {done: JobView(id=done, state="archived", why="done"), waiting: JobView(id=waiting, state="retrying")}
    assert [outcome_of(v, jobs) for v in views] == ["done", "gone", "retrying", "done"]
    assert outcome_of(read_schedule(doc()), jobs) == "-"
