"""The overview at a thousand groups (starlette's TestClient, a real server): one refresh stays under 50 KB,
groups are paged and filtered by query parameters that its links keep, tenants are shown on demand, the
@worker: groups apart, and a bad parameter is a 400 with its reason."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from urllib.parse import unquote

import pytest
from bson import ObjectId
from starlette.testclient import TestClient

from recruiter.domain.job import JobOptions, build_job_document
from recruiter.store import ensure_indexes_sync, parse_target, sync_client
from recruiter.web import Settings, create_app
from tests.workables import Record

GROUPS, TENANTS = 1000, 10
REFRESH_BYTES = 50_000


@pytest.fixture(scope="module")
def many(server_uri: str) -> Iterator[TestClient]:
    """1000 groups x 10 tenants, a waiting job each (g0007 the oldest), and 3 @worker: groups: read once."""
    target = parse_target(server_uri.rstrip("/") + "/t_overview_many")
    client = sync_client(target, app_name="test-overview")
    db = client[target.database]
    client.drop_database(db.name)
    ensure_indexes_sync(db)
    now = datetime.now(UTC).replace(microsecond=0)
    template = dict(build_job_document(Record(server_uri, n=0), JobOptions(), now))
    docs = [{**template, "_id": ObjectId(), "group": f"g{g:04d}", "tenant": f"t{t}",
             "scheduled_at": now - timedelta(seconds=3600 if g == 7 else g % 60)}
            for g in range(GROUPS) for t in range(TENANTS)]
    docs += [{**template, "_id": ObjectId(), "group": f"@worker:w{w}", "scheduled_at": now} for w in range(3)]
    for start in range(0, len(docs), 2000):
        db.scheduled.insert_many(docs[start:start + 2000])
    try:
        # A long refresh: every request of the module is served by one read of the figures.
        with TestClient(create_app(db, Settings(refresh_s=3600)), base_url="http://127.0.0.1") as web:
            yield web
    finally:
        client.drop_database(db.name)
        client.close()


def rows(html: str) -> list[str]:
    return [unquote(g) for g in re.findall(r'<tr class="group[^"]*"><th><a href="/jobs\?group=([^"]+)"', html)]


def test_one_refresh_of_a_thousand_groups_fits_a_screen(many: TestClient) -> None:
    for path in ("/overview/live", "/", "/overview/live?tenants=g0001", "/overview/live?page=50"):
        response = many.get(path)
        assert response.status_code == 200, response.text[:300]
        assert len(response.content) < REFRESH_BYTES, (path, len(response.content))
    live = many.get("/overview/live").text
    assert rows(live) == [f"g{g:04d}" for g in range(20)]
    assert f"groups 1-20 of {GROUPS}" in live
    assert 'class="tenant"' not in live  # tenants on demand only
    assert "@worker:" not in "".join(rows(live))
    assert "jobs aimed at workers (3 @worker: groups" in live
    assert re.search(r"<strong>oldest ready</strong> \(\d+\):\s*<a href=\"/\?q=g0007&amp;tenants=g0007\">g0007</a>",
                     live)


def test_groups_are_paged_and_filtered_and_the_links_keep_the_query(many: TestClient) -> None:
    page = many.get("/overview/live?q=G09&size=30&page=2").text
    assert rows(page) == [f"g09{g:02d}" for g in range(30, 60)]
    assert "groups 31-60 of 100 whose name contains <strong>G09</strong>" in page
    assert 'rel="next" href="/?q=G09&amp;size=30&amp;page=3"' in page
    assert 'rel="prev" href="/?q=G09&amp;size=30"' in page
    full = many.get("/?q=G09&size=30&page=2").text
    assert 'hx-get="/overview/live?q=G09&amp;size=30&amp;page=2"' in full  # the refresh keeps the view
    assert 'value="G09"' in full
    assert rows(many.get("/overview/live?page=999").text)[-1] == f"g{GROUPS - 1:04d}"  # past the end: the last
    assert "no group's name contains zzz" in many.get("/overview/live?q=zzz").text
    listed = rows(many.get("/overview/live?workers=1&size=5").text)
    assert listed == ["@worker:w0", "@worker:w1", "@worker:w2", "g0000", "g0001"]


def test_a_groups_tenants_are_shown_on_demand(many: TestClient) -> None:
    page = many.get("/overview/live?tenants=g0003&page=1").text
    assert page.count('<tr class="tenant">') == TENANTS
    assert "Group g0003: 10 tenants" in page
    assert 'href="/">10 (hide)</a>' in page
    assert "no group nope has jobs" in many.get("/overview/live?tenants=nope").text


@pytest.mark.parametrize("query", ["page=0", "page=x", "size=0", "size=201", "workers=yes", "page=1&page=2",
                                   "q=" + "x" * 2000])
def test_a_bad_parameter_is_refused_with_its_reason(many: TestClient, query: str) -> None:
    response = many.get("/overview/live?" + query)
    assert response.status_code in (400, 414), query
