"""The dashboard's history page over HTTP against a real server: a real time axis, gaps drawn as gaps,
drawn from the ``timeline`` collection (so a restarted dashboard shows the same history)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from recruiter.cli.main import main
from recruiter.domain.timeline import MINUTE, Totals, bucket_document, bucket_start
from recruiter.store import ensure_indexes_sync, parse_target, sync_client
from recruiter.web import Settings, create_app
from tests.conftest import wait_for
from tests.web.test_dashboard_http import failed_job


@pytest.fixture
def store_db(db_uri: str) -> Iterator[Any]:
    target = parse_target(db_uri)
    client = sync_client(target, app_name="test-dashboard-history")
    ensure_indexes_sync(client[target.database])
    yield client[target.database]
    client.close()


def seed(db: Any) -> None:
    """Minutes -30..-21 and -10..0 before now recorded (group ``mail``: 4 done, 1 failed a minute, over two
    leader epochs in minute -25); the ten minutes between recorded by no leader. First waits, if need
    be, for a minute with 10 s left, so that the test reads within the minute it seeded."""
    wait_for(lambda: datetime.now(UTC).second < 50, timeout_s=15, message="a minute with 10 s left")
    now = datetime.now(UTC)
    docs = []
    current = bucket_start(now, MINUTE)
    for ago in [*range(21, 31), *range(11)]:
        at = current - timedelta(minutes=ago)
        for epoch, done in ((1, 3), (2, 1)) if ago == 25 else ((1, 4),):
            totals = Totals(done=done, failed=1 if epoch == 1 else 0, wait_n=done, wait_s=2.0 * done, wait_max_s=3.0)
            docs += [bucket_document((MINUTE, at, None), totals, epoch),
                     bucket_document((MINUTE, at, "mail"), totals, epoch)]
    db.timeline.insert_many(docs)


def page(store_db: Any, query: str = "") -> str:
    with TestClient(create_app(store_db, Settings()), base_url="http://127.0.0.1") as web:
        response = web.get(f"/history{query}")
    assert response.status_code == 200, response.text
    return response.text


def charts(html: str) -> list[str]:
    return re.findall(r'<figure class="time-chart">.*?</figure>', html, flags=re.S)


def test_the_history_chart_has_labelled_axes_and_a_gap_drawn_as_a_gap(store_db: Any) -> None:
    seed(store_db)
    jobs, wait = charts(page(store_db))
    assert 'class="axis x-axis"' in jobs
    assert 'class="axis y-axis"' in jobs
    assert "time (UTC)" in jobs
    assert "jobs per minute" in jobs
    assert "seconds" in wait
    # The x axis is time: ticks at round minutes, labelled HH:MM.
    assert len(re.findall(r'class="tick x-tick"[^>]*>\d\d:\d\d<', jobs)) >= 3
    # The y axis goes from 0 to a round number above the highest value (4 done a minute).
    assert re.findall(r'class="tick y-tick"[^>]*>([^<]+)<', jobs) == ["0", "1", "2", "3", "4"]
    # The ten minutes nobody recorded: shaded, and the line is not drawn across them (two runs).
    assert len(re.findall(r'<rect class="gap"', jobs)) == 2  # the gap, and the range's start before the first
    done = re.search(r'<path class="series done" d="([^"]+)"', jobs)
    assert done is not None
    assert done.group(1).count("M ") == 2


def test_a_bucket_sums_its_leaders_and_a_group_is_chosen(store_db: Any) -> None:
    seed(store_db)
    html = page(store_db, "?group=mail&range=1h")
    assert '<option value="mail" selected>mail</option>' in html
    jobs, _ = charts(html)
    done = re.search(r'<path class="series done" d="([^"]+)"', jobs)
    assert done is not None
    ys = {float(p.split(",")[1]) for p in re.findall(r"[\d.]+,[\d.]+", done.group(1))}
    assert len(ys) == 1  # 3 + 1 in minute -25 over two epochs: 4, as every other minute


def test_a_restarted_dashboard_draws_the_same_history(store_db: Any) -> None:
    seed(store_db)
    first = charts(page(store_db))
    second = charts(page(store_db))  # a new app: nothing kept in memory from the first
    assert first == second
    assert 'class="series done"' in second[0]


def test_a_bad_range_is_400_and_malformed_buckets_are_set_aside(store_db: Any) -> None:
    with TestClient(create_app(store_db, Settings()), base_url="http://127.0.0.1") as web:
        assert web.get("/history?range=5y").status_code == 400
        at = bucket_start(datetime.now(UTC), MINUTE)
        store_db.timeline.insert_one({"_id": "bad", "res": MINUTE, "at": at, "group": None, "done": "many"})
        response = web.get("/history")
    assert response.status_code == 200
    assert "1 malformed bucket documents set aside" in response.text


def test_failures_group_by_message_pattern_and_exactly_on_request(store_db: Any, db_uri: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    store_db.archived.insert_many([failed_job(db_uri, n, now, f"invoice {n} has no customer") for n in range(1, 4)])
    with TestClient(create_app(store_db, Settings()), base_url="http://127.0.0.1") as web:
        by_pattern = web.get("/failures").text
        exact = web.get("/failures?by=exact").text
        assert web.get("/failures?by=regex").status_code == 400
    assert by_pattern.count('<section class="failure-group">') == 1
    assert "invoice &lt;n&gt; has no customer" in by_pattern
    assert "3 jobs" in by_pattern
    assert exact.count('<section class="failure-group">') == 3
    assert "invoice 2 has no customer" in exact


def test_recruiter_history_prints_the_buckets_with_gaps_as_gaps(store_db: Any, db_uri: str) -> None:
    seed(store_db)
    text = CliRunner().invoke(main, ["history", "--group", "mail", "--target", db_uri], catch_exceptions=False)
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    assert lines[0] == "History of group mail, per minute, last 1h:"
    assert sum("(not recorded)" in line for line in lines) == 60 - 21  # minutes -59..-31 and -20..-11
    assert "total: 84 done, 21 failed;" in lines[-1]
    out = CliRunner().invoke(main, ["history", "--json", "--target", db_uri], catch_exceptions=False)
    doc = json.loads(out.output)
    assert doc["resolution"] == MINUTE
    assert len(doc["buckets"]) == 60
    assert sum(b.get("done", 0) for b in doc["buckets"]) == 84
    refused = CliRunner().invoke(main, ["history", "--range", "5y", "--target", db_uri])
    assert refused.exit_code == 2
