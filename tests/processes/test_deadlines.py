"""Deadlines are kept while the server stalls (issue 21, item 6).

``handle.wait(timeout=3)``, started 1 s into a 20 s server stop (SIGSTOP), used to raise
``TimeoutError`` after 19 s, when the server came back: the deadline was checked
between server calls, not carried into them. Now every server call of a wait gets the
time left (PyMongo's client-side timeout, recruiter.store.deadlines). A server of this
test's own is stopped, so no other test waits on it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from recruiter import AsyncRecruiter, Recruiter
from recruiter.processes import embedded
from recruiter.processes.embedded import free_port
from tests.processes.test_cli_errors import assert_one_line_error, run_cli
from tests.workables import Record

pytestmark = pytest.mark.skipif(bool(os.environ.get("RECRUITER_TEST_MONGODB_URI")),
                                reason="stops a server of its own (SIGSTOP), the embedded one")

TIMEOUT_S = 3.0


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    with embedded.serving(port, tmp_path / "data", log_path=tmp_path / "server.log") as proc:
        try:
            yield f"mongodb://127.0.0.1:{port}/deadlines", proc
        finally:
            proc.send_signal(signal.SIGCONT)


def _stalled(proc: subprocess.Popen[bytes], wait: Callable[[], object]) -> float:
    """Stop the server, start ``wait`` 1 s later, and return how long it took to raise TimeoutError."""
    proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(1.0)  # the stall is under way when the wait starts (as in the measurement)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            wait()
        return time.monotonic() - started
    finally:
        proc.send_signal(signal.SIGCONT)


def test_a_sync_wait_keeps_its_deadline_while_the_server_is_stopped(
        own_server: tuple[str, subprocess.Popen[bytes]]) -> None:
    uri, proc = own_server
    with Recruiter.connect(uri) as rec:
        handle = rec.enqueue(Record(uri, n=1))  # no worker: it never finishes
        took = _stalled(proc, lambda: handle.wait(timeout=TIMEOUT_S))
    print(f"sync wait(timeout={TIMEOUT_S:g}) raised after {took:.2f}s of a stopped server")
    assert took < TIMEOUT_S + 1.0


def test_an_asyncio_wait_keeps_its_deadline_while_the_server_is_stopped(
        own_server: tuple[str, subprocess.Popen[bytes]]) -> None:
    uri, proc = own_server

    async def scenario() -> float:
        async with await AsyncRecruiter.connect(uri) as rec:
            handle = await rec.enqueue(Record(uri, n=1))  # no worker: it never finishes
            proc.send_signal(signal.SIGSTOP)
            try:
                await asyncio.sleep(1.0)
                started = time.monotonic()
                with pytest.raises(TimeoutError):
                    await handle.wait(timeout=TIMEOUT_S)
                return time.monotonic() - started
            finally:
                proc.send_signal(signal.SIGCONT)

    took = asyncio.run(scenario())
    print(f"asyncio wait(timeout={TIMEOUT_S:g}) raised after {took:.2f}s of a stopped server")
    assert took < TIMEOUT_S + 1.0


def test_an_operator_command_against_a_stopped_server_is_one_line_in_bounded_time(
        own_server: tuple[str, subprocess.Popen[bytes]]) -> None:
    uri, proc = own_server
    with Recruiter.connect(uri) as rec:
        rec.enqueue(Record(uri, n=1))
    proc.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        result = run_cli("status", "--target", uri, env={"RECRUITER_COMMAND_TIMEOUT": "3s"})
        took = time.monotonic() - started
    finally:
        proc.send_signal(signal.SIGCONT)
    assert_one_line_error(result)
    print(f"recruiter status against a stopped server: {result.stderr.strip()!r} after {took:.1f}s")
    assert took < 20.0
