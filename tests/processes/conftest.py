"""Multi-process scenarios: the real CLI processes against the test's database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

# Short timings so scenarios finish quickly; every one is an ordinary CLI option.
FAST_RECRUITER = ["--backoff-from", "20ms", "--backoff-to", "200ms", "--lease-ttl", "2s"]
FAST_WORKER = ["--heartbeat-interval", "300ms", "--poll-from", "10ms", "--poll-to", "100ms"]
FAST_CLEANER = ["--considered-dead-after", "2s", "--heartbeat-interval", "300ms", "--interval", "200ms",
                "--lease-ttl", "2s"]


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    def wait(self, timeout_s: float) -> int:
        return self.popen.wait(timeout_s)


@dataclass
class Processes:
    """Starts ``python -m recruiter.cli ...`` processes and cleans up after the test."""

    db_uri: str
    log_dir: Path
    started: list[Proc] = field(default_factory=list)

    def start(self, name: str, *args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> Proc:
        log_path = self.log_dir / f"{name}-{len(self.started)}.log"
        full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        for var in ("RECRUITER_MONGODB_URI", "MONGODB_URI"):
            full_env.pop(var, None)
        with open(log_path, "wb") as out:
            popen = subprocess.Popen(
                [sys.executable, "-m", "recruiter.cli", *args, "--target", self.db_uri, "--log-format", "json"],
                stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=full_env,
            )
        proc = Proc(name, popen, log_path)
        self.started.append(proc)
        return proc

    def recruiter(self, *extra: str) -> Proc:
        return self.start("recruiter", "start", *FAST_RECRUITER, *extra)

    def worker(self, *extra: str) -> Proc:
        return self.start("worker", "worker", "start", *FAST_WORKER, *extra)

    def cleaner(self, *extra: str) -> Proc:
        return self.start("cleaner", "cleaner", "start", *FAST_CLEANER, *extra)

    def stop_all(self) -> None:
        for p in self.started:
            if p.popen.poll() is None:
                p.signal(signal.SIGTERM)
        for p in self.started:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.wait(5)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} (pid {p.pid}) ---\n{p.log()[-3000:]}" for p in self.started)


@pytest.fixture
def processes(db_uri: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Processes]:
    procs = Processes(db_uri, tmp_path)
    yield procs
    procs.stop_all()
    report: Any = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(procs.logs())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)
