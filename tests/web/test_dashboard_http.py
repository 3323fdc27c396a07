"""The dashboard over HTTP (starlette's TestClient) against a real server: every page, every refusal.

Each bad request (unknown job, POST without or with a forged CSRF token, wrong token or
password, oversized page or query, a bind beyond localhost without auth) gets its status
code and leaves every collection, the audit included, exactly as it was.
"""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId
from starlette.testclient import TestClient

from recruiter.admin import Admin
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.store import ensure_indexes_sync, parse_target, sync_client
from recruiter.web import Access, Csrf, Settings, create_app
from recruiter.web.security import SESSION_COOKIE
from tests.conftest import REPO
from tests.workables import Record

COLLECTIONS = ("scheduled", "archived", "metadata", "roster", "schedules", "audit")
TOKEN = "t0ken-for-tests"


def snapshot(db: Any) -> dict[str, list[Any]]:
    return {name: sorted(db[name].find(), key=lambda d: str(d["_id"])) for name in COLLECTIONS}


def failed_job(db_uri: str, n: int, now: datetime, message: str = "boom") -> dict[str, Any]:
    doc = dict(build_job_document(Record(db_uri, n=n), JobOptions(group="mail"), now - timedelta(minutes=5)))
    run = {"attempt": 1, "outcome": "failed", "worker": "w-1", "pid": 7, "hostname": "h",
           "started_at": now - timedelta(seconds=3), "ended_at": now - timedelta(seconds=2),
           "class": "ValueError", "message": message,
           "trace": f"Traceback (most recent call last):\nValueError: {message}\n",
           "logs": f"log line of job {n}\n"}
    return {**{k: v for k, v in doc.items() if k != "status"}, "why": "tried-too-many-times",
            "archived_at": now - timedelta(seconds=n), "done": False, "attempts": 1, "executions": [run],
            "last_execution": run}


@pytest.fixture
def store_db(db_uri: str) -> Iterator[Any]:
    target = parse_target(db_uri)
    client = sync_client(target, app_name="test-dashboard")
    ensure_indexes_sync(client[target.database])
    yield client[target.database]
    client.close()


@pytest.fixture
def seeded(db: Any, db_uri: str) -> dict[str, Any]:
    now = datetime.now(UTC).replace(microsecond=0)
    failed = [failed_job(db_uri, i, now) for i in range(1, 4)]
    queued = dict(build_job_document(Record(db_uri, n=99), JobOptions(group="mail", tenant="acme"), now))
    db.archived.insert_many(failed)
    db.scheduled.insert_one(queued)
    return {"failed": failed, "queued": queued}


def client_of(store_db: Any, **settings: Any) -> TestClient:
    return TestClient(create_app(store_db, Settings(**settings)), base_url="http://127.0.0.1")


@pytest.fixture
def web(store_db: Any) -> Iterator[TestClient]:
    with client_of(store_db) as c:
        yield c


def csrf_of(client: TestClient, path: str = "/switches") -> str:
    page = client.get(path)
    assert page.status_code == 200
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, "no CSRF field on the page"
    assert client.cookies.get(SESSION_COOKIE), "no session cookie"
    return found.group(1)


def test_every_page_renders_from_the_read_model(web: TestClient, seeded: dict[str, Any]) -> None:
    failed_id = str(seeded["failed"][0]["_id"])
    for path in ("/", "/overview/live", "/jobs", "/failures", "/workers", "/schedules", "/switches", "/audit",
                 "/workflows", f"/jobs/{failed_id}", "/jobs?state=queued&group=mail&limit=100"):
        response = web.get(path)
        assert response.status_code == 200, (path, response.text[:300])
        assert response.headers["x-frame-options"] == "DENY"
    # The live part of an archived job tells htmx to stop polling (286); a waiting job's keeps it (200).
    assert web.get(f"/jobs/{failed_id}/live").status_code == 286
    assert web.get(f"/jobs/{seeded['queued']['_id']}/live").status_code == 200
    job_page = web.get(f"/jobs/{failed_id}").text
    assert "ValueError: boom" in job_page
    assert "log line of job 1" in job_page
    failures = web.get("/failures").text
    assert "3 jobs: 3 archived" in failures
    assert "3 jobs: 3 archived" in web.get("/failures?reason=tried-too-many-times").text
    assert "no failed job" in web.get("/failures?reason=crashed").text
    assert web.get("/failures?reason=bogus").status_code == 400
    assert "mail" in web.get("/").text
    assert "acme" not in web.get("/").text  # tenants are shown on demand (test_dashboard_overview.py)
    assert "acme" in web.get("/?tenants=mail").text


