"""The dashboard's workflow pages and actions over HTTP (starlette's TestClient) against a real server.

The list shows each workflow with its counts under a per-name summary; a workflow's page
shows every step in dependency order with its state and its deps' states; cancel and retry
call what ``recruiter workflows cancel|retry`` call and say what happened to the steps,
audited, refused without their CSRF token and absent read-only; stored text is shown
escaped, a malformed step is shown as malformed, and an unknown id is a 404.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId
from starlette.testclient import TestClient

from recruiter import Recruiter, Workflow
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.web import Csrf
from recruiter.web.security import SESSION_COOKIE
from recruiter.web.workflow_pages import STEPS_SHOWN
from tests.web.test_dashboard_actions import form_of, post
from tests.web.test_dashboard_http import client_of, snapshot, store_db  # noqa: F401
from tests.web.test_dashboard_rebinding import HOSTILE, RAW
from tests.workables import Record

SCRIPT = "<script>alert(1)</script>"


@pytest.fixture
def web(store_db: Any) -> Iterator[TestClient]:  # noqa: F811
    with client_of(store_db) as c:
        yield c


def report(db_uri: str, name: str = "monthly-report") -> dict[str, ObjectId]:
    """fetch, then part-1 and part-2 (each waiting for fetch), then total (waiting for both parts)."""
    wf = Workflow(name)
    wf.step("fetch", Record(db_uri, n=1))
    parts = wf.fan_out("part", [Record(db_uri, n=10), Record(db_uri, n=20)], deps=["fetch"])
    wf.step("total", Record(db_uri, n=30), deps=parts)
    with Recruiter.connect(db_uri) as rec:
        run = wf.enqueue(rec)
    return {"workflow": run.id, **{step: handle.id for step, handle in run.handles.items()}}


def archive(db: Any, job_id: ObjectId, why: str, attempts: int = 1, **fields: Any) -> None:
    """Move a step's job to ``archived`` as ended ``why`` (what the leader would have written)."""
    doc = db.scheduled.find_one_and_delete({"_id": job_id})
    doc.pop("status", None)
    db.archived.insert_one({**doc, "why": why, "done": why == "done", "attempts": attempts, "locked": False,
                            "archived_at": datetime.now(UTC), **fields})


def row_of(html: str, needle: str) -> str:
    """The table row holding ``needle``."""
    found = [r for r in re.findall(r"<tr[ >].*?</tr>", html, re.S) if needle in r]
    assert found, needle
    return found[0]


