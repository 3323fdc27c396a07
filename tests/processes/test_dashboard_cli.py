"""``recruiter dashboard`` served for real (uvicorn) beyond localhost, with a token from the environment."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.processes.conftest import Processes
from tests.processes.test_dashboard_browser import free_port

pytestmark = pytest.mark.processes
TOKEN = "tok-for-the-cli-test"


def status_of(url: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return 0


def test_a_dashboard_beyond_localhost_asks_for_its_token(processes: Processes, db: Any) -> None:
    port = free_port()
    proc = processes.start("dashboard", "dashboard", "--host", "0.0.0.0", "--port", str(port),
                           env={"RECRUITER_DASHBOARD_TOKEN": TOKEN})
    url = f"http://127.0.0.1:{port}/"
    wait_for(lambda: status_of(url) == 401, timeout_s=60, message="the dashboard to answer 401")
    assert status_of(url, {"Authorization": "Bearer wrong"}) == 401
    assert status_of(url, {"Authorization": f"Bearer {TOKEN}"}) == 200
    basic = base64.b64encode(f"ops:{TOKEN}".encode()).decode()
    assert status_of(url + "jobs", {"Authorization": f"Basic {basic}"}) == 200
    processes.stop_all()
    log = proc.log()
    assert '"auth": "token"' in log
    assert TOKEN not in log
