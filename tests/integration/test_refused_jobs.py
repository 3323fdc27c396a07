"""A job no worker may import says so wherever it appears, from the refusal the worker stored.

A real worker (in-process, :class:`WorkerProcess`) refuses two jobs, one naming a module
outside its allowed modules, one naming a module it cannot import; a real recruiter round
applies the hand-backs. Then the stored refusals (kind, class, reason, fix, bounded) and
every view are checked: ``rec.admin`` (job, jobs, explain), the CLI (``jobs list``,
``jobs show``, ``jobs show --json``, ``jobs explain``, through click's CliRunner) and the
dashboard (job page, jobs list, Failures, through starlette's TestClient). A refusal
edited by hand into nonsense is shown as malformed, and no view fails. The worker's start
check names the modules of the waiting jobs it would refuse, from one bounded read.

The clock is an hour ahead of the server's, so the jobs given back are not due yet when
the views read them with the server's time: ``explain`` names the refusal, deterministically.
"""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import structlog
from bson import ObjectId
from click.testing import CliRunner
from pymongo import AsyncMongoClient
from starlette.testclient import TestClient
from structlog.testing import capture_logs

from bench.commands import Commands
from recruiter.admin import Admin, Waiting
from recruiter.cli.main import main
from recruiter.domain.clock import ManualClock
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.domain.naming import AllowedModules
from recruiter.domain.refusals import CANNOT_IMPORT, MAX_REASON_CHARS, NOT_ALLOWED
from recruiter.processes.recruiter import RecruiterConfig, RecruiterProcess
from recruiter.processes.worker.refusing import CHECKED_JOBS, warn_unrunnable
from recruiter.processes.worker.runtime import WorkerConfig, WorkerProcess
from recruiter.store.indexes import ensure_indexes
from recruiter.web import Settings, create_app
from tests.workables import Record

GROUP = "billing"
NOWHERE = "nowhere_jobs:Invoice"


def _doc(db_uri: str, n: int, now: datetime, cls: str | None = None) -> dict[str, Any]:
    doc = dict(build_job_document(Record(db_uri, n=n), JobOptions(group=GROUP), now))
    if cls is not None:
        doc["workable"] = {**doc["workable"], "class": cls}
    return doc


async def _given_back(db_uri: str, sync_db: Any, start: datetime) -> dict[str, ObjectId]:
    """Two jobs refused by worker ``wrong-dir`` (allowed: ``elsewhere`` only) and applied by a round."""
    client: AsyncMongoClient[Any] = AsyncMongoClient(db_uri, tz_aware=True)
    try:
        db = client.get_default_database()
        await ensure_indexes(db)
        clock = ManualClock(start)
        recruiter = RecruiterProcess(db, clock, RecruiterConfig(), owner="recruiter-under-test")
        jobs = {"not_allowed": _doc(db_uri, 1, start), "cannot_import": _doc(db_uri, 2, start, NOWHERE)}
        await db.scheduled.insert_many(list(jobs.values()))
        allowed = WorkerConfig(groups=(GROUP,), worker_id="wrong-dir", allowed_modules=("elsewhere", "nowhere_jobs"))
        process = WorkerProcess(db, clock, allowed, heartbeat_db=sync_db, exit_now=lambda status: None)
        (slot,) = process.slots
        await process.register(slot)
        for _ in jobs:
            assert await recruiter.lease.acquire()
            await recruiter.fenced_round()
            job_id = await process.poll(slot)
            assert job_id is not None
            await process.work(slot, job_id)
            assert await recruiter.lease.acquire()
            await recruiter.fenced_round()  # applies the hand-back
        return {name: doc["_id"] for name, doc in jobs.items()}
    finally:
        await client.close()


@pytest.fixture
def refused(db: Any, db_uri: str) -> dict[str, ObjectId]:
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    return asyncio.run(_given_back(db_uri, db, start))


