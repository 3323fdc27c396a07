"""Issue 39's attacks on the dashboard over HTTP (starlette's TestClient) against a real server.

DNS rebinding (a foreign ``Host``), a POST from another origin (``Origin``, ``Sec-Fetch-Site``)
and a CSRF token taken from another session are refused and change nothing (every
collection compared); ``--allowed-host`` lets a proxy's name in. Text from the database
shows its control and bidirectional characters escaped, and a 1 MB argument gives a page
of bounded size that says the size and links the whole value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from bson import ObjectId
from starlette.testclient import TestClient

from recruiter.admin import Admin
from recruiter.web import Hosts, Settings, create_app
from recruiter.web.security import SESSION_COOKIE
from tests.web.test_dashboard_http import csrf_of, failed_job, run_cli, snapshot, store_db  # noqa: F401

RAW = ("\u202e", "\u2066", "\u200f", "\x07", "\x08", "\x0b", "\x0c", "\x1b", "\x9b")


@pytest.fixture
def web(store_db: Any) -> Iterator[TestClient]:  # noqa: F811
    with TestClient(create_app(store_db, Settings(hosts=Hosts.of(8080))), base_url="http://127.0.0.1:8080") as c:
        yield c


@pytest.fixture
def mail_job(db: Any, db_uri: str) -> dict[str, Any]:
    """A failed job of the group ``mail``: a name a pause can be tried on."""
    job = failed_job(db_uri, 1, datetime.now(UTC).replace(microsecond=0))
    db.archived.insert_one(job)
    return job


def pause(client: TestClient, token: str, **headers: str) -> Any:
    return client.post("/actions/pause", data={"kind": "group", "name": "mail", "csrf": token}, headers=headers,
                       follow_redirects=False)


@pytest.mark.parametrize("host", ["evil.example:8080", "evil.example", "127.0.0.1.evil.example:8080",
                                  "127.0.0.1:9999", "localhost:8081", "[::2]:8080", "", "127.0.0.1:8080@evil"])
def test_a_foreign_host_gets_400_and_nothing_else(web: TestClient, db: Any, mail_job: dict[str, Any],
                                                  host: str) -> None:
    token = csrf_of(web)  # a real session and its token, taken from the right name
    before = snapshot(db)
    page = web.get("/switches", headers={"host": host})
    assert page.status_code == 400
    assert 'name="csrf"' not in page.text
    assert "set-cookie" not in page.headers
    assert web.get(f"/jobs/{mail_job['_id']}/document", headers={"host": host}).status_code == 400
    assert web.get("/workflows", headers={"host": host}).status_code == 400
    assert pause(web, token, host=host).status_code == 400
    assert snapshot(db) == before
    assert Admin(db).paused().groups == ()


@pytest.mark.parametrize("host", ["127.0.0.1:8080", "localhost:8080", "[::1]:8080", "127.0.0.1", "LOCALHOST:8080"])
def test_the_loopback_names_on_the_dashboards_port_are_served(web: TestClient, host: str) -> None:
    assert web.get("/switches", headers={"host": host}).status_code == 200


@pytest.mark.parametrize(("headers", "why"), [
    ({"origin": "http://evil.example:8080"}, "a foreign Origin"),
    ({"origin": "http://evil.example:8080", "sec-fetch-site": "same-origin"}, "Origin decides"),
    ({"origin": "null"}, "an opaque origin (a sandboxed frame, a data: URL)"),
    ({"origin": "http://127.0.0.1:9999"}, "another local port: another origin"),
    ({"origin": "ftp://127.0.0.1:8080"}, "not http"),
    ({"sec-fetch-site": "cross-site"}, "no Origin, a cross-site fetch"),
    ({"sec-fetch-site": "same-site"}, "no Origin, a same-site fetch (another port)"),
])
def test_a_post_from_another_origin_is_403_and_changes_nothing(web: TestClient, db: Any, mail_job: dict[str, Any],
                                                                headers: dict[str, str], why: str) -> None:
    token = csrf_of(web)
    before = snapshot(db)
    response = pause(web, token, **headers)
    assert response.status_code == 403, why
    assert snapshot(db) == before
    assert Admin(db).paused().groups == ()


@pytest.mark.parametrize("headers", [{"origin": "http://127.0.0.1:8080"}, {"origin": "http://localhost:8080"},
                                     {"sec-fetch-site": "same-origin"}, {"sec-fetch-site": "none"}, {}])
def test_a_post_from_the_dashboards_own_page_acts(web: TestClient, db: Any, mail_job: dict[str, Any],
                                                  headers: dict[str, str]) -> None:
    assert pause(web, csrf_of(web), **headers).status_code == 303
    assert Admin(db).paused().groups == ("mail",)


def test_a_token_from_another_session_is_403(store_db: Any, db: Any, mail_job: dict[str, Any]) -> None:  # noqa: F811
    app = create_app(store_db, Settings())
    with TestClient(app, base_url="http://127.0.0.1") as mine, TestClient(app, base_url="http://127.0.0.1") as theirs:
        my_token = csrf_of(mine)
        my_session = mine.cookies.get(SESSION_COOKIE)
        their_token = csrf_of(theirs)
        assert my_token != their_token
        assert mine.cookies.get(SESSION_COOKIE) != theirs.cookies.get(SESSION_COOKIE)
        before = snapshot(db)
        assert pause(mine, their_token).status_code == 403
        assert pause(theirs, my_token).status_code == 403
        mine.cookies.set(SESSION_COOKIE, their_token)  # a token is no session: as cookie and field, still refused
        assert pause(mine, their_token).status_code == 403
        mine.cookies.set(SESSION_COOKIE, my_session)
        assert snapshot(db) == before
        assert pause(mine, my_token).status_code == 303
    assert Admin(db).paused().groups == ("mail",)


def test_an_allowed_host_behind_a_proxy_is_served(store_db: Any, db: Any, mail_job: dict[str, Any]) -> None:  # noqa: F811
    app = create_app(store_db, Settings(hosts=Hosts.of(8080, ["dash.example.com"])))
    with TestClient(app, base_url="https://dash.example.com") as c:  # a proxy that keeps the browser's Host
        assert c.get("/switches").status_code == 200
        assert c.get("/switches", headers={"host": "dash.example.com:443"}).status_code == 200
        assert c.get("/switches", headers={"host": "other.example.com"}).status_code == 400
        token = csrf_of(c)
        assert pause(c, token, origin="https://evil.example.com").status_code == 403
        assert pause(c, token, origin="https://dash.example.com").status_code == 303
    assert Admin(db).paused().groups == ("mail",)
    Admin(db).resume("group", ["mail"])
    with TestClient(app, base_url="http://127.0.0.1:8080") as c:  # a proxy that sends the upstream's address
        assert pause(c, csrf_of(c), origin="https://dash.example.com").status_code == 303
    assert Admin(db).paused().groups == ("mail",)


HOSTILE = "abc\u202eexe.live\x07\x08\x08\x0b\x0c\x1b[2J\x9b\u2066x\u2069\u200f"


def test_control_and_bidi_characters_are_shown_escaped(web: TestClient, db: Any, db_uri: str) -> None:
    job = failed_job(db_uri, 1, datetime.now(UTC).replace(microsecond=0), message=f"bad {HOSTILE}")
    job["workable"]["parameters"]["note"] = HOSTILE
    job["group"] = f"mail{HOSTILE}"
    job["last_execution"]["logs"] = f"first line\n{HOSTILE}\n\ttabbed line\n"
    job["executions"] = [job["last_execution"]]
    job["workflow"] = {"id": ObjectId(), "name": f"wf{HOSTILE}", "step": "a", "deps": [], "kind": "workflow"}
    db.archived.insert_one(job)
    shown = r"abc\u202eexe.live\x07\x08\x08\x0b\x0c\x1b[2J\x9b\u2066x\u2069\u200f"
    for path in (f"/jobs/{job['_id']}", f"/jobs/{job['_id']}/live", "/failures", "/jobs", "/", "/workflows"):
        page = web.get(path)
        assert page.status_code in (200, 286), path
        assert not [c for c in RAW if c in page.text], path
    page = web.get(f"/jobs/{job['_id']}").text
    logs = re.search(r'<pre class="logs">(.*?)</pre>', page, re.DOTALL)
    assert logs, page[:500]
    assert logs.group(1) == f"first line\n{shown}\n\ttabbed line\n"  # a multi-line text keeps \n and \t
    assert f"bad {shown}" in page  # the error message
    assert f"bad {shown}" in web.get("/failures").text  # its first line, not cut at the VT
    assert f"mail{shown}" in page  # the group
    assert f"<td>wf{shown}</td>" in web.get("/workflows").text  # a workflow's name, as stored
    assert json.dumps(HOSTILE)[1:-1] in page  # the parameters, as JSON
    # A form sends the name back exactly as it was read: the hidden field is the raw name (HTML-escaped only).
    db.metadata.insert_one({"_id": "paused", "groups": [job["group"]], "tenants": []})
    switches = web.get("/switches").text
    assert f'value="mail{HOSTILE}"' in switches
    assert f"<td>mail{shown}</td>" in switches


def test_a_1mb_argument_gives_a_bounded_page_with_its_size_and_the_whole_value(web: TestClient, db: Any,
                                                                                db_uri: str) -> None:
    job = failed_job(db_uri, 1, datetime.now(UTC).replace(microsecond=0), message="m" * 1_000_000)
    job["workable"]["parameters"]["blob"] = "x" * (1024 * 1024)
    job["last_execution"]["logs"] = "l" * 1_000_000
    db.archived.insert_one(job)
    page = web.get(f"/jobs/{job['_id']}")
    assert page.status_code == 200
    assert len(page.content) < 64 * 1024
    assert "1.0 MiB in all" in page.text  # the size of the parameters, said where they are cut
    link = re.search(r'<a id="job-document" href="([^"]+)"', page.text)
    assert link
    document = web.get(link.group(1))
    assert document.status_code == 200
    assert document.headers["content-type"] == "application/json"
    assert document.headers["x-content-type-options"] == "nosniff"
    assert document.json()["workable"]["parameters"]["blob"] == "x" * (1024 * 1024)
    assert document.json()["last_execution"]["message"] == "m" * 1_000_000


@pytest.mark.parametrize("value", ["https://dash.example.com", "*", "::1", "a b"])
def test_a_bad_allowed_host_is_a_one_line_usage_error(value: str) -> None:
    done = run_cli("--allowed-host", value, "--target", "mongodb://127.0.0.1:1/x")
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 1, done.stderr
    assert "--allowed-host" in errors[0]
    assert "Traceback" not in done.stderr
