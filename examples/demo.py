"""The demo behind ``bin/demo``: a whole recruiter installation on one machine.

It starts the embedded server (SecantusDB) with its storage in ``.demo/db``, then,
as separate processes logging JSON to ``.demo/logs/``: one recruiter, two
workers for ``billing``, one worker for ``reports`` running two jobs at a time,
and a cleaner. It enqueues the example jobs (:mod:`examples.enqueue`), shows
progress until every job is archived, prints a summary, and stops everything
(SIGTERM to workers, then recruiter and cleaner, then the server). With
``--keep`` the server is left running for a look at the history in ``mongosh``.

Every process it starts is written to ``.demo/pids.json``; a later run first
stops whatever an interrupted or ``--keep`` run left there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from examples.enqueue import enqueue_examples
from recruiter import ConnectionProblem, Recruiter
from recruiter.processes import embedded

ROOT = Path(__file__).resolve().parent.parent
# Where the demo keeps its data, logs and pids (the tests point it elsewhere).
DEMO = Path(os.environ.get("RECRUITER_DEMO_DIR") or ROOT / ".demo").resolve()
STORAGE = DEMO / "db"
LOGS = DEMO / "logs"
PIDS = DEMO / "pids.json"

WORKER_STOP_S = 15.0  # graceful stop: a worker finishes its job, then leaves the roster
PROCESS_STOP_S = 15.0
FORCED_STOP_S = 5.0  # after a second SIGTERM
SERVER_STOP_S = 20.0  # SecantusDB takes a few seconds to close its storage


class DemoFailed(Exception):
    """Something went wrong; the message says what and where to look."""


class Interrupted(Exception):
    """SIGINT, SIGTERM or SIGHUP."""


def shown(path: Path) -> str:
    """``path`` relative to the checkout when it is inside it."""
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def say(text: str = "") -> None:
    """Print, but never fail: a closed pipe (``bin/demo | head``) must not stop the clean-up."""
    try:
        print(text, flush=True)
    except (BrokenPipeError, ValueError):
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - for the rest of the run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    " + line for line in text[-lines:])


def runs(pid: int, marker: str) -> bool:
    """Whether process ``pid`` is alive and has ``marker`` in its command line (pids get reused)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return marker in raw.replace(b"\0", b" ").decode(errors="replace")


# -- processes ---------------------------------------------------------------------------


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    marker: str  # a string unique to this demo run in the process's command line

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None