def test_a_waiting_jobs_page_says_what_it_waits_for(web: TestClient, db: Any, seeded: dict[str, Any]) -> None:
    queued = seeded["queued"]["_id"]
    assert 'id="job-waiting"' in web.get(f"/jobs/{queued}").text  # no worker at all: it waits
    db.metadata.insert_one({"_id": "paused", "groups": ["mail"], "tenants": []})
    live = web.get(f"/jobs/{queued}/live").text
    found = re.search(r'id="job-waiting">([^<]+)<', live)
    assert found, live[:500]
    assert "paused" in found.group(1)
    assert "mail" in found.group(1)
    failed = seeded["failed"][0]["_id"]
    assert 'id="job-waiting"' not in web.get(f"/jobs/{failed}").text  # archived: nothing to wait for


def test_search_finds_a_job_by_id_and_filters_by_class(web: TestClient, seeded: dict[str, Any]) -> None:
    job_id = str(seeded["queued"]["_id"])
    found = web.get(f"/jobs?q={job_id}", follow_redirects=False)
    assert found.status_code == 303
    assert found.headers["location"] == f"/jobs/{job_id}"
    by_class = web.get("/jobs?q=tests.workables:Record")
    assert by_class.status_code == 200
    assert job_id in by_class.text
    assert web.get("/jobs?q=tests.workables:Nothing").text.count("/jobs/") == 0
    assert web.get("/jobs?q=not-an-id").status_code == 400


def test_jobs_are_paged_by_a_keyset(web: TestClient, seeded: dict[str, Any]) -> None:
    first = web.get("/jobs?limit=2")
    token = re.search(r'after=([A-Za-z0-9_-]+)"', first.text)
    assert token, "no next page link"
    second = web.get(f"/jobs?limit=2&after={token.group(1)}")

    def ids(text: str) -> set[str]:
        return set(re.findall(r'href="/jobs/([0-9a-f]{24})"', text))

    assert len(ids(first.text)) == 2
    assert len(ids(second.text)) == 2
    assert not ids(first.text) & ids(second.text)


def test_an_unknown_job_is_404(web: TestClient, db: Any, seeded: dict[str, Any]) -> None:
    before = snapshot(db)
    assert web.get(f"/jobs/{ObjectId()}").status_code == 404
    assert web.get(f"/jobs/{ObjectId()}/live").status_code == 404
    assert web.get("/jobs/not-a-job-id").status_code == 404
    assert web.get(f"/jobs?q={ObjectId()}").status_code == 404
    assert snapshot(db) == before


@pytest.mark.parametrize("query", ["limit=101", "limit=1000000", "limit=0", "limit=-1", "limit=abc",
                                   "state=bogus", "limit=5&limit=6", "after=garbage", "group=" + "g" * 301,
                                   "class=NoColon", "why=done&state=queued"])
def test_a_bad_listing_is_400(web: TestClient, db: Any, seeded: dict[str, Any], query: str) -> None:
    before = snapshot(db)
    assert web.get(f"/jobs?{query}").status_code == 400
    assert snapshot(db) == before


def test_an_oversized_query_string_is_414(web: TestClient, db: Any, seeded: dict[str, Any]) -> None:
    before = snapshot(db)
    assert web.get("/jobs?group=" + "x" * 3000).status_code == 414
    assert web.get("/?" + "a=1&" * 1000).status_code == 414
    assert snapshot(db) == before


