"""A process started against a server recruiter cannot run on (a standalone ``mongod``, or a
release older than 6.0) refuses in one line and exits 2, before its first transaction fails."""

from __future__ import annotations

import subprocess
import sys

import pytest

from recruiter.domain.deployment import MIN_SERVER, deployment_problem
from tests.hello_server import answering_hello

pytestmark = pytest.mark.processes

STANDALONE_7 = {"maxWireVersion": 21}
REPLICA_SET_5 = {"maxWireVersion": 13, "setName": "rs0"}


def run(*args: str, uri: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "recruiter.cli", *args, "--target", uri],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("command", "fields", "says"), [
    (("start",), STANDALONE_7, "is a standalone server: recruiter needs a replica set"),
    (("worker", "start", "--group", "g"), REPLICA_SET_5, f"is older than {MIN_SERVER} (wire version 13"),
    (("cleaner", "start"), STANDALONE_7, "is a standalone server: recruiter needs a replica set"),
    (("dashboard",), REPLICA_SET_5, f"is older than {MIN_SERVER} (wire version 13"),
])
def test_a_process_refuses_a_server_it_cannot_run_on_in_one_line(command: tuple[str, ...], fields: dict[str, object],
                                                                  says: str) -> None:
    with answering_hello(**fields) as uri:
        result = run(*command, uri=uri)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert says in lines[0]
    assert "Traceback" not in result.stderr


def test_the_embedded_server_and_the_deployments_recruiter_supports_pass() -> None:
    assert deployment_problem({"maxWireVersion": 17, "setName": "rs0"}, "here") is None  # 6.0, replica set
    assert deployment_problem({"maxWireVersion": 25, "msg": "isdbgrid"}, "here") is None  # 8.0, mongos
    assert deployment_problem({"maxWireVersion": 27, "setName": "secantus"}, "here") is None


@pytest.mark.parametrize("hello", [
    {"maxWireVersion": "21", "setName": "rs0"},
    {"maxWireVersion": True, "setName": "rs0"},
    {"setName": "rs0"},
    {"maxWireVersion": 21, "setName": ""},
    {"maxWireVersion": 21, "setName": {"$ne": None}},
    {"maxWireVersion": 16, "msg": "isdbgrid"},
])
def test_a_hello_that_does_not_prove_a_supported_deployment_is_refused(hello: dict[str, object]) -> None:
    problem = deployment_problem(hello, "db.example:27017")
    assert problem is not None
    assert "db.example:27017" in problem
    assert "\n" not in problem
