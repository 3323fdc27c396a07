"""The dashboard in a real headless Chromium (Debian's, driven by Playwright: no browser download).

The real processes (a recruiter, a worker) and the real ``recruiter dashboard`` command run
against the test's database. An operator browses to a failed job and sees its trace and
logs, retries it and watches the copy run to done, pauses a group and sees the overview
(open in another tab) show it, and runs a schedule now; every action lands in the audit.
Served ``--read-only``, no page offers any action.

Screenshots are taken on every run (into the test's tmp directory);
``RECRUITER_UPDATE_SCREENSHOTS=1`` also copies them to docs/operations/dashboard/.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bson import ObjectId

from recruiter import Recruiter
from recruiter.store import privileges
from tests.conftest import REPO, wait_for
from tests.dashboard_workables import FailsUntilReleased
from tests.processes.conftest import Processes
from tests.processes.test_roles import recipe
from tests.processes.test_roles import used as used_privileges
from tests.workables import Record, release

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
SHOTS = REPO / "docs" / "operations" / "dashboard"
ACTION_LABELS = ("Retry", "Cancel", "Stop", "Run now", "Pause", "Resume")

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed at /usr/bin/chromium "
                                                     "(apt-get install chromium; .ci/run does it as root)"),
]


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def serve(processes: Processes, *args: str, env: dict[str, str] | None = None) -> str:
    """``recruiter dashboard`` on a free port of 127.0.0.1; its base URL once it answers."""
    port = free_port()
    processes.start("dashboard", "dashboard", "--port", str(port), "--refresh", "1s", *args, env=env)
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: answers(url + "/jobs"), timeout_s=60, message="the dashboard to answer")
    return url


def shot(page: Any, name: str, tmp_path: Path) -> None:
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 1000
    if os.environ.get("RECRUITER_UPDATE_SCREENSHOTS") == "1":
        SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, SHOTS / name)


def new_page(browser: Any, confirmed: list[str] | None = None) -> Any:
    """A tab whose confirmation dialogs (hx-confirm) the operator accepts; their messages go to ``confirmed``."""
    page = browser.new_page(viewport={"width": 1280, "height": 860})

    def accept(dialog: Any) -> None:
        if confirmed is not None:
            confirmed.append(dialog.message)
        dialog.accept()

    page.on("dialog", accept)
    return page


def test_failed_job_retry_pause_and_schedule_in_a_browser(processes: Processes, db: Any, db_uri: str,
                                                          browser: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    processes.recruiter()
    processes.worker("--group", "mail", "--group", "generic")
    used = tmp_path / "dashboard-privileges.jsonl"
    url = serve(processes, env={privileges.FILE_ENVVAR: str(used)})
    with Recruiter.connect(db_uri) as rec:
        failed_id = rec.enqueue(FailsUntilReleased(db_uri, "k1").as_job_of(rec).in_group("mail")).id
        rec.enqueue(Record(db_uri, n=1).as_job_of(rec).in_group("mail").for_tenant("acme"))
        rec.schedule("tick", every="1h", job=Record(db_uri, n=5))
    wait_for(lambda: db.archived.find_one({"_id": failed_id}), timeout_s=60, message="the job to fail")

    # A failed job: from the failures page to its trace and logs.
    confirmed: list[str] = []
    page = new_page(browser, confirmed)
    page.goto(url + "/failures")
    group = page.locator("section.failure-group", has_text="k1 is not released yet")
    expect(group).to_contain_text("RuntimeError")
    group.locator("summary").click()
    shot(page, "failures.png", tmp_path)
    group.locator(f"a[href='/jobs/{failed_id}']").click()
    expect(page.locator("pre.trace")).to_contain_text("RuntimeError: k1 is not released yet")
    expect(page.locator("pre.logs")).to_contain_text("checking whether k1 is released (attempt 1)")
    expect(page.locator("#job-state")).to_contain_text("archived")
    shot(page, "failed-job.png", tmp_path)

    # Retry it: the copy's page, live until it is done.
    release(db_uri, "k1")
    page.locator("form.action button.retry").click()
    page.wait_for_url(lambda u: re.search(r"/jobs/[0-9a-f]{24}$", u) is not None and str(failed_id) not in u)
    new_id = page.url.rsplit("/", 1)[1]
    expect(page.locator("#job-state")).to_have_text("archived: done", timeout=60_000)
    expect(page.locator(".flash")).to_contain_text("retried as")
    copy = db.archived.find_one({"_id": ObjectId(new_id)})
    assert copy["why"] == "done"
    assert copy["retry_of"] == failed_id
    shot(page, "retried-job.png", tmp_path)

    # Pause a group in one tab; the overview open in another shows it on its next refresh.
    overview = new_page(browser)
    overview.goto(url + "/")
    expect(overview.locator("#depth")).to_contain_text("mail")
    expect(overview.locator("#paused")).to_contain_text("nothing paused")
    page.goto(url + "/switches")
    page.locator("#pause-form select[name=kind]").select_option("group")
    page.locator("#pause-form input[name=name]").fill("mail")
    page.locator("#pause-form button[type=submit]").click()
    expect(page.locator("#paused-names")).to_contain_text("mail", timeout=30_000)
    expect(overview.locator("#paused")).to_contain_text("group mail paused", timeout=30_000)
    expect(overview.locator("tr.is-paused")).to_contain_text("mail")
    expect(overview.locator("#charts polyline")).to_have_count(4)  # a point per refresh since it opened
    with Recruiter.connect(db_uri) as rec:
        assert rec.admin.paused().groups == ("mail",)
    shot(overview, "overview-paused.png", tmp_path)

    # Run a schedule now: its job runs (group generic is not paused).
    page.goto(url + "/schedules")
    row = page.locator("#schedule-tick")
    expect(row).to_contain_text("every 1h")
    row.locator("form.action", has=page.locator("input[value=run-now]")).locator("button").click()
    expect(page.locator(".flash")).to_contain_text("schedule-run-now tick: done", timeout=30_000)
    wait_for(lambda: db.archived.find_one({"schedule.name": "tick", "why": "done"}), timeout_s=60,
             message="the schedule's job to run")
    page.reload()
    expect(page.locator("#schedule-tick")).to_contain_text("done")
    shot(page, "schedules.png", tmp_path)

    page.goto(url + "/workers")
    expect(page.locator("#workers")).to_contain_text("mail, generic")
    shot(page, "workers.png", tmp_path)

    # Every action is in the audit: who, what, when, from where.
    page.goto(url + "/audit")
    expect(page.locator("#audit")).to_contain_text("schedule-run-now")
    shot(page, "audit.png", tmp_path)
    entries = list(db.audit.find().sort("at", 1))
    assert [(e["action"], e["target"]) for e in entries] == [
        ("retry", str(failed_id)), ("pause-group", "mail"), ("schedule-run-now", "tick")]
    assert {(e["who"], e["client"]) for e in entries} == {("anonymous", "127.0.0.1")}
    assert confirmed == [f"Retry job {failed_id} as a new job?",
                         "Pause it? Its waiting jobs stay waiting until it is resumed.", "Fire schedule tick now?"]
    # What the dashboard did to `audit` is what docs/operations/security.md's recruiterAudit grants.
    on_audit = {action for collection, action in used_privileges(used, db.name) if collection == "audit"}
    assert "insert" in on_audit
    assert on_audit <= recipe()["recruiterAudit"]["audit"]


def test_read_only_offers_no_action_in_a_browser(processes: Processes, db: Any, db_uri: str, browser: Any,
                                                 tmp_path: Path) -> None:
    processes.recruiter()
    processes.worker("--group", "mail", "--group", "generic")
    with Recruiter.connect(db_uri) as rec:
        failed_id = rec.enqueue(FailsUntilReleased(db_uri, "k2").as_job_of(rec).in_group("mail")).id
        waiting = rec.enqueue(Record(db_uri, n=2).as_job_of(rec).schedule_in(seconds=3600)).id
        rec.schedule("tick", every="1h", job=Record(db_uri, n=5))
        rec.admin.pause("tenant", ["acme"], force=True)
    wait_for(lambda: db.archived.find_one({"_id": failed_id}), timeout_s=60, message="the job to fail")
    url = serve(processes, "--read-only")
    page = new_page(browser)
    for path in ("/", "/jobs", f"/jobs/{failed_id}", f"/jobs/{waiting}", "/failures", "/workers", "/schedules",
                 "/switches", "/audit", "/workflows"):
        page.goto(url + path)
        assert page.locator("#read-only").is_visible()
        assert page.locator("form[method=post], [hx-post]").count() == 0, path
        buttons = page.locator("main button").all_inner_texts()
        assert not [b for b in buttons if b.strip().split(" ")[0] in ("Retry", "Cancel", "Stop", "Pause", "Resume")
                    or b.strip() == "Run now"], (path, buttons)
        if path == f"/jobs/{failed_id}":
            assert "k2 is not released yet" in page.locator("pre.trace").inner_text()
            shot(page, "read-only.png", tmp_path)
    refused = page.request.post(url + "/actions/pause", form={"kind": "group", "name": "mail"})
    assert refused.status == 403
    with Recruiter.connect(db_uri) as rec:
        assert rec.admin.paused().groups == ()
    assert "audit" not in db.list_collection_names()
