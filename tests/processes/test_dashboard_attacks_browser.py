"""Issue 39's attacks on the dashboard in a real headless Chromium, against the real ``recruiter dashboard``.

Chromium resolves ``evil.example``, ``attacker.example`` and ``dash.example`` to 127.0.0.1
(``--host-resolver-rules``): what DNS rebinding does. A page whose name rebinds to the
dashboard gets 400 and no token; a page of another site that posts a form to the dashboard
(with a token read earlier) is refused, 403; a token taken from another browser session is
refused, 403; in each case the database is unchanged. A name given with ``--allowed-host``
is served, and its forms act. Control and bidirectional characters of a log line, an
argument and an error message show escaped in the DOM; a 1 MB argument gives a page of
bounded size that says its size and links the whole value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from recruiter.domain.job import JobOptions, build_job_document
from tests.conftest import wait_for
from tests.processes.conftest import Processes
from tests.processes.test_dashboard_browser import CHROMIUM, CHROMIUM_ARGS, new_page, serve
from tests.workables import Record

NAMES = ("evil.example", "attacker.example", "dash.example")
HOSTILE = "abc\u202eexe.live\x07\x08\x0b\x0c\u2066x\u2069"
SHOWN = r"abc\u202eexe.live\x07\x08\x0b\x0c\u2066x\u2069"
RAW = set("\u202e\u2066\u2069\x07\x08\x0b\x0c")
COLLECTIONS = ("scheduled", "archived", "metadata", "audit")

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed at /usr/bin/chromium"),
]


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    rules = ", ".join(f"MAP {name} 127.0.0.1" for name in NAMES)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=[*CHROMIUM_ARGS, f"--host-resolver-rules={rules}"])
        yield b
        b.close()


def snapshot(db: Any) -> dict[str, list[Any]]:
    return {name: sorted(db[name].find(), key=lambda d: str(d["_id"])) for name in COLLECTIONS}


def seed(db: Any, db_uri: str) -> dict[str, Any]:
    """A waiting job of the group ``mail`` (a name to pause) and a failed job full of control characters."""
    now = datetime.now(UTC).replace(microsecond=0)
    queued = dict(build_job_document(Record(db_uri, n=1), JobOptions(group="mail"), now + timedelta(hours=1)))
    db.scheduled.insert_one(queued)
    failed = dict(build_job_document(Record(db_uri, n=2), JobOptions(group="mail"), now - timedelta(minutes=1)))
    failed["workable"]["parameters"].update(a_note=HOSTILE, blob="x" * (1024 * 1024))
    run = {"attempt": 1, "outcome": "failed", "worker": "w-1", "pid": 7, "hostname": "h",
           "started_at": now - timedelta(seconds=3), "ended_at": now - timedelta(seconds=2),
           "class": "ValueError", "message": f"bad {HOSTILE}", "trace": f"Traceback\nValueError: bad {HOSTILE}\n",
           "logs": f"first line\n{HOSTILE}\n"}
    failed = {**{k: v for k, v in failed.items() if k != "status"}, "why": "tried-too-many-times",
              "archived_at": now, "done": False, "attempts": 1, "executions": [run], "last_execution": run}
    db.archived.insert_one(failed)
    return {"queued": queued, "failed": failed}


def token_of(page: Any) -> str:
    value = page.locator("#pause-form input[name=csrf]").get_attribute("value")
    assert value
    return str(value)


def test_rebinding_foreign_origins_and_other_sessions_are_refused(processes: Processes, db: Any, db_uri: str,
                                                                  browser: Any) -> None:
    seed(db, db_uri)
    url = serve(processes)
    port = url.rsplit(":", 1)[1]
    before = snapshot(db)

    # DNS rebinding: evil.example resolves to 127.0.0.1; its page (same origin as evil.example) reads nothing.
    rebound = new_page(browser)
    response = rebound.goto(f"http://evil.example:{port}/switches")
    assert response is not None
    assert response.status == 400
    assert "csrf" not in rebound.content()
    assert rebound.context.cookies() == []
    posted = rebound.evaluate("""async () => (await fetch('/actions/pause', {method: 'POST',
        body: new URLSearchParams({kind: 'group', name: 'mail', csrf: 'x'})})).status""")
    assert posted == 400

    # A page of another site posts a form (with a token read from the dashboard) to the dashboard: 403.
    victim = browser.new_context()
    mine = victim.new_page()
    mine.goto(url + "/switches")
    token = token_of(mine)
    attack = victim.new_page()
    attack.route("http://attacker.example/", lambda route: route.fulfill(content_type="text/html", body=f"""
        <form method="post" action="{url}/actions/pause"><input name="kind" value="group">
        <input name="name" value="mail"><input name="csrf" value="{token}"></form>"""))
    attack.goto("http://attacker.example/")
    with attack.expect_navigation() as navigation:
        attack.evaluate("document.forms[0].submit()")
    assert navigation.value.status == 403
    assert "another site" in attack.content()

    # A token taken from another browser session: 403.
    other = browser.new_context()
    theirs = other.new_page()
    theirs.on("dialog", lambda dialog: dialog.accept())
    theirs.goto(url + "/switches")
    assert token_of(theirs) != token
    theirs.locator("#pause-form input[name=csrf]").evaluate(f"(field) => field.value = {json.dumps(token)}")
    theirs.locator("#pause-form input[name=name]").fill("mail")
    with theirs.expect_response(lambda r: r.url.endswith("/actions/pause")) as refused:
        theirs.locator("#pause-form button[type=submit]").click()
    assert refused.value.status == 403

    # Without Origin (a script, not a browser's form), Sec-Fetch-Site: cross-site is refused too.
    scripted = mine.request.post(url + "/actions/pause", form={"kind": "group", "name": "mail", "csrf": token},
                                 headers={"Sec-Fetch-Site": "cross-site"}, max_redirects=0)
    assert scripted.status == 403
    assert snapshot(db) == before

    # The dashboard's own form, in its own session, acts (Chromium sends its Origin).
    mine.on("dialog", lambda dialog: dialog.accept())
    mine.locator("#pause-form input[name=name]").fill("mail")
    mine.locator("#pause-form button[type=submit]").click()
    wait_for(lambda: db.metadata.find_one({"_id": "paused", "groups": ["mail"]}), timeout_s=30,
             message="the group to be paused")
    victim.close()
    other.close()


def test_an_allowed_host_is_served_and_its_forms_act(processes: Processes, db: Any, db_uri: str,
                                                     browser: Any) -> None:
    seed(db, db_uri)
    url = serve(processes, "--allowed-host", "dash.example")
    port = url.rsplit(":", 1)[1]
    page = new_page(browser)
    response = page.goto(f"http://dash.example:{port}/switches")
    assert response is not None
    assert response.status == 200
    page.locator("#pause-form input[name=name]").fill("mail")
    page.locator("#pause-form button[type=submit]").click()
    # A locator, not wait_for_function: the page's CSP forbids the eval that function polls with.
    page.locator("#paused-names", has_text="mail").wait_for(timeout=30_000)
    assert db.metadata.find_one({"_id": "paused"})["groups"] == ["mail"]
    assert page.goto(f"http://evil.example:{port}/switches").status == 400  # other names still refused


def test_controls_show_escaped_and_a_1mb_argument_is_cut_in_a_browser(processes: Processes, db: Any,
                                                                      db_uri: str, browser: Any) -> None:
    failed = seed(db, db_uri)["failed"]
    url = serve(processes)
    page = new_page(browser)
    response = page.goto(f"{url}/jobs/{failed['_id']}")
    assert response is not None
    assert response.status == 200
    assert len(response.body()) < 64 * 1024  # the 1 MB argument is cut
    logs = page.locator("pre.logs").inner_text()
    assert logs.splitlines() == ["first line", SHOWN]
    assert page.locator("p.error").inner_text() == f"ValueError: bad {SHOWN}"
    assert f"ValueError: bad {SHOWN}" in page.locator("pre.trace").inner_text()
    parameters = page.locator("#job-parameters").inner_text()
    assert json.dumps(HOSTILE)[1:-1] in parameters
    assert not RAW & set(page.locator("body").inner_text())
    note = page.locator("p.cut").first.inner_text()
    assert re.search(r"cut: 4096 of 10\d{5} characters shown \(1\.0 MiB in all\)", note), note
    whole = page.request.get(url + str(page.locator("p.cut a").first.get_attribute("href")))
    assert whole.status == 200
    assert whole.json()["workable"]["parameters"]["blob"] == "x" * (1024 * 1024)
    failures = new_page(browser)
    failures.goto(url + "/failures")
    assert SHOWN in failures.locator("main").inner_text()
    assert not RAW & set(failures.locator("body").inner_text())
