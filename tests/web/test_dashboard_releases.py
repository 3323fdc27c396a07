"""The dashboard's overview lists the releases live and warns as ``recruiter status`` does (issue 43)."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from recruiter.domain.versions import RELEASE, UNRECORDED
from tests.integration.test_releases import THIS, TOO_OLD, lease
from tests.web.test_dashboard_http import store_db, web

__all__ = ["store_db", "web"]  # the fixtures, used by name


def test_the_overview_lists_the_releases_and_warns_when_they_are_mixed(web: TestClient, db: Any) -> None:
    db.metadata.insert_many([lease("recruiter", None), lease("cleaner", TOO_OLD, owner="c:2:y")])
    page = web.get("/overview/live").text
    assert (f'<p id="releases">releases: 0.0.9 (cleaner lease); {UNRECORDED} or older (none recorded) '
            "(recruiter lease)</p>") in page
    warnings = page.count('class="problem release-warning"')
    assert warnings == 2, page  # mixed, and the 0.0.9 holder (one recording none is not refused)
    assert "warning: releases are mixed: 0.0.9, " in page


def test_the_overview_warns_of_nothing_when_one_release_runs(web: TestClient, db: Any) -> None:
    db.metadata.insert_one(lease("recruiter", THIS))
    page = web.get("/overview/live").text
    assert f'<p id="releases">releases: {RELEASE} (recruiter lease)</p>' in page
    assert "release-warning" not in page
