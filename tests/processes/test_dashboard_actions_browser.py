"""The dashboard's job actions in a real headless Chromium, against the real ``recruiter dashboard`` command.

A failure group's "Retry 3 archived" submitted twice (from two tabs showing the same page, and by a
double click) makes one copy of each job, and the second submit says "already retried"; the jobs list
selects rows, or every job matching its filters, for retry and delete, each confirmed in the browser.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from recruiter.domain.job import JobOptions, build_job_document
from tests.processes.conftest import Processes
from tests.processes.test_dashboard_browser import CHROMIUM, CHROMIUM_ARGS, new_page, serve
from tests.web.test_dashboard_http import failed_job
from tests.workables import Record

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed at /usr/bin/chromium"),
]


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


def seed(db: Any, db_uri: str) -> tuple[list[Any], list[Any]]:
    now = datetime.now(UTC).replace(microsecond=0)
    failed = [failed_job(db_uri, i, now, message="card declined") for i in range(1, 4)]
    waiting = [dict(build_job_document(Record(db_uri, n=50 + i), JobOptions(group="parked"),
                                       now - timedelta(seconds=i)) | {"scheduled_at": now + timedelta(hours=1)})
               for i in range(2)]
    db.archived.insert_many(failed)
    db.scheduled.insert_many(waiting)
    return [d["_id"] for d in failed], [d["_id"] for d in waiting]


def test_a_double_submitted_bulk_retry_makes_no_second_copy(processes: Processes, db: Any, db_uri: str,
                                                            browser: Any) -> None:
    from playwright.sync_api import expect

    failed, _ = seed(db, db_uri)
    url = serve(processes)
    confirmed: list[str] = []
    first, second = new_page(browser, confirmed), new_page(browser, confirmed)
    for tab in (first, second):  # the same page open twice: the same button, the same jobs
        tab.goto(url + "/failures")
        expect(tab.locator("section.failure-group button.retry")).to_have_text("Retry 3 archived")
    first.locator("section.failure-group button.retry").click()
    expect(first.locator(".flash")).to_contain_text("retried 3", timeout=30_000)
    second.locator("section.failure-group button.retry").click()
    expect(second.locator(".flash")).to_contain_text("retried 0, 3 already retried", timeout=30_000)
    assert db.scheduled.count_documents({"retry_of": {"$in": failed}}) == 3
    # The page no longer offers it, and names each copy.
    expect(second.locator("section.failure-group button.retry")).to_have_count(0)
    expect(second.locator("section.failure-group")).to_contain_text("3 archived already retried")
    # A double click on a stale page's button: still one copy each.
    second.goto(url + "/jobs?state=archived")
    second.locator(f"input.select-job[value='{failed[0]}']").check()
    second.locator("button", has_text="Retry selected").dblclick()
    expect(second.locator(".flash")).to_contain_text("already retried as", timeout=30_000)
    assert db.scheduled.count_documents({"retry_of": {"$in": failed}}) == 3
    assert all(m.startswith("Retry the") for m in confirmed), confirmed
    outcomes = [e["outcome"] for e in db.audit.find({"action": "retry"}).sort("at", 1)]
    assert outcomes[0] == "retried 3" or outcomes[0].startswith("retried 3 ")
    assert all("retried 0" in o or o.startswith("already retried") for o in outcomes[1:]), outcomes


def test_a_list_deletes_every_job_matching_its_filters(processes: Processes, db: Any, db_uri: str,
                                                       browser: Any) -> None:
    from playwright.sync_api import expect

    _, waiting = seed(db, db_uri)
    url = serve(processes)
    confirmed: list[str] = []
    page = new_page(browser, confirmed)
    page.goto(url + "/jobs?group=parked")
    expect(page.locator("input.select-job")).to_have_count(2)
    page.locator("#all-matching").check()
    page.locator("button", has_text="Delete selected").click()
    expect(page.locator(".flash")).to_contain_text("2 jobs matching state=queued,delayed,retrying group=parked",
                                                   timeout=30_000)
    expect(page.locator(".flash")).to_contain_text("2 deleted")
    assert confirmed == ["Delete the jobs selected (waiting ones: archived as deleted, they never run)?"]
    assert {d["why"] for d in db.archived.find({"_id": {"$in": waiting}})} == {"deleted"}
    assert db.scheduled.count_documents({"_id": {"$in": waiting}}) == 0
    assert re.search(r"/jobs\?group=parked$", page.url)
