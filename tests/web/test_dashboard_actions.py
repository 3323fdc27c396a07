"""The dashboard's job actions over HTTP (starlette's TestClient) against a real server: a double-submitted
retry makes no second copy, lists select rows or everything matching their filters, retry now and delete
act once and say so the second time, each action is audited, and none exists read-only."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from bson import ObjectId
from starlette.testclient import TestClient

from recruiter.domain.job import JobOptions, build_job_document
from recruiter.store import ensure_indexes_sync, parse_target, sync_client
from recruiter.web import Settings, create_app
from recruiter.web.app import FLASH_COOKIE
from tests.web.test_dashboard_http import failed_job
from tests.workables import Record


@pytest.fixture
def store_db(db_uri: str) -> Iterator[Any]:
    target = parse_target(db_uri)
    client = sync_client(target, app_name="test-dashboard-actions")
    ensure_indexes_sync(client[target.database])
    yield client[target.database]
    client.close()


@pytest.fixture
def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def seeded(db: Any, db_uri: str, now: datetime) -> dict[str, Any]:
    failed = [failed_job(db_uri, i, now) for i in range(1, 4)]
    queued = [dict(build_job_document(Record(db_uri, n=90 + i), JobOptions(group="mail"), now)) for i in range(2)]
    backoff = {**build_job_document(Record(db_uri, n=80), JobOptions(group="mail"), now - timedelta(minutes=1)),
               "status": "retrying", "attempts": 1, "scheduled_at": now + timedelta(hours=1)}
    running = {**build_job_document(Record(db_uri, n=70), JobOptions(group="mail"), now),
               "status": "assigned", "locked": True, "locked_by": "w1", "lock_token": ObjectId(),
               "locked_at": now, "lock_epoch": 1}
    db.archived.insert_many(failed)
    db.scheduled.insert_many([*queued, backoff, running])
    return {"failed": failed, "queued": queued, "backoff": backoff, "running": running}


def client_of(store_db: Any, **settings: Any) -> TestClient:
    return TestClient(create_app(store_db, Settings(**settings)), base_url="http://127.0.0.1")


@pytest.fixture
def web(store_db: Any) -> Iterator[TestClient]:
    with client_of(store_db) as c:
        yield c


def form_of(html: str, action: str) -> list[tuple[str, str]]:
    """The hidden fields of the first form posting to ``action`` on the page."""
    found = re.search(rf'<form method="post" action="{re.escape(action)}".*?</form>', html, re.S)
    assert found is not None, action
    return re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', found.group(0))


def post(web: TestClient, path: str, fields: list[tuple[str, str]]) -> tuple[int, str]:
    """Post the form; the status and the message the next page shows (the flash cookie)."""
    response = web.post(path, content=urlencode(fields).encode(), follow_redirects=False,
                        headers={"content-type": "application/x-www-form-urlencoded"})
    flash = response.cookies.get(FLASH_COOKIE)
    text = json.loads(base64.urlsafe_b64decode(flash.encode())) if flash else response.text
    return response.status_code, text


def token_of(web: TestClient) -> tuple[str, str]:
    page = web.get("/jobs").text
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None
    return ("csrf", found.group(1))


def test_a_double_submitted_group_retry_makes_no_second_copy(web: TestClient, db: Any,
                                                               seeded: dict[str, Any]) -> None:
    fields = form_of(web.get("/failures").text, "/actions/retry")
    ids = {v for k, v in fields if k == "id"}
    assert ids == {str(d["_id"]) for d in seeded["failed"]}
    first = post(web, "/actions/retry", fields)
    second = post(web, "/actions/retry", fields)  # the same form, submitted again
    assert db.scheduled.count_documents({"retry_of": {"$exists": True}}) == 3
    assert first[0] == second[0] == 303
    assert first[1].startswith("retry 3 jobs")
    assert ": retried 3" in first[1]
    assert ": retried 0, 3 already retried" in second[1]
    page = web.get("/failures").text
    assert "Retry 3 archived" not in page
    assert "3 archived already retried" in page
    assert page.count('class="retried-as"') == 3
    # One job's page names its copy and offers no second retry; the copy names its original.
    original = seeded["failed"][0]["_id"]
    copy = db.scheduled.find_one({"retry_of": original})["_id"]
    shown = web.get(f"/jobs/{original}").text
    assert f'retried as <a href="/jobs/{copy}">' in shown
    assert 'action="/actions/retry"' not in shown
    assert f'<a href="/jobs/{original}">{original}</a>' in web.get(f"/jobs/{copy}").text
    status, text = post(web, "/actions/retry", [("id", str(original)), ("back", f"/jobs/{original}"),
                                                token_of(web)])
    assert (status, text) == (303, f"retry {original}: already retried as {copy}")
    assert [e["outcome"] for e in db.audit.find().sort("at", 1)][-1] == f"already retried as {copy}"


def test_a_list_selects_rows_or_everything_matching(web: TestClient, db: Any, seeded: dict[str, Any]) -> None:
    page = web.get("/jobs?state=queued").text
    assert page.count('class="select-job"') == 2
    assert 'name="all" value="matching"' in page
    token = token_of(web)
    queued = [str(d["_id"]) for d in seeded["queued"]]
    status, text = post(web, "/actions/cancel", [("id", queued[0]), ("back", "/jobs?state=queued"), token])
    assert (status, text) == (303, f"cancel {queued[0]}: cancelled (it was waiting in the queue)")
    matching = [("all", "matching"), ("state", "queued"), ("state", "retrying"), ("group", "mail"), token]
    status, text = post(web, "/actions/delete", matching)
    assert status == 303
    assert "2 jobs matching state=queued,retrying group=mail" in text
    assert "2 deleted" in text
    assert {d["why"] for d in db.archived.find({"why": {"$ne": "tried-too-many-times"}})} == {"cancelled", "deleted"}
    status, text = post(web, "/actions/delete", matching)  # again: nothing left to delete
    assert status == 400
    assert "no job matches state=queued,retrying group=mail; nothing done" in text
    status, text = post(web, "/actions/retry", [("all", "matching"), ("why", "tried-too-many-times"), token])
    assert status == 303
    assert "retried 3" in text
    status, text = post(web, "/actions/retry", [("all", "matching"), ("why", "tried-too-many-times"), token])
    assert status == 303
    assert "retried 0, 3 already retried" in text
    assert db.scheduled.count_documents({"retry_of": {"$exists": True}}) == 3
    status, text = post(web, "/actions/retry", [("all", "matching"), ("state", "queued"), token])
    assert status == 400
    assert "can take this action (it takes archived)" in text


def test_retry_now_and_delete_act_once_and_say_so(web: TestClient, db: Any, seeded: dict[str, Any]) -> None:
    backoff, running = seeded["backoff"]["_id"], seeded["running"]["_id"]
    page = web.get(f"/jobs/{backoff}").text
    assert 'action="/actions/retry-now"' in page
    assert 'action="/actions/delete"' in page
    fields = form_of(page, "/actions/retry-now")
    assert post(web, "/actions/retry-now", fields) == (303, f"retry-now {backoff}: {backoff}: retrying now "
                                                            "(its backoff ended)")
    status, text = post(web, "/actions/retry-now", fields)
    assert status == 303
    assert "already due" in text
    assert "nothing changed" in text
    assert 'action="/actions/retry-now"' not in web.get(f"/jobs/{backoff}").text
    shown = web.get(f"/jobs/{running}").text
    assert 'action="/actions/delete"' not in shown
    assert 'action="/actions/cancel"' in shown
    before = db.scheduled.find_one({"_id": running})
    status, text = post(web, "/actions/delete", [("id", str(running)), token_of(web)])
    assert status == 303
    assert "refused: worker w1 holds it" in text
    assert db.scheduled.find_one({"_id": running}) == before
    fields = form_of(web.get(f"/jobs/{backoff}").text, "/actions/delete")
    assert post(web, "/actions/delete", fields)[1].endswith("deleted (archived as deleted, it never runs)")
    assert post(web, "/actions/delete", fields)[1].endswith("already archived (deleted): nothing changed")
    assert db.archived.find_one({"_id": backoff})["delete_reason"] == "deleted from the dashboard"
    assert [e["action"] for e in db.audit.find().sort("at", 1)] == ["retry-now", "retry-now", "delete", "delete",
                                                                    "delete"]


def test_read_only_offers_and_takes_no_job_action(store_db: Any, db: Any, seeded: dict[str, Any]) -> None:
    with client_of(store_db, read_only=True) as web:
        backoff = seeded["backoff"]["_id"]
        assert "select-job" not in web.get("/jobs").text
        page = web.get(f"/jobs/{backoff}").text
        assert "/actions/retry-now" not in page
        assert "/actions/delete" not in page
        before = list(db.scheduled.find(sort=[("_id", 1)]))
        for path in ("/actions/retry-now", "/actions/delete", "/actions/retry", "/actions/cancel"):
            response = web.post(path, data={"id": str(backoff), "all": "matching"}, follow_redirects=False)
            assert response.status_code == 403
        assert list(db.scheduled.find(sort=[("_id", 1)])) == before
        assert db.archived.count_documents({"why": "deleted"}) == 0