def test_a_post_without_or_with_a_forged_csrf_token_is_403(web: TestClient, db: Any,
                                                            seeded: dict[str, Any]) -> None:
    failed_id = str(seeded["failed"][0]["_id"])
    good = csrf_of(web)
    session = web.cookies.get(SESSION_COOKIE)
    forged = "AAAA" + good[4:]
    other_process = Csrf()
    other_session = Csrf.new_session()
    before = snapshot(db)
    attempts: list[tuple[str | None, str | None]] = [
        (None, None), (session, None), (None, good), (session, forged), (session, other_process.token(session)),
        (other_session, good), (session, session), ("", ""), ("x" * 500, "x" * 500)]
    for cookie, field in attempts:
        web.cookies.clear()
        if cookie is not None:
            web.cookies.set(SESSION_COOKIE, cookie)
        data = {"id": failed_id} | ({"csrf": field} if field is not None else {})
        assert web.post("/actions/retry", data=data, follow_redirects=False).status_code == 403, (cookie, field)
        data = {"kind": "group", "name": "mail"} | ({"csrf": field} if field is not None else {})
        assert web.post("/actions/pause", data=data, follow_redirects=False).status_code == 403
    assert snapshot(db) == before


def test_an_action_with_its_token_acts_and_is_audited(web: TestClient, db: Any, seeded: dict[str, Any]) -> None:
    failed_id = str(seeded["failed"][0]["_id"])
    token = csrf_of(web, f"/jobs/{failed_id}")
    response = web.post("/actions/retry", data={"id": failed_id, "csrf": token}, follow_redirects=False)
    assert response.status_code == 303
    retried = db.scheduled.find_one({"retry_of": seeded["failed"][0]["_id"]})
    assert retried is not None
    assert response.headers["location"] == f"/jobs/{retried['_id']}"
    assert "retried as" in web.get(response.headers["location"]).text  # the flash message
    response = web.post("/actions/pause", data={"kind": "group", "name": "mail", "csrf": token},
                        headers={"HX-Request": "true"}, follow_redirects=False)
    assert response.status_code == 200
    assert response.headers["hx-redirect"] == "/switches"
    assert Admin(db).paused().groups == ("mail",)
    assert 'class="paused-name">group <strong>mail</strong> paused' in web.get("/overview/live").text
    entries = list(db.audit.find().sort("at", 1))
    assert [(e["action"], e["target"], e["who"], e["client"]) for e in entries] == [
        ("retry", failed_id, "anonymous", "testclient"), ("pause-group", "mail", "anonymous", "testclient")]
    assert all(isinstance(e["at"], datetime) for e in entries)
    assert {i["name"]: dict(i["key"]) for i in db.audit.list_indexes()}["newest"] == {"at": -1}
    assert "pause-group" in web.get("/audit").text


def test_a_refused_action_changes_nothing(web: TestClient, db: Any, seeded: dict[str, Any]) -> None:
    token = csrf_of(web)
    before = snapshot(db)
    refused: list[tuple[str, dict[str, Any]]] = [
        ("/actions/retry", {"id": str(seeded["queued"]["_id"])}),  # not archived: RetryRefusedAll
        ("/actions/retry", {"id": "nope"}),
        ("/actions/retry", {}),
        ("/actions/pause", {"kind": "group", "name": "never-used"}),  # UnusedNames without force
        ("/actions/pause", {"kind": "planet", "name": "mail"}),
        ("/actions/schedule", {"op": "run-now", "name": "no-such-schedule"}),
        ("/actions/schedule", {"op": "explode", "name": "x"}),
        ("/actions/stop-worker", {"worker": "no-such-worker"}),
        ("/actions/retry", {"id": [str(ObjectId()) for _ in range(1001)]}),
    ]
    for path, data in refused:
        response = web.post(path, data={**data, "csrf": token}, follow_redirects=False)
        assert response.status_code == 400, (path, data, response.status_code)
    assert snapshot(db) == before