def cells(row: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


def test_the_list_shows_each_workflow_with_its_counts_under_a_summary_per_name(web: TestClient, db: Any,
                                                                              db_uri: str) -> None:
    first = report(db_uri)
    second = report(db_uri)
    other = report(db_uri, "nightly")
    archive(db, first["fetch"], "done")
    archive(db, second["fetch"], "tried-too-many-times", 3)
    page = web.get("/workflows")
    assert page.status_code == 200
    assert '<a href="/workflows" class="current" aria-current="page">Workflows</a>' in page.text
    row = row_of(page.text, f'href="/workflows/{first["workflow"]}"')
    assert cells(row)[:7] == ["monthly-report", str(first["workflow"]), "workflow", "running", "1", "0", "3"]
    assert cells(row_of(page.text, f'href="/workflows/{second["workflow"]}"'))[3:7] == ["running", "0", "1", "3"]
    # Newest first: the ids are in the order the workflows were written, the newest on top.
    shown = re.findall(r'<a href="/workflows/([0-9a-f]{24})">', page.text)
    assert shown == [str(other["workflow"]), str(second["workflow"]), str(first["workflow"])]
    names = re.search(r'<table id="workflow-names">.*?</table>', page.text, re.S)
    assert names is not None
    assert cells(row_of(names.group(0), ">monthly-report<")) == ["monthly-report", "2", "2", "0", "0", "1", "1", "6"]
    assert cells(row_of(names.group(0), ">nightly<")) == ["nightly", "1", "1", "0", "0", "0", "0", "4"]
    assert "3 workflows." in page.text
    # Cut to what was asked: the total says how many there are.
    cut = web.get("/workflows?limit=2").text
    assert re.findall(r'<a href="/workflows/([0-9a-f]{24})">', cut) == [str(other["workflow"]),
                                                                      str(second["workflow"])]
    assert "The newest 2 of 3 workflows." in cut
    named = web.get("/workflows?name=nightly").text
    assert re.findall(r'<a href="/workflows/([0-9a-f]{24})">', named) == [str(other["workflow"])]
    assert "Workflows named nightly" in named
    for bad in ("limit=0", "limit=101", "limit=x", "name=a&name=b"):
        assert web.get(f"/workflows?{bad}").status_code == 400, bad


def test_a_workflows_page_shows_every_step_in_order_with_its_state_and_what_it_waits_for(
        web: TestClient, db: Any, db_uri: str) -> None:
    ids = report(db_uri)
    archive(db, ids["fetch"], "done", attempts=2)
    page = web.get(f"/workflows/{ids['workflow']}")
    assert page.status_code == 200
    html = page.text
    assert "Workflow monthly-report" in html
    assert "running</strong>: 1 done, 0 failed, 3 pending of 4 steps" in html
    steps = re.search(r'<table id="steps">.*?</table>', html, re.S)
    assert steps is not None
    rows = re.findall(r'<tr class="step">.*?</tr>', steps.group(0), re.S)
    assert [cells(r)[0].removeprefix("└ ") for r in rows] == ["fetch", "part-1", "part-2", "total"]
    by = {cells(r)[0].removeprefix("└ "): (r, cells(r)) for r in rows}
    assert by["fetch"][1][1:5] == ["done", str(ids["fetch"]), "-", "2"]
    assert by["part-1"][1][1:4] == ["waiting", str(ids["part-1"]), "fetch (done)"]
    assert by["total"][1][1:4] == ["waiting", str(ids["total"]), "part-1 (waiting), part-2 (waiting)"]
    for step in ("fetch", "part-1", "part-2", "total"):
        assert f'<a href="/jobs/{ids[step]}">' in by[step][0]  # each step links its job's page
    assert by["total"][0].count('class="indent"') == 2  # under the parts, under fetch
    assert 'action="/actions/workflow-cancel"' in html
    assert 'action="/actions/workflow-retry"' not in html  # nothing failed


@pytest.mark.parametrize("path", ["/workflows/6b0bf47078cbb879ea1d268c", "/workflows/not-a-workflow-id",
                                  "/workflows/" + "z" * 24, "/workflows/" + "a" * 500])
def test_an_unknown_or_malformed_workflow_id_is_404(web: TestClient, db: Any, db_uri: str, path: str) -> None:
    report(db_uri)
    page = web.get(path)
    assert page.status_code == 404
    assert "no workflow" in page.text
    assert page.headers["x-frame-options"] == "DENY"


def test_cancel_says_how_many_steps_were_cancelled_halted_or_had_ended_and_is_audited(
        web: TestClient, db: Any, db_uri: str) -> None:
    ids = report(db_uri)
    archive(db, ids["part-2"], "done")
    # fetch is held by a worker: its cancel asks the worker to halt it.
    db.scheduled.update_one({"_id": ids["fetch"]}, {"$set": {
        "status": "assigned", "locked": True, "locked_by": "w1", "lock_token": ObjectId(),
        "locked_at": datetime.now(UTC), "lock_epoch": 1}})
    wid = ids["workflow"]
    fields = form_of(web.get(f"/workflows/{wid}").text, "/actions/workflow-cancel")
    assert ("workflow", str(wid)) in fields
    status, text = post(web, "/actions/workflow-cancel", fields)
    assert status == 303
    summary = ("2 steps cancelled (waiting in the queue): part-1, total; "
               "1 step cancelled, halted by the worker that had it at its next heartbeat: fetch; "
               "1 step already ended, left as they were: part-2")
    assert text == f"cancel-workflow {wid}: {summary}"
    assert db.scheduled.count_documents({}) == 0
    assert {d["workflow"]["step"]: d["why"] for d in db.archived.find()} == {
        "fetch": "cancelled", "part-1": "cancelled", "part-2": "done", "total": "cancelled"}
    [entry] = db.audit.find()
    assert (entry["action"], entry["target"], entry["outcome"]) == ("cancel-workflow", str(wid), summary)
    page = web.get(f"/workflows/{wid}").text
    assert "Cancel workflow" not in page
    # The same form again: every step had ended, and it says so.
    assert post(web, "/actions/workflow-cancel", fields)[1] == (
        f"cancel-workflow {wid}: 4 steps already ended, left as they were: fetch, part-1, part-2, total")


def test_retry_retries_the_failed_steps_and_says_so_then_refuses_with_nothing_failed(
        web: TestClient, db: Any, db_uri: str) -> None:
    ids = report(db_uri)
    wid = ids["workflow"]
    archive(db, ids["fetch"], "tried-too-many-times", attempts=3, reason="boom")
    for step in ("part-1", "part-2", "total"):
        archive(db, ids[step], "upstream-failed", attempts=0)
    html = web.get(f"/workflows/{wid}").text
    fetch_row = row_of(html, f'href="/jobs/{ids["fetch"]}"')
    assert cells(fetch_row)[1:5] == ["tried-too-many-times: boom", str(ids["fetch"]), "-", "3"]
    assert html.count('action="/actions/workflow-retry"') == 5  # the whole workflow's, and each failed step's
    assert 'action="/actions/workflow-cancel"' not in html  # every step has ended
    fields = form_of(html, "/actions/workflow-retry")
    assert ("step", "fetch") not in fields
    status, text = post(web, "/actions/workflow-retry", fields)
    assert status == 303
    assert text == f"retry-workflow {wid}: 4 steps retried as new jobs: fetch, part-1, part-2, total"
    copies = {d["workflow"]["step"]: d for d in db.scheduled.find()}
    assert {s: d["retry_of"] for s, d in copies.items()} == {s: ids[s] for s in ("fetch", "part-1", "part-2",
                                                                                  "total")}
    page = web.get(f"/workflows/{wid}").text
    row = row_of(page, f'href="/jobs/{copies["fetch"]["_id"]}"')
    assert cells(row)[1] == "queued"
    assert f'retry of <a href="/jobs/{ids["fetch"]}">' in row
    # The same form again: nothing has failed any more; refused, and why, with nothing changed.
    before = snapshot(db)
    status, text = post(web, "/actions/workflow-retry", fields)
    assert status == 400
    assert f"workflow {wid} has no failed step; nothing changed" in text
    status, text = post(web, "/actions/workflow-retry", [*fields, ("step", "nope")])
    assert status == 400
    assert f"workflow {wid} has no step &#39;nope&#39;; nothing changed" in text
    assert snapshot(db) == before
    assert [e["action"] for e in db.audit.find()] == ["retry-workflow"]


def test_retry_of_one_step_retries_it_and_what_did_not_end_done_after_it(web: TestClient, db: Any,
                                                                         db_uri: str) -> None:
    ids = report(db_uri)
    wid = ids["workflow"]
    archive(db, ids["fetch"], "done")
    archive(db, ids["part-1"], "done")
    archive(db, ids["part-2"], "crashed")
    archive(db, ids["total"], "upstream-failed", attempts=0)
    html = web.get(f"/workflows/{wid}").text
    step_form = re.search(r'<form method="post" action="/actions/workflow-retry"[^>]*>(?:(?!</form>).)*'
                          r'name="step" value="part-2".*?</form>', html, re.S)
    assert step_form is not None
    fields = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', step_form.group(0))
    status, text = post(web, "/actions/workflow-retry", fields)
    assert status == 303
    assert text == (f"retry-workflow {wid} step part-2: 2 steps retried as new jobs: part-2, total; "
                    "2 steps kept as they were: fetch, part-1")


def test_an_action_without_its_csrf_token_or_read_only_changes_nothing(store_db: Any, db: Any,  # noqa: F811
                                                                       db_uri: str) -> None:
    ids = report(db_uri)
    wid = str(ids["workflow"])
    before = snapshot(db)
    with client_of(store_db) as web:
        web.get(f"/workflows/{wid}")  # a session
        for path in ("/actions/workflow-cancel", "/actions/workflow-retry"):
            for data in ({"workflow": wid}, {"workflow": wid, "csrf": "forged"}):
                response = web.post(path, data=data, follow_redirects=False)
                assert response.status_code == 403, (path, data)
                assert "CSRF token" in response.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', web.get(f"/workflows/{wid}").text)
        assert csrf is not None
        response = web.post("/actions/workflow-cancel", data={"workflow": "not-an-id", "csrf": csrf.group(1)},
                            follow_redirects=False)
        assert response.status_code == 400
        assert "workflow is missing or not a workflow id" in response.text
    assert snapshot(db) == before
    with client_of(store_db, read_only=True) as web:
        page = web.get(f"/workflows/{wid}").text
        assert "4 pending of 4 steps" in page
        assert 'method="post"' not in page
        assert "hx-post" not in page
        session = Csrf.new_session()
        web.cookies.set(SESSION_COOKIE, session)
        token = Csrf().token(session)
        for path in ("/actions/workflow-cancel", "/actions/workflow-retry"):
            response = web.post(path, data={"workflow": wid, "csrf": token}, follow_redirects=False)
            assert response.status_code == 403
            assert "read-only" in response.text
    assert snapshot(db) == before


def step_document(db_uri: str, wid: ObjectId, step: Any, deps: list[Any], name: Any = "hand-made",
                  **fields: Any) -> dict[str, Any]:
    """A job of workflow ``wid`` written by hand (another language, an edit in mongosh)."""
    doc = dict(build_job_document(Record(db_uri, n=5), JobOptions(), datetime.now(UTC) - timedelta(minutes=1)))
    doc["workflow"] = {"id": wid, "name": name, "step": step, "deps": deps, "kind": "workflow"}
    return {**doc, **fields}


def test_stored_text_is_shown_escaped_and_a_malformed_step_is_shown_as_malformed(web: TestClient, db: Any,
                                                                                 db_uri: str) -> None:
    wid, hostile_list = ObjectId(), ObjectId()
    failed = step_document(db_uri, wid, "a", [], why="tried-too-many-times", attempts=2,
                           reason=f"{SCRIPT} {HOSTILE}", archived_at=datetime.now(UTC), done=False)
    failed.pop("status")
    waiting = step_document(db_uri, wid, "b", ["a", "<img src=x onerror=alert(2)>"], attempts="many")
    odd = step_document(db_uri, wid, "c", [], why=["odd"], reason={"$x": 1}, attempts=-1, done=False)
    odd.pop("status")
    aside = step_document(db_uri, wid, SCRIPT, [], _id="<b>not-an-id</b>")
    db.archived.insert_many([failed, odd], bypass_document_validation=True)
    db.scheduled.insert_many([waiting, aside, step_document(db_uri, hostile_list, "x", [], name=SCRIPT)],
                             bypass_document_validation=True)
    listing = web.get("/workflows")
    assert listing.status_code == 200
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in listing.text  # the name, as stored, escaped
    page = web.get(f"/workflows/{wid}")
    assert page.status_code == 200
    html = page.text
    for text in (listing.text, html):
        assert "<script>alert" not in text
        assert "<img src=x" not in text
        assert "<b>not-an-id" not in text
        assert not [c for c in RAW if c in text]
    assert "tried-too-many-times: &lt;script&gt;alert(1)&lt;/script&gt; abc\\u202eexe" in html
    assert "&lt;img src=x onerror=alert(2)&gt; (unknown)" in html
    b_row = row_of(html, f'href="/jobs/{waiting["_id"]}"')
    assert "malformed: attempts: not a whole number" in b_row
    c_row = row_of(html, f'href="/jobs/{odd["_id"]}"')
    assert cells(c_row)[1] == ("archived malformed: attempts: not a whole number; why: not a text; "
                               "reason: not a text")
    aside_table = re.search(r'<table id="set-aside">.*?</table>', html, re.S)
    assert aside_table is not None
    assert cells(aside_table.group(0)) == ["&lt;b&gt;not-an-id&lt;/b&gt;", "workflow.step: not a name"]
    assert "/jobs/&lt;b&gt;" not in html  # an id that is not one links nowhere


def test_a_job_of_a_workflow_links_its_workflow_page(web: TestClient, db: Any, db_uri: str) -> None:
    ids = report(db_uri)
    page = web.get(f"/jobs/{ids['part-1']}").text
    assert (f'<p id="job-workflow">Step <strong>part-1</strong> of workflow '
            f'<a href="/workflows/{ids["workflow"]}">monthly-report</a></p>') in page
    db.scheduled.update_one({"_id": ids["total"]}, {"$set": {"workflow.step": SCRIPT}},
                            bypass_document_validation=True)
    odd = web.get(f"/jobs/{ids['total']}").text
    assert "Its workflow field is malformed: workflow.step: not a name" in odd
    assert "<script>alert" not in odd
    plain = dict(build_job_document(Record(db_uri, n=1), JobOptions(), datetime.now(UTC)))
    db.scheduled.insert_one(plain)
    assert 'id="job-workflow"' not in web.get(f"/jobs/{plain['_id']}").text


def test_a_long_workflow_shows_its_first_steps_and_says_it_is_cut(web: TestClient, db: Any, db_uri: str) -> None:
    wid = ObjectId()
    docs = [step_document(db_uri, wid, f"s{k}", [f"s{k - 1}"] if k else []) for k in range(STEPS_SHOWN + 3)]
    db.scheduled.insert_many(docs)
    html = web.get(f"/workflows/{wid}").text
    assert html.count('<tr class="step">') == STEPS_SHOWN
    assert f"The first {STEPS_SHOWN} of {STEPS_SHOWN + 3} steps, in dependency order" in html
    assert html.count('class="indent"') <= STEPS_SHOWN * 20  # the tree's depth is bounded
