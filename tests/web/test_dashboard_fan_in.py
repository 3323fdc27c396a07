"""The dashboard's job and workflow pages of a wide fan-in (a step waiting for more than 100 jobs,
stored with dependency edges: recruiter.domain.edges): how many it waits for, read from its edges."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from recruiter import Recruiter, Workflow
from recruiter.domain.edges import INLINE_MAX
from tests.web.test_dashboard_http import client_of, store_db  # noqa: F401
from tests.workables import Record

PARTS = INLINE_MAX + 20


@pytest.fixture
def web(store_db: Any) -> Iterator[TestClient]:  # noqa: F811
    with client_of(store_db) as c:
        yield c


def test_a_wide_fan_in_s_pages_say_how_many_it_waits_for(web: TestClient, db_uri: str) -> None:
    wf = Workflow("wide")
    names = wf.fan_out("part", [Record(db_uri, n=n) for n in range(PARTS)])
    wf.step("total", Record(db_uri, n=-1), deps=names)
    with Recruiter.connect(db_uri) as rec:
        run = wf.enqueue(rec)
    total = run.handles["total"]
    job = web.get(f"/jobs/{total}")
    assert job.status_code == 200
    assert f"waiting for {PARTS} jobs" in job.text  # its count left, not its guard's 1
    page = web.get(f"/workflows/{run.id}")
    assert page.status_code == 200
    assert "total" in page.text
