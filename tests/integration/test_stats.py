"""``recruiter stats`` (recruiter.admin.stats) on a modest database: 2 000 waiting jobs, 5 000 archived,
10 tenants in 3 groups, locked jobs, paused names and workers in every state. Every figure equals a
count the test makes itself over all the documents; the read's cost is bounded and printed."""

from __future__ import annotations

import json
import math
import random
import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId
from click.testing import CliRunner

from recruiter.admin.stats import WINDOWS_S, Stats, stats
from recruiter.cli.main import main
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.store import ensure_indexes_sync
from tests.workables import Record

GROUPS = ("billing", "mail", "reports")
TENANTS = tuple(f"t{i}" for i in range(10))


def nearest_rank(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


@pytest.fixture(scope="module")
def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def populate(db: Any, db_uri: str, now: datetime) -> None:
    rnd = random.Random(7)
    ensure_indexes_sync(db)
    template = dict(build_job_document(Record(db_uri, n=0), JobOptions(), now))
    waiting = []
    for i in range(2000):
        due = now + timedelta(seconds=rnd.choice([-3600, -600, -30, -1, 0, 60, 3600]) + rnd.random())
        doc = {**template, "_id": ObjectId(), "group": rnd.choice(GROUPS), "tenant": rnd.choice(TENANTS),
               "scheduled_at": due.replace(microsecond=due.microsecond // 1000 * 1000),
               "status": "retrying" if i % 7 == 0 else "queued"}
        if i % 50 == 0:  # locked: assigned, or running when its worker's heartbeat says so
            doc.update(locked=True, status="assigned", locked_by=f"w{i % 3}", lock_token=ObjectId(), locked_at=now)
        waiting.append(doc)
    if rnd.random() < 2:  # a job without a tenant
        waiting.append({**template, "_id": ObjectId(), "group": "mail", "scheduled_at": now - timedelta(seconds=5)})
    db.scheduled.insert_many(waiting)
    running = [d for d in waiting if d.get("locked") and d["locked_by"] == "w0"][:1]
    for w in ("w0", "w1", "w2", "w3"):
        session = ObjectId()
        working = w == "w0" and bool(running)
        db.roster.insert_one({"_id": w, "work_on": [GROUPS[int(w[1]) % 3]], "available": w == "w3",
                              "session": session, "created_at": now, "last_seen_at": now})
        db.heartbeats.insert_one({
            "_id": w, "session": session, "last_seen_at": now,
            # From the clock of this insert, not the module's ``now``: a slow machine may take more than
            # 30 s between the two, and every beat would then read as a zombie's.
            "fresh_until": datetime.now(UTC) + timedelta(seconds=-300 if w == "w2" else 300), "working": working,
            **({"working_on": running[0]["_id"], "working_token": running[0]["lock_token"]} if working else {})})
    archived = []
    for i in range(5000):
        at = now - timedelta(seconds=rnd.uniform(0, 7200))
        at = at.replace(microsecond=at.microsecond // 1000 * 1000)
        due = at - timedelta(seconds=rnd.uniform(0.1, 30))
        started = due + (at - due) * rnd.random()  # waited, then ran until archived
        last = {"scheduled_at": due, "started_at": started, "ended_at": at} if i % 11 else {"scheduled_at": due}
        archived.append({"_id": ObjectId(), "group": rnd.choice(GROUPS), "tenant": rnd.choice(TENANTS),
                         "why": "done" if i % 4 else rnd.choice(["tried-too-many-times", "cancelled"]),
                         "archived_at": at, "last_execution": last})
    db.archived.insert_many(archived)
    db.metadata.insert_one({"_id": "paused", "groups": ["reports"], "tenants": ["t3"]})


def brute_force(db: Any, now: datetime) -> dict[tuple[str, str], dict[str, Any]]:
    """Every figure per (group, tenant), from every document."""
    paused = db.metadata.find_one({"_id": "paused"})
    beats = {b["_id"]: b for b in db.heartbeats.find()}
    figures: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: defaultdict(int))
    ready_since: dict[tuple[str, str], list[datetime]] = defaultdict(list)
    for d in db.scheduled.find():
        key = (d["group"], d.get("tenant") or "")
        f = figures[key]
        due = d["scheduled_at"] <= now
        if d["locked"]:
            beat = beats.get(d["locked_by"], {})
            f["running" if beat.get("working_on") == d["_id"] else "assigned"] += 1
        elif due:
            f["ready"] += 1
            ready_since[key].append(d["scheduled_at"])
            f["paused"] += d["group"] in paused["groups"] or d.get("tenant") in paused["tenants"]
        else:
            f["retrying" if d["status"] == "retrying" else "delayed"] += 1
    for key, times in ready_since.items():
        figures[key]["oldest_ready_s"] = (now - min(times)).total_seconds()
    for d in db.archived.find():
        key = (d["group"], d["tenant"])
        for s in WINDOWS_S:
            if now - timedelta(seconds=s) <= d["archived_at"] <= now:
                f = figures[key]
                f[f"archived_{s}"] += 1
                f[f"failed_{s}"] += d["why"] != "done"
                last = d["last_execution"]
                f.setdefault(f"waits_{s}", [])
                f.setdefault(f"runs_{s}", [])
                if "started_at" in last:
                    f[f"waits_{s}"].append((last["started_at"] - last["scheduled_at"]).total_seconds())
                    f[f"runs_{s}"].append((last["ended_at"] - last["started_at"]).total_seconds())
    return figures


def check(result: Stats, expected: dict[tuple[str, str], dict[str, Any]]) -> None:
    seen = set()
    for g in result.groups:
        for t in g.tenants:
            key = (g.group, t.tenant)
            seen.add(key)
            e = expected[key]
            d = t.depth
            assert (d.ready, d.paused, d.delayed, d.retrying, d.assigned, d.running) == tuple(
                e[k] for k in ("ready", "paused", "delayed", "retrying", "assigned", "running")), key
            assert d.oldest_ready_s == pytest.approx(e.get("oldest_ready_s"), abs=1e-3) if d.ready else \
                d.oldest_ready_s is None
            for w in t.windows:
                s = w.seconds
                assert (w.archived, w.failed) == (e[f"archived_{s}"], e[f"failed_{s}"]), (key, s)
                assert not w.sampled
                for name, values in (("wait", e.get(f"waits_{s}", [])), ("run", e.get(f"runs_{s}", []))):
                    for p in (50, 95):
                        got = getattr(w, f"{name}_p{p}_s")
                        want = nearest_rank(values, p)
                        assert got == pytest.approx(want, abs=1e-3) if want is not None else got is None, \
                            (key, s, name, p)
        assert g.depth.ready == sum(t.depth.ready for t in g.tenants)
        for i, w in enumerate(g.windows):
            assert w.archived == sum(t.windows[i].archived for t in g.tenants)
    assert seen == set(expected)


def test_every_figure_equals_a_brute_force_count(db: Any, db_uri: str, now: datetime) -> None:
    populate(db, db_uri, now)
    result = stats(db, now)
    check(result, brute_force(db, now))
    assert (result.workers.idle, result.workers.busy, result.workers.stopping, result.workers.zombies) == (1, 2, 0, 1)
    assert result.paused.groups == ("reports",)
    # Sampled percentiles (a tiny sample) say so; the counts stay exact.
    small = stats(db, now, sample_limit=10)
    assert all(w.sampled for g in small.groups for w in g.windows[1:])
    assert [g.windows for g in small.groups] != [g.windows for g in result.groups]
    assert [[w.archived for w in g.windows] for g in small.groups] == \
        [[w.archived for w in g.windows] for g in result.groups]


def test_the_command_prints_the_figures_and_its_bounded_cost(db: Any, db_uri: str, now: datetime) -> None:
    populate(db, db_uri, now)
    out = CliRunner().invoke(main, ["stats", "--json", "--target", db_uri], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert {g["group"] for g in doc["groups"]} == set(GROUPS)
    assert doc["workers"] == {"idle": 1, "busy": 2, "stopping": 0, "zombies": 1, "malformed": 0}
    cost = doc["cost"]
    print(f"stats over 2 000 waiting and 5 000 archived jobs: {cost['round_trips']} round trips, "
          f"{cost['documents']} documents returned")
    assert cost["round_trips"] <= 20
    archived_last_hour = db.archived.count_documents({"archived_at": {"$gte": now - timedelta(hours=1)}})
    rows = 3 * 10 * 4 * 2 + 3 * 10 * 3 * 3  # depth rows, and archived count rows, at most
    assert cost["documents"] <= rows + archived_last_hour + db.scheduled.count_documents({"locked": True}) + 20
    text = CliRunner().invoke(main, ["stats", "--view", "full", "--target", db_uri], catch_exceptions=False)
    assert text.exit_code == 0
    assert "group / tenant" in text.stdout
    assert "round trips" in text.stdout
    # 3 groups of 10 tenants are more than a screen in full: the summary, a row per group (tenants summed).
    text = CliRunner().invoke(main, ["stats", "--target", db_uri], catch_exceptions=False)
    assert "(summary: the full view is" in text.stdout
    assert [line.split()[:2] for line in text.stdout.splitlines() if re.match(r"  \S+ \(\d+\) ", line)] == [
        ["billing", "(10)"], ["mail", "(11)"], ["reports", "(10)"]]  # mail has a job without a tenant


def test_watch_prints_one_json_line_per_refresh_until_interrupted(db: Any, db_uri: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    ensure_indexes_sync(db)
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr("recruiter.cli.stats.pause", nap)
    out = CliRunner().invoke(main, ["stats", "--watch", "--json", "--interval", "500ms", "--target", db_uri],
                             catch_exceptions=False)
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert len(lines) == 2
    assert all(json.loads(line)["groups"] == [] for line in lines)
    assert naps == [0.5, 0.5]
