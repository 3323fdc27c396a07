"""``recruiter schedules list|show|pause|resume|remove|run-now`` against a real server.

The schedule documents are inserted directly, in the shape the recruiter's
``rec.schedule`` and firing write them (the common brief's ``schedules``
document), and in malformed shapes: every document is untrusted input. The
fired jobs are built with the producer's builder and put in the state under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from bson import ObjectId
from click.testing import CliRunner, Result

from recruiter.cli.main import main
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.store.monitoring import STATS_ENVVAR
from tests.conftest import REPO
from tests.integration.test_jobs_listing import one_line_error
from tests.workables import Record

MALFORMED = "malformed: "


def cli(*args: str, db_uri: str) -> Result:
    return CliRunner().invoke(main, ["schedules", *args, "--target", db_uri], catch_exceptions=False)


def job_template(db_uri: str, now: datetime) -> dict[str, Any]:
    doc = dict(build_job_document(Record(db_uri, n=7), JobOptions(group="reports", tenant="acme"), now))
    for key in ("_id", "created_at", "scheduled_at", "unique"):
        doc.pop(key, None)
    return doc


def schedule(name: str, now: datetime, db_uri: str, **fields: Any) -> dict[str, Any]:
    """A well-formed ``schedules`` document, as the cron side writes it."""
    doc: dict[str, Any] = {
        "_id": name, "cron": "0 3 * * *", "every_s": None, "tz": "Europe/Rome", "job": job_template(db_uri, now),
        "overlap": "skip", "catch_up": {"mode": "none", "limit": 10, "within_s": None}, "jitter_s": 0.0,
        "paused": False, "version": "v1", "created_at": now - timedelta(days=3), "updated_at": now - timedelta(days=1),
        "declared_at": now, "next_fire_at": now + timedelta(hours=5), "next_slot": now + timedelta(hours=5),
        "last_fire": None, "skipped": 0, "last_skip": None, "run_now": None,
    }
    doc.update(fields)
    return doc


def fired(db_uri: str, now: datetime, name: str) -> dict[str, Any]:
    doc = dict(build_job_document(Record(db_uri, n=1), JobOptions(group="reports"), now))
    doc["schedule"] = {"name": name, "slot": now}
    return doc


@pytest.fixture
def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def populated(db: Any, db_uri: str, now: datetime) -> dict[str, Any]:
    """Five well-formed schedules (one done, one failed, one running, one paused and stale, one never fired)
    and three malformed documents."""
    done, failed, waiting = (fired(db_uri, now - timedelta(hours=h), n) for h, n in
                             ((1, "nightly"), (2, "hourly"), (0, "busy")))
    db.archived.insert_many([{**done, "why": "done", "archived_at": now, "attempts": 1},
                             {**failed, "why": "tried-too-many-times", "archived_at": now, "attempts": 3}])
    token = ObjectId()
    db.scheduled.insert_one({**waiting, "status": "assigned", "locked": True, "locked_by": "w-1",
                             "lock_token": token, "locked_at": now})
    db.heartbeats.insert_one({"_id": "w-1", "working": True, "working_on": waiting["_id"], "working_token": token,
                              "last_seen_at": now})
    db.schedules.insert_many([
        schedule("nightly", now, db_uri, last_fire={"slot": now - timedelta(hours=1), "job": done["_id"],
                                                    "at": now - timedelta(hours=1)}),
        schedule("hourly", now, db_uri, cron=None, every_s=3600.0, tz="UTC",
                 last_fire={"slot": now - timedelta(hours=2), "job": failed["_id"], "at": now - timedelta(hours=2)},
                 skipped=4, last_skip={"slot": now - timedelta(hours=1), "reason": "overlap",
                                       "at": now - timedelta(hours=1)}),
        schedule("busy", now, db_uri, every_s=1.0, cron=None, overlap="skip",
                 last_fire={"slot": now, "job": waiting["_id"], "at": now}),
        schedule("old-report", now, db_uri, declared_at=now - timedelta(hours=3), paused=True, next_fire_at=None),
        schedule("fresh", now, db_uri, declared_at=now - timedelta(minutes=30)),
        # malformed: wrong types, both rules, a document that is barely one
        schedule("bad-types", now, db_uri, paused="yes"),
        schedule("both-rules", now, db_uri, every_s=60.0),
        {"_id": "bare", "cron": 5},
    ])
    return {"done": done["_id"], "failed": failed["_id"], "waiting": waiting["_id"]}


def rows(output: str) -> dict[str, str]:
    return {line.split()[0]: line for line in output.splitlines()[1:]}


def test_list_shows_rule_fires_outcomes_and_malformed(populated: dict[str, Any], db_uri: str) -> None:
    result = cli("list", db_uri=db_uri)
    assert result.exit_code == 0, result.output
    by_name = rows(result.stdout)
    assert set(by_name) == {"bad-types", "bare", "both-rules", "busy", "fresh", "hourly", "nightly", "old-report"}
    assert "cron 0 3 * * * Europe/Rome" in by_name["nightly"]
    assert "  done" in by_name["nightly"]
    assert "every 1h UTC" in by_name["hourly"]
    assert "tried-too-many-times" in by_name["hourly"]
    assert by_name["hourly"].split()[-1] == "4"  # skipped
    assert "running" in by_name["busy"]
    assert "paused" in by_name["old-report"]
    assert by_name["old-report"].endswith("stale")
    assert "stale" not in by_name["fresh"]
    assert f"{MALFORMED}paused: expected true or false, got str" in by_name["bad-types"]
    assert f"{MALFORMED}cron, every_s: expected exactly one of them" in by_name["both-rules"]
    assert f"{MALFORMED}cron: expected a string or null, got int" in by_name["bare"]


def test_list_json(populated: dict[str, Any], db_uri: str) -> None:
    result = cli("list", "--json", db_uri=db_uri)
    assert result.exit_code == 0, result.output
    listed = {s["name"]: s for s in json.loads(result.stdout)}
    assert listed["nightly"]["last_outcome"] == "done"
    assert listed["nightly"]["last_fire"]["job"] == str(populated["done"])
    assert listed["hourly"]["every_s"] == 3600.0
    assert listed["hourly"]["skipped"] == 4
    assert listed["busy"]["last_outcome"] == "running"
    assert listed["old-report"] == {**listed["old-report"], "paused": True, "stale": True, "next_fire_at": None}
    assert listed["fresh"]["last_outcome"] is None
    assert listed["fresh"]["stale"] is False
    assert listed["bare"] == {"name": "bare", "malformed": "cron: expected a string or null, got int"}


def test_list_stale_only_and_stale_after(populated: dict[str, Any], db_uri: str) -> None:
    result = cli("list", "--stale", db_uri=db_uri)
    assert result.exit_code == 0, result.output
    assert set(rows(result.stdout)) == {"old-report"}
    wider = cli("list", "--stale", "--stale-after", "10m", "--json", db_uri=db_uri)
    assert {s["name"] for s in json.loads(wider.stdout)} == {"old-report", "fresh"}
    none = cli("list", "--stale", "--stale-after", "1d", db_uri=db_uri)
    assert none.stdout.strip() == "no stale schedules"
    one_line_error(cli("list", "--stale", "--stale-after", "soon", db_uri=db_uri), 2, "invalid duration")


def test_list_empty(db: Any, db_uri: str) -> None:
    result = cli("list", db_uri=db_uri)
    assert result.exit_code == 0
    assert result.stdout.strip() == "no schedules"


def test_list_reads_the_last_jobs_in_one_batch(populated: dict[str, Any], db: Any, db_uri: str, now: datetime,
                                               tmp_path: Path) -> None:
    """The real command: one find on schedules, one on archived, one on scheduled, one on heartbeats (for the
    locked job), however many schedules there are, and no write."""
    more = [fired(db_uri, now, f"many-{i}") for i in range(30)]
    db.archived.insert_many([{**d, "why": "done", "archived_at": now, "attempts": 1} for d in more])
    db.schedules.insert_many([schedule(f"many-{i}", now, db_uri, last_fire={"slot": now, "job": d["_id"], "at": now})
                              for i, d in enumerate(more)])
    stats = tmp_path / "stats.json"
    env = {**os.environ, STATS_ENVVAR: str(stats), "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "recruiter.cli", "schedules", "list", "--json",
                             "--target", db_uri], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    listed = {s["name"]: s for s in json.loads(result.stdout)}
    assert len(listed) == 38
    assert listed["many-29"]["last_outcome"] == "done"
    targets = json.loads(stats.read_text())["targets"]
    counts = {k: v["count"] for k, v in targets.items() if k.split(":")[0] in ("find", "getMore", "insert",
                                                                                  "update", "delete")}
    assert counts == {"find:schedules": 1, "find:archived": 1, "find:scheduled": 1, "find:heartbeats": 1}, counts


def test_show_everything(populated: dict[str, Any], db_uri: str, now: datetime) -> None:
    result = cli("show", "hourly", db_uri=db_uri)
    assert result.exit_code == 0, result.output
    text = result.stdout
    for fragment in ("schedule   hourly", "rule       every 1h UTC", "class      tests.workables:Record",
                     "group      reports", "tenant     acme", "overlap    skip", "catch-up   none",
                     "jitter     0s", "version    v1", f"declared   {now.isoformat()}",
                     f"next slot  {(now + timedelta(hours=5)).isoformat()}",
                     f"job {populated['failed']}: tried-too-many-times",
                     f"skipped    4 (last: slot {(now - timedelta(hours=1)).isoformat()}, overlap",
                     "run-now    none"):
        assert fragment in text, text
    assert '"n": 7' in text  # the template's parameters


def test_show_json_and_stale(populated: dict[str, Any], db_uri: str) -> None:
    shown = json.loads(cli("show", "old-report", "--json", db_uri=db_uri).stdout)
    assert shown["stale"] is True
    assert shown["paused"] is True
    assert shown["job"]["group"] == "reports"
    assert shown["job"]["workable"]["class"] == "tests.workables:Record"
    assert shown["catch_up"] == {"mode": "none", "limit": 10, "within_s": None}
    assert shown["last_skip"] is None
    assert shown["version"] == "v1"
    assert "(stale: no longer declared)" in cli("show", "old-report", db_uri=db_uri).stdout


def test_show_malformed_and_unknown(populated: dict[str, Any], db_uri: str) -> None:
    result = cli("show", "bad-types", db_uri=db_uri)
    assert result.exit_code == 0
    assert "malformed  paused: expected true or false, got str" in result.stdout
    assert json.loads(cli("show", "bare", "--json", db_uri=db_uri).stdout)["document"] == {"_id": "bare", "cron": 5}
    one_line_error(cli("show", "nope", db_uri=db_uri), 1, "no schedule named 'nope'")
    one_line_error(cli("show", "nope", "--json", db_uri=db_uri), 1, "no schedule named 'nope'")


def test_pause_and_resume(populated: dict[str, Any], db: Any, db_uri: str) -> None:
    before = db.schedules.find_one({"_id": "nightly"})
    result = cli("pause", "nightly", db_uri=db_uri)
    assert result.exit_code == 0
    assert result.stdout.strip() == "paused nightly: no slot fires until it is resumed"
    after = db.schedules.find_one({"_id": "nightly"})
    assert after == {**before, "paused": True, "next_fire_at": None}
    again = cli("pause", "nightly", db_uri=db_uri)
    assert again.exit_code == 0
    assert again.stdout.strip() == "nightly was already paused"
    assert db.schedules.find_one({"_id": "nightly"}) == after

    resumed = cli("resume", "nightly", db_uri=db_uri)
    assert resumed.exit_code == 0
    assert resumed.stdout.strip() == "resumed nightly: the recruiter computes its next fire from now"
    doc = db.schedules.find_one({"_id": "nightly"})
    # No next fire time and not paused: the recruiter's next round computes it from now.
    assert doc == {**before, "next_fire_at": None}
    not_paused = cli("resume", "nightly", db_uri=db_uri)
    assert not_paused.exit_code == 0
    assert not_paused.stdout.strip() == "nightly was not paused"
    assert db.schedules.find_one({"_id": "nightly"}) == doc


def test_run_now_once_even_paused(populated: dict[str, Any], db: Any, db_uri: str) -> None:
    result = cli("run-now", "old-report", db_uri=db_uri)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("run-now requested for old-report"), result.output
    doc = db.schedules.find_one({"_id": "old-report"})
    assert isinstance(doc["run_now"], datetime)
    assert doc["paused"] is True
    again = cli("run-now", "old-report", db_uri=db_uri)
    assert again.exit_code == 0
    assert "already pending" in again.stdout
    assert db.schedules.find_one({"_id": "old-report"}) == doc
    listed = rows(cli("list", db_uri=db_uri).stdout)["old-report"]
    assert listed.endswith("stale, run-now pending")
    assert "run-now    pending since" in cli("show", "old-report", db_uri=db_uri).stdout


def test_remove_is_the_only_delete(populated: dict[str, Any], db: Any, db_uri: str) -> None:
    result = cli("remove", "old-report", db_uri=db_uri)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("removed old-report"), result.output
    assert db.schedules.find_one({"_id": "old-report"}) is None
    assert db.schedules.count_documents({}) == 7
    assert db.archived.count_documents({}) == 2
    assert db.scheduled.count_documents({}) == 1
    # A malformed schedule can be removed (and paused) too.
    assert cli("pause", "bare", db_uri=db_uri).exit_code == 0
    assert db.schedules.find_one({"_id": "bare"})["paused"] is True
    assert cli("remove", "bare", db_uri=db_uri).exit_code == 0
    assert db.schedules.find_one({"_id": "bare"}) is None


@pytest.mark.parametrize("command", ["pause", "resume", "run-now", "remove"])
def test_unknown_name_changes_nothing(populated: dict[str, Any], db: Any, db_uri: str, command: str) -> None:
    before = sorted(db.schedules.find(), key=lambda d: d["_id"])
    one_line_error(cli(command, "nightl", db_uri=db_uri), 1, "no schedule named 'nightl'", "nothing changed")
    assert sorted(db.schedules.find(), key=lambda d: d["_id"]) == before
    assert db.schedules.find_one({"_id": "nightl"}) is None


def test_operator_names_are_not_operators(populated: dict[str, Any], db: Any, db_uri: str) -> None:
    """A name that looks like a query operator names nothing."""
    one_line_error(cli("remove", '{"$gt": ""}', db_uri=db_uri), 1, "no schedule named")
    assert db.schedules.count_documents({}) == 8
