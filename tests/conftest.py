"""Test fixtures: a real server for each test module, a fresh database per test.

The server is the embedded SecantusDB, started as a separate process on a free
port with a throwaway storage directory (tests/servers.py: each while the module
before it runs), unless ``RECRUITER_TEST_MONGODB_URI`` points at a real MongoDB
(used by every module).

A server of its own per module, not one for the session: SecantusDB 0.7.0b3
keeps a record of every retryable write for 30 minutes and scans them all on
each retryable write (sorting them once there are more than 10 000), so a
server that has served a few minutes of process tests writes 10 to 30 times
slower than a fresh one. Shared by the whole suite, that made later tests
time out on a slower machine; see docs/operations/embedded-server.md, "Known gaps".
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import subprocess
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from pymongo import MongoClient
from pymongo.uri_parser import parse_uri

from recruiter.processes.embedded import free_port as free_port  # tests import it from here
from recruiter.store import strict
from recruiter.store.connection import ConnectionProblem, with_database
from tests.servers import Servers

REPO = Path(__file__).resolve().parent.parent

# The whole suite runs with the write guard on (recruiter.store.strict): every client the
# store builds, in this process and in the processes the tests start (they inherit the
# environment), checks each write against MongoDB's rules. This process's file collects
# the violations of all of them; _strict_writes fails the test that caused one.
os.environ.setdefault(strict.STRICT_ENVVAR, "1")
_fd, _strict_file = tempfile.mkstemp(prefix="recruiter-strict-writes-", suffix=".jsonl")
os.close(_fd)
os.environ[strict.FILE_ENVVAR] = _strict_file

# The hundreds of Python processes the suite starts compile the package once, not each its own
# (about 0.4 s of CPU a process): where the environment forbids bytecode files
# (PYTHONDONTWRITEBYTECODE), they keep them in a directory of the session's own, outside the checkout.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None and "PYTHONPYCACHEPREFIX" not in os.environ:
    os.environ["PYTHONPYCACHEPREFIX"] = _pycache = tempfile.mkdtemp(prefix="recruiter-tests-pycache-")
    atexit.register(shutil.rmtree, _pycache, ignore_errors=True)


@pytest.fixture(autouse=True)
def _strict_writes() -> Iterator[None]:
    """Fail the test during which some process sent a write MongoDB refuses (torn down last,
    after the processes the test started were stopped)."""
    path = os.environ.get(strict.FILE_ENVVAR, _strict_file)
    before = len(strict.read_file(path))
    strict.process_guard().take()
    yield
    found = strict.read_file(path)[before:]
    if found:
        pytest.fail("writes MongoDB refuses (RECRUITER_STRICT_WRITES):\n" + "\n".join(found[:20]), pytrace=False)


def guarded_client(uri: str, **options: Any) -> MongoClient[Any]:
    """A client of a test's own, checked by the write guard like the store's clients."""
    return MongoClient(uri, event_listeners=strict.listeners(), **options)


@pytest.fixture(autouse=True)
def _structlog_as_it_was() -> Iterator[None]:
    """Each test starts with the structlog configuration the session had: a command run in
    the test's process (click's CliRunner) configures logging for the whole process, with
    a level filter that would silently drop the debug events a later test captures."""
    config = structlog.get_config()
    yield
    structlog.configure(**config)


LONG_TESTS_ENVVAR = "RECRUITER_LONG_TESTS"


def long_or_short(envvar: str, short: float, long: float) -> float:
    """A size of a long process test (seconds, jobs, waves): ``$envvar`` when it is set, else
    ``long`` with ``RECRUITER_LONG_TESTS=1`` (the long tier, run before a release), else
    ``short`` (what CI and ``bin/test`` run). Both check the same assertions; the long one
    checks them over more kills, jobs or seconds (docs/development.md, "Test tiers")."""
    given = os.environ.get(envvar)
    if given:
        return float(given)
    return long if os.environ.get(LONG_TESTS_ENVVAR, "") not in ("", "0") else short


def cli_in_process(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``recruiter ARGS`` run in this process with click's ``CliRunner``, as ``run_cli``
    (tests/processes/test_cli_errors.py) runs it as ``python -m recruiter.cli``: the same
    ``returncode``, ``stdout`` and ``stderr``, without a Python start-up per command.

    For commands that only read or write the database and print: a test about processes,
    signals, the real entry point or its environment runs the subprocess. As in a
    subprocess, ``RECRUITER_MONGODB_URI`` and ``MONGODB_URI`` are unset unless ``env``
    gives them, and an unexpected exception is a traceback on stderr with status 1 (so a
    test that no traceback is printed still fails on one)."""
    from click.testing import CliRunner  # here: only the tests that run commands import the CLI

    from recruiter.cli.main import main

    unset: dict[str, str | None] = {"RECRUITER_MONGODB_URI": None, "MONGODB_URI": None}
    result = CliRunner().invoke(main, list(args), env={**unset, **(env or {})}, prog_name="recruiter")
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "Traceback (most recent call last):\n" + "".join(
            traceback.format_exception(result.exception)[1:])
    return subprocess.CompletedProcess(["recruiter", *args], result.exit_code, result.stdout, stderr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A report's captured output as text that can be sent: the hostile-job tests make jobs print
    lone surrogates, which a test process of bin/test (pytest-xdist) cannot encode to send to the
    one that reports, and the whole run stopped on it. They are shown as ``\\udfff`` escapes."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    report.sections = [(title, _sendable(text)) for title, text in report.sections]
    if isinstance(report.longrepr, str):
        report.longrepr = _sendable(report.longrepr)


def _sendable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--chaos-seconds", type=float, default=None,
                     help="How long tests/chaos kills processes (default: $RECRUITER_CHAOS_SECONDS or 40).")


async def wait_for_async(condition: Callable[[], Any], timeout_s: float = 30.0, interval_s: float = 0.05,
                         message: str = "condition") -> Any:
    """:func:`wait_for` for an awaitable ``condition``, on the running event loop."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {message}")
        await asyncio.sleep(interval_s)


def wait_for(condition: Callable[[], Any], timeout_s: float = 30.0, interval_s: float = 0.05,
             message: str = "condition") -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {message}")
        time.sleep(interval_s)


_servers = Servers()


def pytest_sessionfinish() -> None:
    _servers.close()  # the spare no module took


@pytest.fixture(scope="module")
def server_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("RECRUITER_TEST_MONGODB_URI")
    if external:
        parse_uri(external)
        yield external
        return
    try:
        server = _servers.take(tmp_path_factory.mktemp("secantus"), tmp_path_factory.mktemp("secantus"))
    except ConnectionProblem as exc:
        pytest.exit(f"{exc}, or set RECRUITER_TEST_MONGODB_URI", 2)
    try:
        yield server.uri
    finally:
        server.discard()


@pytest.fixture
def db_uri(server_uri: str) -> Iterator[str]:
    """A URI naming a database of this test's own, dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    uri = with_database(server_uri, name)
    yield uri
    client: MongoClient[Any] = MongoClient(uri)
    try:
        client.drop_database(name)
    finally:
        client.close()


@pytest.fixture
def db(db_uri: str) -> Iterator[Any]:
    client = guarded_client(db_uri, tz_aware=True)
    yield client.get_default_database()
    client.close()