class Processes:
    """What the demo started, in start order, also recorded in ``.demo/pids.json``."""

    def __init__(self) -> None:
        self.children: list[Child] = []
        self.force = False  # a second Ctrl-C: stop waiting
        self.killed = 0  # processes that had to be killed or exited with an error

    def start(self, name: str, argv: list[str], marker: str, env: dict[str, str] | None = None) -> Child:
        log = LOGS / f"{name}.log"
        with open(log, "ab") as out:
            # A session of its own: Ctrl-C reaches only the demo, which stops its
            # children in order instead of all of them at once.
            proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        child = Child(name, proc, log, marker)
        self.children.append(child)
        self._record()
        return child

    def _record(self, keep: list[Child] | None = None) -> None:
        kept = [c for c in (self.children if keep is None else keep) if c.alive()]
        if not kept:
            PIDS.unlink(missing_ok=True)
            return
        PIDS.write_text(json.dumps([{"name": c.name, "pid": c.pid, "marker": c.marker} for c in kept], indent=2))

    def check_alive(self) -> None:
        for c in self.children:
            if not c.alive():
                raise DemoFailed(f"{c.name} (pid {c.pid}) exited with code {c.proc.returncode}; "
                                 f"its log {shown(c.log)} ends with:\n{tail(c.log)}")

    def stop(self, children: list[Child], timeout_s: float) -> list[str]:
        """Stop ``children`` together; returns what did not go cleanly.

        SIGTERM asks for a graceful stop. A process still running ``timeout_s``
        later gets a second SIGTERM (the CLI's forced stop), then SIGKILL.
        """
        problems: list[str] = []
        for c in children:
            if c.alive():
                c.proc.send_signal(signal.SIGTERM)
        self._wait(children, timeout_s)
        slow = [c for c in children if c.alive()]
        for c in slow:
            problems.append(f"{c.name} (pid {c.pid}) was still running {timeout_s:.0f}s after SIGTERM; "
                            "sent a second SIGTERM (forced stop)")
            c.proc.send_signal(signal.SIGTERM)
        self._wait(slow, FORCED_STOP_S)
        for c in children:
            if c.alive():
                self.killed += 1
                problems.append(f"{c.name} (pid {c.pid}) ignored two SIGTERMs: killed")
                c.proc.kill()
                c.proc.wait()
            elif c.proc.returncode not in (0, -signal.SIGTERM):
                self.killed += 1
                problems.append(f"{c.name} (pid {c.pid}) exited with code {c.proc.returncode}; "
                                f"see {shown(c.log)}")
        return problems

    def _wait(self, children: list[Child], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while any(c.alive() for c in children) and time.monotonic() < deadline and not self.force:
            time.sleep(0.05)

    def stop_all(self, keep_server: bool) -> list[str]:
        """Workers first (they finish their jobs), then recruiter and cleaner, then the server."""
        groups: list[tuple[Callable[[Child], bool], float]] = [
            (lambda c: c.name.startswith("worker"), WORKER_STOP_S),
            (lambda c: c.name in ("recruiter", "cleaner"), PROCESS_STOP_S),
        ]
        if not keep_server:
            groups.append((lambda c: c.name == "server", SERVER_STOP_S))
        problems: list[str] = []
        stopped: set[int] = set()
        for wanted, timeout_s in groups:
            batch = [c for c in self.children if wanted(c) and c.pid not in stopped]
            problems += self.stop(batch, timeout_s)
            stopped.update(c.pid for c in batch)
        left = [c for c in self.children if c.pid not in stopped]
        if not keep_server:  # anything not covered above
            problems += self.stop(left, PROCESS_STOP_S)
            left = []
        self._record(keep=left)
        return problems


def stop_leftovers() -> None:
    """Stop processes an earlier demo left running (``--keep``, or a demo that was killed).

    Workers first and the server last, as at the end of a demo.
    """
    try:
        entries = json.loads(PIDS.read_text())
        live = [(e["name"], int(e["pid"]), e["marker"]) for e in entries if runs(int(e["pid"]), e["marker"])]
    except (OSError, ValueError, KeyError, TypeError):
        return
    for stage in (("worker",), ("recruiter", "cleaner"), ("server",)):
        batch = [(name, pid, marker) for name, pid, marker in live if name.startswith(stage)]
        for name, pid, _ in batch:
            say(f"stopping the {name} (pid {pid}) an earlier demo left running")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + SERVER_STOP_S
        while any(runs(pid, marker) for _, pid, marker in batch) and time.monotonic() < deadline:
            time.sleep(0.1)
        for name, pid, marker in batch:
            if runs(pid, marker):
                say(f"  {name} (pid {pid}) did not stop within {SERVER_STOP_S:.0f}s: killed")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    PIDS.unlink(missing_ok=True)


def server_command() -> str:
    try:
        return embedded.server_command()
    except ConnectionProblem as exc:
        raise DemoFailed(f"{exc}; or run bin/setup-env") from None


def wait_for(what: str, check: Callable[[], bool], timeout_s: float, processes: Processes) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        processes.check_alive()
        if time.monotonic() >= deadline:
            raise DemoFailed(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.1)


def pinged(client: MongoClient[Any]) -> bool:
    try:
        client.admin.command("ping")
        return True
    except PyMongoError:
        return False


# -- the demo ---------------------------------------------------------------------------


def start_installation(processes: Processes, port: int, uri: str) -> None:
    server_args = ["--host", "127.0.0.1", "--port", str(port), "--storage-path", str(STORAGE)]
    server = processes.start("server", [server_command(), *server_args], marker=" ".join(server_args[2:]))
    say(f"embedded server (SecantusDB) pid {server.pid} on {uri}, storage {shown(STORAGE)}/")
    probe: MongoClient[Any] = MongoClient(uri, serverSelectionTimeoutMS=300, connectTimeoutMS=300)
    try:
        wait_for("the embedded server to answer", lambda: pinged(probe), 60, processes)
    finally:
        probe.close()

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    common = ["--target", uri, "--log-format", "json"]
    bin_ = ROOT / "bin"
    commands = [
        ("recruiter", [str(bin_ / "recruiter"), "start", *common]),
        ("worker-billing-1", [str(bin_ / "worker"), "start", "--group", "billing", "--id", "billing-1", *common]),
        ("worker-billing-2", [str(bin_ / "worker"), "start", "--group", "billing", "--id", "billing-2", *common]),
        ("worker-reports", [str(bin_ / "worker"), "start", "--group", "reports", "--concurrency", "2",
                            "--id", "reports", *common]),
        ("cleaner", [str(bin_ / "cleaner"), "start", *common]),
    ]
    for name, argv in commands:
        child = processes.start(name, argv, marker=uri, env=env)
        command = " ".join([Path(argv[0]).name, *argv[1:-len(common)]])
        say(f"  {name:<17} pid {child.pid:<7} {command}")
    say(f"  logs (JSON lines) in {shown(LOGS)}/")


def wait_for_workers(db: Any, processes: Processes, expected: int) -> None:
    def ready() -> bool:
        workers = db.roster.count_documents({})
        leader = db.metadata.find_one({"_id": "recruiter", "owner": {"$ne": None}})
        return workers >= expected and leader is not None

    say(f"waiting for {expected} workers to register and for the recruiter to lead...")
    wait_for(f"{expected} workers in the roster and a recruiter lease", ready, 60, processes)


def counts(collection: Any, field: str, match: dict[str, Any]) -> dict[str, int]:
    return {str(d["_id"]): d["n"] for d in collection.aggregate(
        [{"$match": match}, {"$group": {"_id": f"${field}", "n": {"$sum": 1}}}])}


def fmt(counter: dict[str, int], order: tuple[str, ...] = ()) -> str:
    keys = sorted(counter, key=lambda k: (order.index(k) if k in order else len(order), k))
    return " ".join(f"{k}={counter[k]}" for k in keys) or "-"


STATUS_ORDER = ("queued", "assigned", "retrying")
WHY_ORDER = ("done", "tried-too-many-times", "non-retriable-exception")


def watch(db: Any, ids: list[Any], processes: Processes, timeout_s: float) -> float:
    """Print progress once a second until every job is archived; returns the elapsed seconds."""
    started = time.monotonic()
    ours = {"_id": {"$in": ids}}
    while True:
        processes.check_alive()
        scheduled = counts(db.scheduled, "status", ours)
        archived = counts(db.archived, "why", ours)
        done = sum(archived.values())
        elapsed = time.monotonic() - started
        say(f"  {elapsed:5.1f}s  scheduled: {fmt(scheduled, STATUS_ORDER):<36} "
            f"archived {done:>3}/{len(ids)}: {fmt(archived, WHY_ORDER)}")
        if done == len(ids):
            return elapsed
        if elapsed >= timeout_s:
            raise DemoFailed(
                f"only {done} of {len(ids)} jobs were archived after {timeout_s:.0f}s; "
                f"still scheduled: {fmt(scheduled, STATUS_ORDER)}. Look at the logs in {shown(LOGS)}/"
            )
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started - elapsed)))