def cli(db_uri: str, *args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--target", db_uri], catch_exceptions=False)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stdout


def test_the_worker_stores_why_it_refused_and_what_to_do(db: Any, refused: dict[str, ObjectId]) -> None:
    job = db.scheduled.find_one({"_id": refused["not_allowed"]})
    assert job["status"] == "retrying"
    assert job["attempts"] == 0
    (entry,) = job["refusals"]
    assert entry["worker"] == "wrong-dir"
    assert entry["kind"] == NOT_ALLOWED
    assert entry["class"] == "tests.workables:Record"
    assert entry["reason"].startswith("class not allowed: tests.workables:Record (module 'tests.workables' is not "
                                      "in the worker's allowed modules: elsewhere, nowhere_jobs)")
    # The module is on this worker's path: allowing it is the whole fix.
    assert entry["fix"] == "allow the module on the worker: --allow-module tests (RECRUITER_ALLOW_MODULE)"
    assert job["refusals_until"] == job["first_refused_at"] + timedelta(hours=1)

    job = db.scheduled.find_one({"_id": refused["cannot_import"]})
    (entry,) = job["refusals"]
    assert entry["kind"] == CANNOT_IMPORT
    assert entry["class"] == NOWHERE
    assert entry["reason"].startswith(f"cannot import {NOWHERE}: cannot import module 'nowhere_jobs'")
    assert len(entry["reason"]) <= MAX_REASON_CHARS
    assert entry["fix"].startswith(f"start the worker in the project directory (it runs in {os.getcwd()}), "
                                   "or give --import-path with the directory holding nowhere_jobs")


def test_rec_admin_tells_who_refused_why_until_when_and_the_fix(db: Any, db_uri: str,
                                                                  refused: dict[str, ObjectId]) -> None:
    admin = Admin(db)
    view = admin.job(refused["not_allowed"])
    assert view is not None
    assert view.state == "retrying"
    assert view.refused is not None
    assert view.refused.current
    assert view.refused.workers == ("wrong-dir",)
    assert view.refused.kind == NOT_ALLOWED
    assert view.refused.until == db.scheduled.find_one({"_id": refused["not_allowed"]})["refusals_until"]
    assert "--allow-module tests" in view.refused.fix
    listed = {v.id: v for v in admin.jobs(states=("retrying",)).views}
    assert listed[refused["cannot_import"]].refused is not None
    assert listed[refused["cannot_import"]].refused.kind == CANNOT_IMPORT  # type: ignore[union-attr]
    why = admin.explain(refused["cannot_import"])
    assert why is not None
    assert why.code == Waiting.REFUSED
    assert f"refused by worker wrong-dir: cannot import {NOWHERE}" in why.text
    assert "to fix: start the worker in the project directory" in why.text
    assert why.details["refused_by"] == ["wrong-dir"]


def test_the_cli_shows_the_refusal_in_list_show_and_explain(db_uri: str, refused: dict[str, ObjectId]) -> None:
    job_id = str(refused["not_allowed"])
    listing = cli(db_uri, "jobs", "list", "--state", "retrying")
    row = next(line for line in listing.splitlines() if line.startswith(job_id))
    assert "retrying (refused by worker wrong-dir: module not allowed (tests.workables:Record))" in row
    shown = cli(db_uri, "jobs", "show", job_id)
    assert "waiting    refused: refused by worker wrong-dir: class not allowed: tests.workables:Record" in shown
    refused_line = next(line for line in shown.splitlines() if line.startswith("refused    "))
    assert "kept from them until " in refused_line
    assert refused_line.endswith("to fix: allow the module on the worker: --allow-module tests "
                                 "(RECRUITER_ALLOW_MODULE)")
    as_json = json.loads(cli(db_uri, "jobs", "show", job_id, "--json"))
    assert as_json["refused"]["workers"] == ["wrong-dir"]
    assert as_json["refused"]["kind"] == NOT_ALLOWED
    assert as_json["refused"]["current"] is True
    explained = cli(db_uri, "jobs", "explain", str(refused["cannot_import"])).strip()
    assert explained.startswith(f"refused: refused by worker wrong-dir: cannot import {NOWHERE}")
    assert "; to fix: start the worker in the project directory" in explained


def test_the_dashboard_shows_the_refusal_on_every_page(db: Any, refused: dict[str, ObjectId]) -> None:
    with TestClient(create_app(db, Settings()), base_url="http://127.0.0.1") as web:
        page = web.get(f"/jobs/{refused['not_allowed']}").text
        assert 'id="job-refused"' in page
        assert "refused by worker wrong-dir: class not allowed: tests.workables:Record" in page
        assert "--allow-module tests" in page
        assert "retrying (refused by worker wrong-dir: module not allowed (tests.workables:Record))" in page
        listing = web.get("/jobs?state=retrying").text
        assert "retrying (refused by worker wrong-dir: cannot import (nowhere_jobs:Invoice))" in listing
        failures = web.get("/failures").text
        assert "(no message)" not in failures
        assert "refused: module not allowed" in failures
        assert "refused: cannot import" in failures
        assert "to fix: allow the module on the worker: --allow-module tests" in failures


def test_a_refusal_edited_into_nonsense_is_shown_as_malformed(db: Any, db_uri: str,
                                                             refused: dict[str, ObjectId]) -> None:
    job_id = refused["not_allowed"]
    db.scheduled.update_one({"_id": job_id}, {"$set": {"refusals.0.reason": {"text": ["x"]},
                                                       "refusals.0.fix": 7, "refusals.0.worker": ["w"]}})
    expected = "malformed refusal: reason is dict, not text"
    view = Admin(db).job(job_id)
    assert view is not None
    assert view.refused is not None
    assert view.refused.reason == expected
    assert expected in cli(db_uri, "jobs", "show", str(job_id))
    assert expected in cli(db_uri, "jobs", "explain", str(job_id))
    cli(db_uri, "jobs", "list")
    with TestClient(create_app(db, Settings()), base_url="http://127.0.0.1") as web:
        for path in (f"/jobs/{job_id}", "/jobs", "/failures"):
            response = web.get(path)
            assert response.status_code == 200, path
        assert expected in web.get(f"/jobs/{job_id}").text
    db.scheduled.update_one({"_id": job_id}, {"$set": {"refusals": "junk"}})
    assert "malformed refusals: expected a list, found str" in cli(db_uri, "jobs", "show", str(job_id))


def test_the_start_check_names_each_module_a_waiting_job_names_and_the_worker_refuses(db: Any, db_uri: str) -> None:
    now = datetime.now(UTC)
    docs = [_doc(db_uri, 1, now), _doc(db_uri, 2, now, NOWHERE), _doc(db_uri, 3, now, "recruiter.retry:Nope")]
    other = {**_doc(db_uri, 4, now, "other_group_jobs:Job"), "group": "other"}
    db.scheduled.insert_many([*docs, other])

    async def check(groups: tuple[str, ...], allowed: AllowedModules | None) -> tuple[int, list[dict[str, Any]]]:
        commands = Commands()
        client: AsyncMongoClient[Any] = AsyncMongoClient(db_uri, tz_aware=True, event_listeners=[commands])
        try:
            with capture_logs() as logs:
                found = await warn_unrunnable(client.get_default_database().scheduled, groups, allowed,
                                              structlog.get_logger("test"))
        finally:
            await client.close()
        finds = commands.named("find", "scheduled")
        assert len(finds) == 1  # one read, of a bounded number of jobs
        assert finds[0]["limit"] == CHECKED_JOBS
        return found, logs

    found, logs = asyncio.run(check((GROUP,), AllowedModules(("elsewhere",))))
    assert found == 2  # tests.workables (not allowed) and nowhere_jobs; recruiter.retry is built in
    by_module = {e["module"]: e for e in logs if e["event"] == "worker.refuses_waiting_jobs"}
    assert set(by_module) == {"tests.workables", "nowhere_jobs"}
    assert "not among this worker's allowed modules" in by_module["tests.workables"]["reason"]
    assert by_module["tests.workables"]["fix"].startswith("allow the module on the worker: --allow-module tests")
    assert by_module["nowhere_jobs"]["reason"].endswith("(nor on its import path)")
    assert by_module["nowhere_jobs"]["groups"] == [GROUP]
    assert all(e["log_level"] == "warning" for e in by_module.values())
    found, logs = asyncio.run(check(("*",), None))  # no allow-list: only what cannot be imported
    assert {e["module"] for e in logs} == {"nowhere_jobs", "other_group_jobs"}
    found, logs = asyncio.run(check(("quiet",), AllowedModules(())))
    assert (found, logs) == (0, [])


def test_explain_says_archived_once(db: Any, db_uri: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    doc = {**_doc(db_uri, 5, now), "why": "unrunnable", "reason": "no worker could run it", "archived_at": now}
    db.archived.insert_one(doc)
    line = cli(db_uri, "jobs", "explain", str(doc["_id"])).strip()
    assert line == f"archived: unrunnable (no worker could run it) at {now.strftime('%Y-%m-%d %H:%M:%S')} UTC"
