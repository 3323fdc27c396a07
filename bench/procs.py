"""The processes of one scenario: real CLI processes, each counting its own commands.

Every process gets ``RECRUITER_COMMAND_STATS`` pointing at a file of its own;
its kind (recruiter, worker, cleaner) is the file name's prefix, so the figures
can be summed per kind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.stats import read_stats, totals
from recruiter.store.monitoring import STATS_ENVVAR

REPO = Path(__file__).resolve().parent.parent
# Per-job logging costs CPU the v1 worker does not spend: keep logs to warnings.
LOG_ARGS = ["--log-format", "json", "--log-level", "warning"]


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time of a process so far, from /proc (Linux), in seconds."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Proc:
    kind: str
    popen: subprocess.Popen[bytes]
    stats_path: Path
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def cpu_s(self) -> float | None:
        return cpu_seconds(self.pid)

    def rss_kib(self) -> int | None:
        """Resident memory from /proc (Linux), in KiB."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            return None
        return None


@dataclass
class Fleet:
    """Starts and stops the processes of one scenario; reads their command stats."""

    uri: str
    work_dir: Path
    procs: list[Proc] = field(default_factory=list)
    # The checkout whose code the processes run (``bin/bench --capacity-baseline-code``: an earlier
    # commit's worktree, measured beside this one in the same run).
    code: Path = REPO

    def start(self, kind: str, argv: list[str], extra_env: dict[str, str] | None = None) -> Proc:
        n = sum(p.kind == kind for p in self.procs)
        stats_path = self.work_dir / f"{kind}-{n}.stats.json"
        log_path = self.work_dir / f"{kind}-{n}.log"
        # The bench's own settings only: no RECRUITER_* variable of the caller's environment (a target,
        # --prefetch, --coalesce...) changes a process's options.
        env = {k: v for k, v in os.environ.items() if not k.startswith("RECRUITER_") and k != "MONGODB_URI"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.code), os.environ.get("PYTHONPATH")]))
        env[STATS_ENVVAR] = str(stats_path)
        env.update(extra_env or {})
        with open(log_path, "wb") as out:
            popen = subprocess.Popen([sys.executable, *argv], stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=self.code, env=env)
        proc = Proc(kind, popen, stats_path, log_path)
        self.procs.append(proc)
        return proc

    def product(self, kind: str, *args: str, extra_env: dict[str, str] | None = None) -> Proc:
        return self.start(kind, ["-m", "recruiter.cli", *args, "--target", self.uri, *LOG_ARGS], extra_env)

    def of_kind(self, kind: str) -> list[Proc]:
        return [p for p in self.procs if p.kind == kind]

    def check_alive(self) -> None:
        for p in self.procs:
            if p.popen.poll() is not None:
                raise RuntimeError(f"{p.kind} process {p.pid} exited with {p.popen.returncode}: "
                                   f"{p.log_path.read_text(errors='replace')[-1500:]}")

    def idle_window(self, settle_s: float, window_s: float) -> tuple[dict[str, dict[str, Any]],
                                                                    dict[str, dict[str, Any]], float]:
        """After ``settle_s``, the figures at the start and at the end of a ``window_s`` window of
        nothing enqueued (:meth:`flush`), and the window's measured length in seconds."""
        time.sleep(settle_s)
        a, t0 = self.flush(), time.perf_counter()
        time.sleep(window_s)
        b, t1 = self.flush(), time.perf_counter()
        return a, b, t1 - t0

    def flush(self, timeout_s: float = 30.0) -> dict[str, dict[str, Any]]:
        """Ask every process for its figures as of now (SIGUSR2) and sum them per kind."""
        asked = time.time()
        for p in self.procs:
            if p.popen.poll() is None:
                p.popen.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + timeout_s
        snapshots: dict[int, dict[str, Any] | None] = {}
        pending = [p for p in self.procs if p.popen.poll() is None]
        while pending and time.monotonic() < deadline:
            for p in list(pending):
                snap = read_stats(p.stats_path)
                if snap is not None and snap["written_at"] >= asked:
                    snapshots[p.pid] = snap
                    pending.remove(p)
            if pending:
                time.sleep(0.01)
        if pending:
            raise RuntimeError(f"no fresh command stats from {[p.kind for p in pending]} after {timeout_s}s")
        for p in self.procs:  # processes that already exited left their final figures
            snapshots.setdefault(p.pid, read_stats(p.stats_path))
        kinds = sorted({p.kind for p in self.procs})
        return {k: totals(snapshots[p.pid] for p in self.of_kind(k)) for k in kinds}

    def stop(self, timeout_s: float = 30.0) -> None:
        for p in self.procs:
            if p.popen.poll() is None:
                p.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for p in self.procs:
            try:
                p.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait(5)


def describe_code(code: Path) -> str:
    """The commit a baseline checkout is at (its path if git cannot say)."""
    try:
        out = subprocess.run(["git", "-C", str(code), "log", "-1", "--format=%h %s"], capture_output=True,
                             text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return str(code)
    return f"{out[:80]} ({code})"