def log_problems() -> list[str]:
    """Warning and error lines of the JSON logs, for the summary."""
    found: list[str] = []
    for log in sorted(LOGS.glob("*.log")):
        if log.name == "server.log":
            continue
        for line in log.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                found.append(f"{log.name}: {line[:200]}")  # not JSON: a traceback or a crash
                continue
            if isinstance(entry, dict) and entry.get("level") in ("warning", "error", "critical"):
                found.append(f"{log.name}: {entry.get('level')} {entry.get('event')} "
                             + json.dumps({k: v for k, v in entry.items()
                                           if k not in ("level", "event", "timestamp")})[:200])
    return found


def summary(db: Any, ids: list[Any], elapsed: float) -> None:
    jobs = list(db.archived.find({"_id": {"$in": ids}},
                                 {"why": 1, "group": 1, "attempts": 1, "executions.worker": 1}))
    by_why = Counter(j["why"] for j in jobs)
    by_group: dict[str, Counter[str]] = defaultdict(Counter)
    by_worker: Counter[str] = Counter()
    for j in jobs:
        by_group[j["group"]][j["why"]] += 1
        by_worker.update(e.get("worker", "?") for e in j.get("executions") or [])
    retried = [j for j in jobs if j.get("attempts", 0) > 1]
    attempts = sum(j.get("attempts", 0) for j in jobs)

    say()
    say("== summary " + "=" * 60)
    say(f"{len(jobs)} jobs enqueued and archived in {elapsed:.1f}s ({attempts} attempts in all)")
    say(f"  by why:     {fmt(by_why, WHY_ORDER)}")
    say(f"  retried:    {len(retried)} jobs ran more than once "
        f"({sum(j['attempts'] - 1 for j in retried)} extra attempts)")
    for group in sorted(by_group):
        say(f"  {group + ':':<11} {sum(by_group[group].values()):>3} jobs, {fmt(by_group[group], WHY_ORDER)}")
    say(f"  attempts by worker: {fmt(dict(by_worker))}")


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)

    def interrupted(signum: int, frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)

    processes = Processes()
    ok = False
    port = args.port or 0
    started = time.monotonic()
    try:
        port = _run(processes, args)
        ok = True
    except Interrupted as exc:
        say(f"\ninterrupted ({exc}): stopping everything the demo started")
    except (DemoFailed, ConnectionProblem) as exc:
        say(f"\nDEMO FAILED: {exc}")
    except Exception:  # noqa: BLE001 - a bug: show it, but still stop everything
        with contextlib.suppress(OSError):
            traceback.print_exc()
        say("\nDEMO FAILED: unexpected error (traceback above)")
    finally:
        keep = ok and args.keep
        problems = _stop(processes, keep=keep)

    _show_log_problems()
    if not ok:
        say(f"Everything the demo started has been stopped; the logs are in {shown(LOGS)}/.")
        return 1
    _closing_words(processes, port, keep=keep, problems=problems, started=started)
    return 1 if processes.killed else 0


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bin/demo", description="Run recruiter on the example jobs.")
    parser.add_argument("--keep", action="store_true",
                        help="leave the embedded server running at the end (to look around with mongosh)")
    parser.add_argument("--count", type=int, default=60, help="how many jobs to enqueue (default: 60)")
    parser.add_argument("--port", type=int, default=0, help="port of the embedded server (default: a free one)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds to wait for every job to be archived (default: 120)")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("--count must be at least 1")
    return args


