"""Hostile ``schedules`` documents beside a healthy schedule (issue 22, item 4).

Documents written straight into ``schedules`` (as mongosh, another language or an
older version could) with wrong types, out-of-range numbers, both or neither of
``cron`` and ``every_s``, unknown enums, ids that are not strings, dates at the end
of time. The recruiter must never exit, no round may fail, the healthy every-second
schedule must keep firing every second, and ``recruiter schedules list`` must list
each bad document with its reason. Before the fix, an ``every_s`` of 1e300 made the
recruiter exit with OverflowError at every start, a string ``skipped`` failed every
round, and the healthy schedule fired 0 times in 10 s.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from bson import ObjectId

from recruiter import Recruiter
from tests.conftest import wait_for
from tests.processes.conftest import Processes
from tests.processes.test_cli_errors import run_cli
from tests.workables import Record

RUN_S = 20.0
# Well-formed, but at the end of time: it must not fire nor stop anything (adding its
# interval to it would leave the range of dates), and it is not listed as malformed.
ODD = {"next-slot-end-of-time"}
YEAR_S = 365.25 * 86_400


def hostile(template: dict[str, Any], now: datetime) -> list[dict[str, Any]]:
    """At least 20 kinds of malformed schedules, each due now."""
    base = {k: v for k, v in template.items() if k != "_id"} | {"next_fire_at": now, "next_slot": now}
    changes: list[tuple[object, dict[str, Any]]] = [
        ("every-1e300", {"every_s": 1e300}),
        ("every-10000-years", {"every_s": 10_000 * YEAR_S}),
        ("every-negative", {"every_s": -5}),
        ("every-text", {"every_s": "1s"}),
        ("jitter-huge", {"jitter_s": 1e300}),
        ("jitter-text", {"jitter_s": "a bit"}),
        ("skipped-text", {"skipped": "many"}),
        ("skipped-negative", {"skipped": -3}),
        ("both-cron-and-every", {"cron": "* * * * *"}),
        ("neither-cron-nor-every", {"every_s": None}),
        ("overlap-unknown", {"overlap": "sometimes"}),
        ("catch-up-unknown", {"catch_up": {"mode": "bogus"}}),
        ("catch-up-limit-huge", {"catch_up": {"mode": "all", "limit": 10**12}}),
        ("catch-up-within-huge", {"catch_up": {"mode": "within", "limit": 3, "within_s": 1e300}}),
        ("cron-invalid", {"every_s": None, "cron": "61 * * * *"}),
        ("tz-unknown", {"tz": "Mars/Olympus"}),
        ("job-text", {"job": "not a document"}),
        ("job-without-class", {"job": {"group": "generic"}}),
        ("next-slot-text", {"next_slot": "tomorrow"}),
        ("next-slot-end-of-time", {"next_slot": datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
                                   "next_fire_at": now}),
        ("paused-text", {"paused": "yes"}),
        ("version-operator", {"version": {"$ne": None}}),
        ("last-fire-text", {"last_fire": "yesterday"}),
        ("run-now-text", {"run_now": "now"}),
        (12345, {}),
        (ObjectId(), {}),
        ({"a": 1}, {}),
    ]
    return [{"_id": name, **base, **change} for name, change in changes]


def test_hostile_schedules_never_stop_the_queue(processes: Processes, db_uri: str, db: Any) -> None:
    with Recruiter.connect(db_uri) as rec:
        rec.schedule("healthy", every="1s", job=Record(db_uri, 1, sleep_s=0.005).as_job_of(rec))
    template = db.schedules.find_one({"_id": "healthy"})
    bad = hostile(template, datetime.now(UTC))
    assert len(bad) >= 20
    db.schedules.insert_many(bad)
    recruiter = processes.recruiter()
    processes.worker()
    started = time.monotonic()
    wait_for(lambda: db.archived.count_documents({"schedule.name": "healthy"}) >= 1, timeout_s=60,
             message="the healthy schedule's first run")
    first = datetime.now(UTC)
    wait_for(lambda: time.monotonic() - started >= RUN_S, timeout_s=RUN_S + 5, interval_s=0.5)
    assert recruiter.popen.poll() is None, recruiter.log()[-3000:]

    # Fired every second since its first run (a few slots of slack for a loaded machine).
    fired = db.archived.count_documents({"schedule.name": "healthy", "schedule.slot": {"$gte": first}})
    window_s = (datetime.now(UTC) - first).total_seconds()
    assert fired >= window_s - 3, (fired, window_s)
    # No bad document fired anything, no round failed, and each was set aside with a warning.
    assert db.scheduled.count_documents({"schedule.name": {"$ne": "healthy"}, "schedule": {"$exists": True}}) == 0
    events = [json.loads(line) for line in recruiter.log().splitlines() if line.startswith("{")]
    assert [e for e in events if e.get("event", "").endswith(".failed")] == []
    warned = {str(e.get("schedule")) for e in events if e.get("event") in ("schedule.malformed", "schedule.set_aside")}
    due_ones = [d for d in bad if isinstance(d.get("next_fire_at"), datetime) and str(d["_id"]) not in ODD]
    assert {str(d["_id"]) for d in due_ones} <= warned, sorted({str(d["_id"]) for d in due_ones} - warned)

    listed = run_cli("schedules", "list", "--json", "--target", db_uri)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    malformed = [r for r in rows if r.get("malformed")]
    assert len(malformed) == len(bad) - len(ODD), [r for r in rows if not r.get("malformed")]
    assert len(malformed) >= 20
    assert all(isinstance(r["malformed"], str) and r["malformed"] for r in malformed)
    assert sorted(r["name"] for r in rows if not r.get("malformed")) == sorted(["healthy", *ODD])
    processes.stop_all()
    assert recruiter.wait(30) == 0
    assert time.monotonic() - started < RUN_S + 120

