"""The history page in a real headless Chromium: the time charts render (axes, labels, lines, a gap shaded).

The history is written as the leader writes it (``timeline`` documents, one per group and minute
and leader epoch), for the six hours before now: no need to run a leader for hours. The
``recruiter dashboard`` command serves it. ``RECRUITER_UPDATE_SCREENSHOTS=1`` copies the
screenshot to docs/operations/dashboard/history.png.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from recruiter.domain.timeline import HOUR, MINUTE, Tally, bucket_start
from tests.processes.conftest import Processes
from tests.processes.test_dashboard_browser import CHROMIUM, browser, new_page, serve, shot

__all__ = ["browser"]  # the fixture, shared

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed at /usr/bin/chromium"),
]


def seed_history(db: Any, now: datetime) -> None:
    """Six hours of two groups' outcomes, a daily-looking swell, failures in bursts, and 40 minutes
    around the third hour that no leader recorded (a failover that took long)."""
    start = bucket_start(now, MINUTE) - timedelta(hours=6)
    docs = []
    for epoch, minutes in ((7, range(0, 150)), (8, range(190, 361))):
        tally = Tally()
        for m in minutes:
            at = start + timedelta(minutes=m)
            tally.cover(at)
            swell = 1 + math.sin(m / 60)
            for group, per_minute in (("mail", 20 * swell), ("reports", 6)):
                for i in range(int(per_minute)):
                    failed = group == "reports" and (m // 30) % 4 == 1 and i < 3
                    tally.count(group, "failed" if failed else "done", 0.2 + swell * (i % 5), at)
        docs += tally.documents(tally.pending(), epoch)
    db.timeline.insert_many(docs)
    assert db.timeline.count_documents({"res": HOUR}) > 0


def test_the_history_chart_renders_in_a_browser(processes: Processes, db: Any, browser: Any,
                                                tmp_path: Path) -> None:
    from playwright.sync_api import expect

    seed_history(db, datetime.now(UTC))
    url = serve(processes)
    page = new_page(browser)
    page.goto(url + "/")
    page.locator("nav a", has_text="History").click()
    page.locator("select[name=range]").select_option("6h")
    page.locator("form.filters button[type=submit]").click()
    page.wait_for_url(lambda u: "range=6h" in u)
    jobs = page.locator("figure.time-chart").first
    expect(jobs.locator("figcaption")).to_contain_text("Jobs per minute")
    # The axes are drawn across the chart (a line has no area: its drawn length is measured).
    x_axis, y_axis = jobs.locator("line.x-axis").bounding_box(), jobs.locator("line.y-axis").bounding_box()
    assert x_axis is not None
    assert y_axis is not None
    assert x_axis["width"] > 500
    assert y_axis["height"] > 100
    expect(jobs.locator("text.x-label")).to_have_text("time (UTC)")
    expect(jobs.locator("text.y-label")).to_have_text("jobs per minute")
    expect(jobs.locator("path.series.done")).to_be_visible()
    expect(jobs.locator("path.series.failed")).to_be_visible()
    assert jobs.locator("text.x-tick").count() >= 4
    gap = jobs.locator("rect.gap").first
    expect(gap).to_be_visible()
    box = gap.bounding_box()
    assert box is not None
    assert box["width"] > 30  # 40 of 360 minutes, on a chart some 700 pixels wide
    shot(page, "history.png", tmp_path)