def _run(processes: Processes, args: argparse.Namespace) -> int:
    """Start the installation, enqueue the examples and watch them finish; the server's port."""
    DEMO.mkdir(parents=True, exist_ok=True)
    stop_leftovers()
    shutil.rmtree(STORAGE, ignore_errors=True)
    shutil.rmtree(LOGS, ignore_errors=True)
    LOGS.mkdir(parents=True)
    port: int = args.port or free_port()
    uri = f"mongodb://127.0.0.1:{port}/recruiter"
    start_installation(processes, port, uri)
    with Recruiter.connect(uri) as rec:
        wait_for_workers(rec.db, processes, expected=4)
        ids = enqueue_examples(rec, args.count)
        say(f"enqueued {len(ids)} jobs in one round trip (python -m examples.enqueue does the same)")
        elapsed = watch(rec.db, ids, processes, args.timeout)
        summary(rec.db, ids, elapsed)
    return port


def _stop(processes: Processes, *, keep: bool) -> list[str]:
    """Stop what the demo started (a second signal forces it); the problems met."""
    def force(signum: int, frame: Any) -> None:
        processes.force = True

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, force)
    say("\nstopping: workers, then recruiter and cleaner" + ("" if keep else ", then the server") + "...")
    problems = processes.stop_all(keep_server=keep)
    for p in problems:
        say(f"  ! {p}")
    return problems


def _show_log_problems() -> None:
    warnings = log_problems()
    if warnings:
        say(f"\n{len(warnings)} warning/error lines in the logs, the first ones:")
        for w in warnings[:8]:
            say(f"  {w}")


def _closing_words(processes: Processes, port: int, *, keep: bool, problems: list[str], started: float) -> None:
    """Where the history is, and how to look at it."""
    uri = f"mongodb://127.0.0.1:{port}/recruiter"
    say()
    say("The history is in MongoDB: one document per job in `archived`, its attempts in `executions`.")
    if keep:
        server = next(c for c in processes.children if c.name == "server")
        say(f"The embedded server was left running at {uri}")
        say(f"(pid {server.pid}; `kill {server.pid}` stops it, and so does the next bin/demo). Look around with:")
    else:
        say(f"Everything the demo started has been stopped ({time.monotonic() - started:.0f}s in all)"
            + (", with the problems shown above." if problems else "."))
        say(f"The data stays in {shown(STORAGE)}; to look at it, start the server again (or use `bin/demo --keep`):")
        say(f"  bin/recruiter embedded start --target mongodb://127.0.0.1:{port}/ --embedded-path {shown(STORAGE)}")
        say("then:")
    say(f"  npx mongosh {uri} --eval 'db.archived.find({{why: \"done\"}}).limit(3)'")
    say(f"  npx mongosh {uri} --eval 'db.archived.find({{why: {{$ne: \"done\"}}}})'")
    say(f"  bin/recruiter status --target {uri}")


if __name__ == "__main__":
    sys.exit(main())