def test_a_large_body_is_refused(web: TestClient, db: Any, seeded: dict[str, Any]) -> None:
    token = csrf_of(web)
    before = snapshot(db)
    response = web.post("/actions/pause", data={"kind": "group", "name": "x" * 70_000, "csrf": token})
    assert response.status_code == 413
    assert snapshot(db) == before


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_a_wrong_token_or_password_is_401(store_db: Any, db: Any, seeded: dict[str, Any]) -> None:
    before = snapshot(db)
    with client_of(store_db, access=Access(token=TOKEN)) as c:
        assert c.get("/").status_code == 401
        assert c.get("/", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert c.get("/", headers=basic("anyone", "nope")).status_code == 401
        assert c.post("/actions/pause", data={"kind": "group", "name": "mail"}).status_code == 401
        assert c.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert c.get("/jobs", headers=basic("ops", TOKEN)).status_code == 200
        assert "www-authenticate" in c.get("/").headers
    with client_of(store_db, access=Access(user="ops", password="pa55")) as c:
        assert c.get("/", headers=basic("ops", "wrong")).status_code == 401
        assert c.get("/", headers=basic("intruder", "pa55")).status_code == 401
        assert c.get("/", headers={"Authorization": "Basic !!!"}).status_code == 401
        assert c.get("/", headers={"Authorization": "Bearer pa55"}).status_code == 401
        page = c.get("/", headers=basic("ops", "pa55"))
        assert page.status_code == 200
        assert "pa55" not in page.text
    assert snapshot(db) == before


def test_read_only_offers_no_action(store_db: Any, db: Any, seeded: dict[str, Any]) -> None:
    failed_id = str(seeded["failed"][0]["_id"])
    before = snapshot(db)
    with client_of(store_db, read_only=True) as c:
        for path in ("/", "/jobs", f"/jobs/{failed_id}", "/failures", "/workers", "/schedules", "/switches",
                     "/workflows"):
            text = c.get(path).text
            assert 'method="post"' not in text, path
            assert "hx-post" not in text, path
        session = Csrf.new_session()
        token = Csrf().token(session)
        c.cookies.set(SESSION_COOKIE, session)
        refused = c.post("/actions/retry", data={"id": failed_id, "csrf": token})
        assert refused.status_code == 403
        assert "read-only" in refused.text
    assert snapshot(db) == before
    assert "audit" not in db.list_collection_names()


def test_the_overview_is_read_once_per_period_whatever_the_tabs(store_db: Any, seeded: dict[str, Any]) -> None:
    app = create_app(store_db, Settings(refresh_s=60))
    with TestClient(app, base_url="http://127.0.0.1") as c:
        for _ in range(10):
            assert c.get("/overview/live").status_code == 200
            assert c.get("/").status_code == 200
    assert app.state.dashboard.stats.loads == 1


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "recruiter.cli", "dashboard", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "example.com"])
def test_binding_beyond_localhost_without_auth_is_refused(host: str) -> None:
    done = run_cli("--host", host, "--target", "mongodb://127.0.0.1:1/x")
    assert done.returncode == 2
    assert f"--host {host} serves beyond this machine" in done.stderr
    assert len([line for line in done.stderr.splitlines() if line.startswith("Error")]) == 1


def test_the_uri_password_never_shows_in_an_error() -> None:
    done = run_cli("--target", "mongodb://ops:s3cr3t-pw@127.0.0.1:1/x", "--port", "0")
    assert done.returncode == 1
    assert "s3cr3t-pw" not in done.stderr + done.stdout
    assert "127.0.0.1:1" in done.stderr


def test_the_database_label_hides_the_uri_password(store_db: Any, seeded: dict[str, Any]) -> None:
    label = parse_target("mongodb://ops:s3cr3t-pw@db.example:27017/recruiter").display
    with client_of(store_db, database=label, hidden=("s3cr3t-pw",)) as c:
        for path in ("/", "/jobs", "/failures", "/audit", f"/jobs/{ObjectId()}"):
            text = c.get(path).text
            assert "db.example" in text
            assert "s3cr3t-pw" not in text


