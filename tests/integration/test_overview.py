"""The bounded overview (recruiter.admin.overview) made from the read model's stats of a real database, and
``recruiter stats`` / ``status`` / ``workers list`` with their filters, views and the @worker: groups apart."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId
from click.testing import CliRunner

from recruiter.admin import Admin, OverviewQuery, filtered, overview_of
from recruiter.admin.overview import ATTENTION_SHOWN
from recruiter.cli.main import main
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.store import ensure_indexes_sync
from tests.workables import Record

GROUPS = 30  # g00..g29, 3 tenants each


@pytest.fixture
def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def seeded(db: Any, db_uri: str, now: datetime) -> Admin:
    """30 groups of 3 tenants (g07 waits longest), g03 failing, g05 paused, g09 held by its max_running, a job
    aimed at a worker, and that worker in the roster."""
    ensure_indexes_sync(db)
    template = dict(build_job_document(Record(db_uri, n=0), JobOptions(), now))
    waiting = [{**template, "_id": ObjectId(), "group": f"g{g:02d}", "tenant": f"t{t}",
                "scheduled_at": now - timedelta(seconds=600 if g == 7 else g)} for g in range(GROUPS) for t in range(3)]
    waiting.append({**template, "_id": ObjectId(), "group": "g09", "tenant": "t0", "scheduled_at": now,
                    "status": "assigned", "locked": True, "locked_by": "w-1", "lock_token": ObjectId(),
                    "locked_at": now})
    waiting.append({**template, "_id": ObjectId(), "group": "@worker:w-1", "scheduled_at": now - timedelta(hours=2)})
    db.scheduled.insert_many(waiting)
    db.archived.insert_many([{"_id": ObjectId(), "group": "g03", "tenant": "t1", "why": "tried-too-many-times",
                              "archived_at": now - timedelta(seconds=20 + i)} for i in range(4)])
    db.metadata.insert_one({"_id": "paused", "groups": ["g05"], "tenants": []})
    session = ObjectId()
    db.roster.insert_one({"_id": "w-1", "work_on": ["g01", "@worker:w-1"], "available": True, "session": session,
                          "created_at": now, "last_seen_at": now, "pid": 42, "hostname": "h"})
    db.heartbeats.insert_one({"_id": "w-1", "session": session, "last_seen_at": now,
                              "fresh_until": now + timedelta(seconds=30)})
    admin = Admin(db)
    admin.set_limit("g09", max_running=1)
    return admin


def test_the_overview_pages_filters_and_puts_what_needs_attention_first(seeded: Admin) -> None:
    figures = seeded.stats()
    ov = overview_of(figures, OverviewQuery(size=7))
    assert (ov.groups, ov.tenants, ov.matching, ov.pages) == (GROUPS, GROUPS * 3, GROUPS, 5)
    assert [r.group for r in ov.rows] == [f"g{g:02d}" for g in range(7)]
    assert all(r.tenants == 3 for r in ov.rows)
    assert ov.expanded is None
    assert ov.depth.ready == GROUPS * 3  # the @worker: group is apart
    assert (ov.worker_groups.count, ov.worker_groups.depth.ready) == (1, 1)
    last = overview_of(figures, OverviewQuery(size=7, page=5))
    assert [r.group for r in last.rows] == ["g28", "g29"]
    assert overview_of(figures, OverviewQuery(size=7, page=99)).page == 5  # past the end: the last page
    named = overview_of(figures, OverviewQuery(name="G1"))
    assert [r.group for r in named.rows] == [f"g{g}" for g in range(10, 20)]
    attention = {a.reason: a for a in ov.attention}
    assert attention["oldest ready"].rows[0].group == "g07"
    assert len(attention["oldest ready"].rows) == ATTENTION_SHOWN
    assert attention["oldest ready"].count == GROUPS - 1  # g05 is paused: its ready jobs are not waiting for a worker
    assert [(r.group, r.windows[1].failed) for r in attention["failing"].rows] == [("g03", 4)]
    assert [r.group for r in attention["paused"].rows] == ["g05"]
    assert [r.group for r in attention["held by a limit"].rows] == ["g09"]
    with_workers = overview_of(figures, OverviewQuery(worker_groups=True, size=200))
    assert with_workers.rows[0].group == "@worker:w-1"
    assert with_workers.groups == GROUPS  # still counted apart in the totals
    tenants = overview_of(figures, OverviewQuery(tenants_of="g09")).expanded
    assert tenants is not None
    assert [(t.tenant, t.depth.ready, t.depth.assigned) for t in tenants.rows] == [
        ("t0", 1, 1), ("t1", 1, 0), ("t2", 1, 0)]
    assert overview_of(figures, OverviewQuery(tenants_of="nope")).expanded is None
    with pytest.raises(ValueError, match="page size"):
        OverviewQuery(size=0)


def test_filtered_keeps_the_groups_and_tenants_asked(seeded: Admin) -> None:
    figures = seeded.stats()
    assert [g.group for g in filtered(figures, groups=["g03", "nope"]).groups] == ["g03"]
    one = filtered(figures, tenants=["t1"])
    assert len(one.groups) == GROUPS
    assert all(len(g.tenants) == 1 and g.depth.ready == 1 for g in one.groups)
    assert one.groups[3].windows[1].failed == 4
    assert "@worker:w-1" not in {g.group for g in filtered(figures).groups}
    assert "@worker:w-1" in {g.group for g in filtered(figures, worker_groups=True).groups}
    assert [g.group for g in filtered(figures, groups=["@worker:w-1"]).groups] == ["@worker:w-1"]
    assert set(filtered(figures).workers_by_group) == {"g01"}


def cli(db_uri: str, *args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--target", db_uri], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_stats_filters_by_group_and_tenant(seeded: Admin, db_uri: str) -> None:
    doc = json.loads(cli(db_uri, "stats", "--json", "--group", "g03", "--group", "g07"))
    assert [g["group"] for g in doc["groups"]] == ["g03", "g07"]
    doc = json.loads(cli(db_uri, "stats", "--json"))
    assert "@worker:w-1" not in {g["group"] for g in doc["groups"]}
    assert (doc["worker_groups"]["count"], doc["worker_groups"]["ready"]) == (1, 1)
    doc = json.loads(cli(db_uri, "stats", "--json", "--include-worker-groups"))
    assert "@worker:w-1" in {g["group"] for g in doc["groups"]}
    assert "worker_groups" not in doc
    doc = json.loads(cli(db_uri, "stats", "--json", "--group", "g03", "--tenant", "t1"))
    assert [(g["group"], [t["tenant"] for t in g["tenants"]], g["windows"][1]["failed"]) for g in doc["groups"]] == [
        ("g03", ["t1"], 4)]
    text = cli(db_uri, "stats", "--group", "g07")
    assert "g07" in text
    assert "g06" not in text
    assert "every group" not in text
    full = cli(db_uri, "stats", "--view", "full")
    assert "@worker:w-1" not in full
    assert "jobs aimed at workers (1 @worker: group): 1 ready, 0 assigned, 0 running, oldest ready 2.0h" in full
    assert "@worker:w-1" in cli(db_uri, "stats", "--view", "full", "--include-worker-groups")


def test_stats_past_a_screen_prints_the_summary(seeded: Admin, db_uri: str) -> None:
    text = cli(db_uri, "stats")
    assert "summary: the full view is" in text
    assert len(text.splitlines()) < 30
    assert "oldest ready (29): g07 10.0m" in text
    assert "failing (1): g03 4 failed in 5m" in text
    assert "jobs aimed at workers (1 @worker: groups)" in text
    full = cli(db_uri, "stats", "--view", "full")
    assert len(full.splitlines()) > 60
    assert "summary" not in full
    doc = json.loads(cli(db_uri, "stats", "--json", "--view", "summary"))
    assert (doc["view"], doc["groups"], doc["worker_groups"]["count"]) == ("summary", GROUPS, 1)
    assert {a["reason"]: a["count"] for a in doc["attention"]} == {
        "oldest ready": 29, "failing": 1, "paused": 1, "held by a limit": 1}
    assert "groups" in json.loads(cli(db_uri, "stats", "--json"))  # --json: the full figures unless asked


def test_status_and_workers_list_leave_the_worker_groups_out_unless_asked(seeded: Admin, db_uri: str) -> None:
    assert "g01=1, 1 @worker: group" in cli(db_uri, "status")
    assert "@worker:w-1" in cli(db_uri, "status", "--include-worker-groups")
    assert json.loads(cli(db_uri, "status", "--json"))["workers"]["by_group"] == {"g01": 1}
    listing = cli(db_uri, "workers", "list")
    assert "g01" in listing
    assert "@worker:" not in listing
    assert "g01,@worker:w-1" in cli(db_uri, "workers", "list", "--include-worker-groups")
    assert json.loads(cli(db_uri, "workers", "list", "--json"))[0]["groups"] == ["g01"]