def test_the_charts_draw_one_point_per_read(store_db: Any, seeded: dict[str, Any]) -> None:
    app = create_app(store_db, Settings(refresh_s=0.0))
    with TestClient(app, base_url="http://127.0.0.1") as c:
        assert "the charts fill in" in c.get("/overview/live").text
        for _ in range(3):
            app.state.dashboard.stats.invalidate()  # the next request reads the figures again
            page = c.get("/overview/live").text
    assert app.state.dashboard.stats.loads == 4
    ready = re.search(r'aria-label="ready jobs"><polyline points="([^"]*)"', page)
    assert ready, "no chart of the ready jobs"
    assert len(ready.group(1).split(" ")) == 4  # the one queued job, read four times: a flat line
    assert len({p.split(",")[1] for p in ready.group(1).split(" ")}) == 1
    assert "ready jobs: <strong>1</strong>" in page


def test_sparkline_scales_to_the_highest_value() -> None:
    from recruiter.web.views import sparkline

    assert sparkline([]) == ""
    assert sparkline([None, None]) == ""
    assert sparkline([0, 10], width=100, height=12) == "0.0,11.0 100.0,1.0"
    assert sparkline([5, None, 5], width=10, height=12) == "0.0,1.0 10.0,1.0"


def test_without_the_extra_the_command_says_what_to_install() -> None:
    code = ("import sys; sys.modules['uvicorn'] = None\n"
            "from recruiter.cli.main import main\nmain(['dashboard'], prog_name='recruiter')")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == "Error: the dashboard needs its extra: pip install 'recruiter[dashboard]'"


def test_the_switches_page_shows_the_flow_control_limits(web: TestClient, store_db: Any,
                                                         seeded: dict[str, Any]) -> None:
    assert "no limit set" in web.get("/switches").text
    Admin(store_db).set_limit("mail", max_running=2)
    page = web.get("/switches").text
    row = re.search(r'<table id="limits">.*?</table>', page, flags=re.S)
    assert row, "no limits table"
    assert "mail" in row.group(0)
    assert "(whole group)" in row.group(0)
    assert "2" in row.group(0)


def test_every_page_renders_over_malformed_documents(web: TestClient, db: Any, seeded: dict[str, Any]) -> None:
    """Roster entries, job statuses and archived reasons of any type (hand edits, other languages) are
    shown as malformed or as text; no page fails, and a malformed entry offers no Stop button."""
    db.roster.insert_many([{"_id": {"a": 1}, "work_on": ["mail"], "available": True},
                           {"_id": "w-null-group", "work_on": ["mail", None], "available": True},
                           {"_id": "w-text-assigned", "work_on": ["mail"], "assigned_to": "x", "available": False}])
    db.scheduled.insert_one({"status": {"odd": 1}, "group": ["mail"]}, bypass_document_validation=True)
    db.archived.insert_one({"why": ["odd"], "archived_at": "yesterday"}, bypass_document_validation=True)
    for path in ("/", "/overview/live", "/jobs", "/failures", "/workers", "/schedules", "/switches", "/audit",
                 "/workflows"):
        response = web.get(path)
        assert response.status_code == 200, (path, response.text[:300])
    workers = web.get("/workers").text
    assert "malformed: work_on.1: expected a non-empty string, got null" in workers
    assert 'value="w-null-group"' not in workers  # no Stop form names it


def test_a_result_that_was_not_kept_says_why_on_the_job_page(web: TestClient, db: Any, db_uri: str) -> None:
    """Issue 39: a done job whose value was too big to keep showed no result and no word of it."""
    now = datetime.now(UTC).replace(microsecond=0)
    done = {**failed_job(db_uri, 7, now), "why": "done",
            "result_dropped": {"reason": "the result is 2097152 bytes; at most 1048576 are kept",
                               "size_bytes": 2097152}}
    odd = {**failed_job(db_uri, 8, now), "why": "done", "result_dropped": ["not", "a", "document"]}
    db.archived.insert_many([done, odd])
    page = web.get(f"/jobs/{done['_id']}")
    assert page.status_code == 200
    shown = re.search(r'<td id="job-result-dropped"[^>]*>(.*?)</td>', page.text, re.S)
    assert shown, page.text
    assert "not kept: the result is 2097152 bytes; at most 1048576 are kept (2097152 bytes)" in shown.group(1)
    page = web.get(f"/jobs/{odd['_id']}")  # a hand-written value: shown as text, never a failure
    assert page.status_code == 200
    assert 'id="job-result-dropped"' in page.text
