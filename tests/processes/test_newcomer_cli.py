"""What a newcomer meets first on the command line (issue 10): usage lines of ``worker``
and ``cleaner``, ``recruiter embedded`` on the URI's port, the life of a server started
by ``--embedded``, the dead-after check, pausing a name nobody uses, and clean stops."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import PyMongoError

from recruiter import Recruiter
from recruiter.processes.embedded import start as start_server
from recruiter.processes.embedded import stop_recorded
from recruiter.store import strict
from tests.conftest import REPO, cli_in_process, free_port, wait_for
from tests.processes.conftest import FAST_WORKER, Processes
from tests.processes.test_cli_errors import assert_one_line_error, run_cli
from tests.workables import Record

NEVER = "mongodb://127.0.0.1:1/never-contacted"


def run_entry(entry: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``worker ...`` or ``cleaner ...`` through the entry point the console scripts call."""
    code = f"from recruiter.cli import {entry}_main; {entry}_main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)


def answers(uri: str) -> bool:
    client: MongoClient[Any] = MongoClient(uri, serverSelectionTimeoutMS=300, event_listeners=strict.listeners())
    try:
        client.admin.command("ping")
        return True
    except PyMongoError:
        return False
    finally:
        client.close()


# -- usage lines ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["worker", "cleaner"])
def test_usage_lines_and_hints_name_the_command_as_typed(name: str) -> None:
    help_ = run_entry(name, "start", "--help")
    assert help_.returncode == 0, help_.stderr
    assert help_.stdout.startswith(f"Usage: {name} start [OPTIONS]"), help_.stdout[:200]
    bad = run_entry(name, "start", "--no-such-option")
    assert bad.returncode == 2
    assert f"Usage: {name} start [OPTIONS]" in bad.stderr
    assert f"Try '{name} start --help' for help." in bad.stderr, bad.stderr
    assert f"{name} {name}" not in bad.stderr + help_.stdout
    # The bin/ wrappers say the same.
    wrapped = subprocess.run([str(REPO / "bin" / name), "start", "--help"], capture_output=True, text=True,
                             timeout=60)
    assert wrapped.stdout.startswith(f"Usage: {name} start [OPTIONS]"), wrapped.stderr
    # And under recruiter, the full path.
    nested = run_cli(name, "start", "--help")
    assert nested.stdout.startswith(f"Usage: recruiter {name} start [OPTIONS]"), nested.stdout[:200]


# -- recruiter embedded ---------------------------------------------------------------------


@pytest.mark.parametrize("source", ["--target", "RECRUITER_MONGODB_URI", "MONGODB_URI"])
def test_embedded_start_listens_where_the_uri_says_and_stops(source: str, tmp_path: Path) -> None:
    port = free_port()
    uri = f"mongodb://localhost:{port}/mine"
    storage = tmp_path / "embedded"
    args = ["--embedded-path", str(storage)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for var in ("RECRUITER_MONGODB_URI", "MONGODB_URI"):
        env.pop(var, None)
    if source == "--target":
        args += ["--target", uri]
    else:
        env[source] = uri
    server = subprocess.Popen([sys.executable, "-m", "recruiter.cli", "embedded", "start", *args], cwd=REPO,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: answers(f"mongodb://127.0.0.1:{port}/"), timeout_s=30, message=f"a server on {port}")
        assert not answers("mongodb://127.0.0.1:27017/") or port == 27017
        status = subprocess.run([sys.executable, "-m", "recruiter.cli", "embedded", "status", *args], cwd=REPO,
                                env=env, capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, status.stderr
        assert re.search(f"pid \\d+ on mongodb://127.0.0.1:{port}/, .*: answering", status.stdout), status.stdout
        stop = subprocess.run([sys.executable, "-m", "recruiter.cli", "embedded", "stop", *args], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=60)
        assert stop.returncode == 0, stop.stderr
        server_pid = status.stdout.split()[3]
        assert f"stopped the embedded server pid {server_pid} on mongodb://127.0.0.1:{port}/" in stop.stdout
        assert server.wait(20) == 0
        assert not answers(f"mongodb://127.0.0.1:{port}/")
        output = server.stdout.read() if server.stdout else ""
        assert f"on mongodb://127.0.0.1:{port}/mine" in output, output
        after = subprocess.run([sys.executable, "-m", "recruiter.cli", "embedded", "status", *args], cwd=REPO,
                               env=env, capture_output=True, text=True, timeout=60)
        assert after.returncode == 1
        assert "no embedded server runs" in after.stdout
    finally:
        stop_recorded(storage)
        if server.poll() is None:
            server.kill()
            server.wait(10)


def test_the_default_storage_is_the_projects_own(tmp_path: Path) -> None:
    """Without --embedded-path, a server keeps its data under the current directory (the project's), kept
    out of its git; a command run in another project's directory does not see it."""
    port = free_port()
    project, other = tmp_path / "project", tmp_path / "other"
    project.mkdir()
    other.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RECRUITER_EMBEDDED_PATH", "RECRUITER_MONGODB_URI")}
    env.update(PYTHONPATH=str(REPO), XDG_DATA_HOME=str(tmp_path / "data"), HOME=str(tmp_path / "home"))
    cli = [sys.executable, "-m", "recruiter.cli", "embedded"]
    target = ["--target", f"mongodb://127.0.0.1:{port}/mine"]
    server = subprocess.Popen([*cli, "start", *target], cwd=project, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    storage = project / ".recruiter" / "embedded"
    try:
        wait_for(lambda: answers(f"mongodb://127.0.0.1:{port}/"), timeout_s=30, message=f"a server on {port}")
        # The record is written once the server answers, a moment after.
        wait_for(lambda: (storage / "server.pid").exists(), timeout_s=30, message="the server's record")
        assert (project / ".recruiter" / ".gitignore").read_text().splitlines()[-1] == "*"
        elsewhere = subprocess.run([*cli, "status", *target], cwd=other, env=env, capture_output=True, text=True,
                                   timeout=60)
        assert elsewhere.returncode == 1
        assert f"no embedded server runs on storage {other / '.recruiter' / 'embedded'}" in elsewhere.stdout
        here = subprocess.run([*cli, "status", *target], cwd=project, env=env, capture_output=True, text=True,
                              timeout=60)
        assert here.returncode == 0, here.stdout + here.stderr
        assert f"storage {storage}: answering" in here.stdout
        stop = subprocess.run([*cli, "stop"], cwd=project, env=env, capture_output=True, text=True, timeout=60)
        assert stop.returncode == 0, stop.stderr
        assert server.wait(20) == 0
    finally:
        stop_recorded(storage)
        if server.poll() is None:
            server.kill()
            server.wait(10)


def test_embedded_start_refuses_a_remote_host_and_an_occupied_port(server_uri: str) -> None:
    assert_one_line_error(run_cli("embedded", "start", "--target", "mongodb://db.example.com:27017/x"),
                          "only runs on this machine")
    assert_one_line_error(run_cli("embedded", "start", "--target", server_uri), "already answers")
    assert_one_line_error(run_cli("embedded", "stop", "--embedded-path", "/nonexistent/storage"),
                          "no embedded server runs")


def test_a_server_started_by_embedded_is_logged_and_kept_until_stopped(tmp_path: Path) -> None:
    port = free_port()
    storage = tmp_path / "embedded"
    uri = f"mongodb://127.0.0.1:{port}/demo"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "recruiter.cli", "worker", "start", "--target", uri, "--embedded",
         "--embedded-path", str(storage), "--log-format", "json", *FAST_WORKER],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO, env=env, text=True)
    stopped = False
    try:
        with Recruiter.connect(uri) as rec:
            wait_for(lambda: rec.db.roster.count_documents({}) == 2, timeout_s=60,
                     message="the worker registered (its entry and its look-ahead lane)")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0
        lines = [json.loads(line) for line in (worker.stdout.read() if worker.stdout else "").splitlines()
                 if line.startswith("{")]
        started = [entry for entry in lines if entry["event"] == "embedded.started"]
        assert len(started) == 1, lines
        assert started[0]["uri"] == f"mongodb://127.0.0.1:{port}/"
        assert started[0]["storage"] == str(storage)
        assert started[0]["lifetime"].startswith("kept: it keeps running after this process exits")
        # Kept on purpose: the worker is gone, the server answers, until it is stopped.
        assert answers(uri)
        status = run_cli("embedded", "status", "--embedded-path", str(storage))
        assert status.returncode == 0
        assert f"pid {started[0]['pid']} on mongodb://127.0.0.1:{port}/" in status.stdout
        stop = run_cli("embedded", "stop", "--embedded-path", str(storage))
        stopped = stop.returncode == 0
        assert stopped, stop.stderr
        assert not answers(uri)
    finally:
        if worker.poll() is None:
            worker.kill()
        if not stopped:
            stop_recorded(storage)


# -- the dead-after check -------------------------------------------------------------------


def test_considered_dead_after_under_twice_a_given_heartbeat_is_refused() -> None:
    result = run_cli("cleaner", "start", "--considered-dead-after", "9s", "--heartbeat-interval", "5s",
                     "--target", NEVER)
    assert result.returncode == 2
    assert_one_line_error(result, "--considered-dead-after 9s is shorter than twice --heartbeat-interval (5s)",
                          "use at least 10s")
    short = run_cli("cleaner", "start", "--considered-dead-after", "1s", "--heartbeat-interval", "600ms",
                    "--target", NEVER)
    assert_one_line_error(short, "twice --heartbeat-interval (600ms)", "use at least 1.2s")
    from_env = run_cli("cleaner", "start", "--target", NEVER, env={"RECRUITER_CONSIDERED_DEAD_AFTER": "3s",
                                                                     "RECRUITER_HEARTBEAT_INTERVAL": "5s"})
    assert_one_line_error(from_env, "--considered-dead-after 3s is shorter than twice")


def test_a_registered_worker_with_a_longer_heartbeat_is_counted(db: Any, db_uri: str) -> None:
    db.roster.insert_one({"_id": "slow-beat", "heartbeat_interval_s": 5.0, "work_on": ["*"]})
    db.roster.insert_one({"_id": "quick-beat", "heartbeat_interval_s": 0.3, "work_on": ["*"]})
    result = run_cli("cleaner", "start", "--considered-dead-after", "2s", "--heartbeat-interval", "300ms",
                     "--target", db_uri)
    assert result.returncode == 2
    assert_one_line_error(result, "the heartbeat interval of worker 'slow-beat' (5s)", "use at least 10s")
    assert db.metadata.find_one({"_id": "cleaner"}) is None, "the refused cleaner took no lease"


# -- pausing a name nobody uses -------------------------------------------------------------
# (commands that only read, write and print: in this process, tests.conftest.cli_in_process)


def test_pausing_a_group_nobody_uses_asks_for_force(db: Any, db_uri: str) -> None:
    refused = cli_in_process("groups", "pause", "no-such-group", "--target", db_uri)
    assert refused.returncode == 1
    assert_one_line_error(refused, "no job or worker has ever used the group 'no-such-group'", "--force")
    assert db.metadata.find_one({"_id": "paused"}) is None, "nothing was paused"
    forced = cli_in_process("groups", "pause", "no-such-group", "--force", "--target", db_uri)
    assert forced.returncode == 0, forced.stderr
    assert "Warning: no job or worker has ever used the group 'no-such-group'" in forced.stderr
    assert forced.stdout.strip() == "paused groups: no-such-group"


def test_a_name_used_by_a_job_or_a_worker_pauses_without_force(db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        Record(db_uri, n=1).as_job_of(rec).in_group("queued-group").for_tenant("queued-tenant").enqueue()
    db.archived.insert_one({"_id": "old", "group": "archived-group", "tenant": "archived-tenant", "why": "done"})
    db.roster.insert_one({"_id": "w", "work_on": ["worker-group"]})
    for kind, name in [("groups", "queued-group"), ("groups", "archived-group"), ("groups", "worker-group"),
                       ("tenants", "queued-tenant"), ("tenants", "archived-tenant")]:
        result = cli_in_process(kind, "pause", name, "--target", db_uri)
        assert result.returncode == 0, (name, result.stderr)
        assert name in result.stdout
        assert "Warning" not in result.stderr
    # A worker's group is no tenant, and one unused name among used ones refuses them all.
    mixed = cli_in_process("tenants", "pause", "queued-tenant", "worker-group", "--target", db_uri)
    assert_one_line_error(mixed, "tenant 'worker-group'")
    assert db.metadata.find_one({"_id": "paused"})["tenants"] == ["queued-tenant", "archived-tenant"]


# -- clean stops ----------------------------------------------------------------------------


def test_a_clean_stop_logs_no_fence(processes: Processes, db: Any) -> None:
    worker = processes.worker("--concurrency", "4", "--heartbeat-interval", "20ms")
    wait_for(lambda: db.roster.count_documents({}) == 8, message="eight roster entries: four slots and their lanes")
    time.sleep(0.2)  # some heartbeats beforehand, as in a real run
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    log = worker.log()
    assert log.count("worker.deregistered") == 8, log[-3000:]  # 4 slots, each with its look-ahead lane
    assert "heartbeat.fenced" not in log, log[-3000:]
    assert "declared dead" not in log, log[-3000:]
    assert db.roster.count_documents({}) == 0


@pytest.mark.parametrize("command", [["start"], ["worker", "start", "--heartbeat-interval", "200ms"],
                                     ["cleaner", "start"]])
def test_a_process_whose_server_is_gone_exits_within_seconds_of_sigterm(command: list[str],
                                                                          tmp_path: Path) -> None:
    port = free_port()
    server = start_server(port, tmp_path / "db", log_path=tmp_path / "server.log")
    uri = f"mongodb://127.0.0.1:{port}/gone"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "recruiter.cli", *command, "--target", uri, "--log-format",
                             "json"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO,
                            env=env, text=True)
    try:
        with Recruiter.connect(uri) as rec:
            wait_for(lambda: rec.db.roster.count_documents({}) + rec.db.metadata.count_documents({}) > 0,
                     timeout_s=30, message="the process at work")
        server.kill()
        server.wait(10)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        assert proc.wait(30) == 0
        elapsed = time.monotonic() - sent
        output = proc.stdout.read() if proc.stdout else ""
        assert "process.exit_without_server" in output, output[-2000:]
        assert "Traceback" not in output
        assert elapsed < 5, f"stopped {elapsed:.1f}s after SIGTERM"
    finally:
        if proc.poll() is None:
            proc.kill()
        if server.poll() is None:
            server.kill()


def test_a_process_that_stops_without_a_server_leaves_without_waiting_on_its_client(tmp_path: Path) -> None:
    """A change stream closed while the server was gone leaves the driver a cursor to kill: closing
    the client then waited out server selection (10 s) and printed the driver's traceback, and so
    did the end of the event loop, whose cancellation PyMongo's cursor-killing task outlives. The
    process's last step asks the server first and, when it does not answer, says so in one line and
    ends at once with its own exit status (runtime.run, as every CLI process runs)."""
    script = tmp_path / "leave.py"
    script.write_text(
        "import sys\n"
        "from recruiter.processes import logs\n"
        "from recruiter.processes.runtime import run\n"
        "from recruiter.store.connection import parse_target\n"
        "class Watching:\n"
        "    exit_code = 3\n"
        "    def __init__(self, db): self.db = db\n"
        "    def stop(self): pass\n"
        "    def force(self): pass\n"
        "    def busy(self): return False\n"
        "    async def run(self):\n"
        "        stream = await self.db.watch(max_await_time_ms=100)\n"
        "        await stream.try_next()\n"
        "        print('ready', flush=True)\n"
        "        sys.stdin.readline()  # the server is killed meanwhile; the close below queues the kill\n"
        "        await stream.close()\n"
        "logs.configure('info', 'console')\n"
        "sys.exit(run(parse_target(sys.argv[1]), 'leave', lambda db, clock: Watching(db)))\n")
    port = free_port()
    server = start_server(port, tmp_path / "db", log_path=tmp_path / "server.log")
    proc = subprocess.Popen([sys.executable, str(script), f"mongodb://127.0.0.1:{port}/gone"], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdin is not None
        assert proc.stdout.readline().strip() == "ready"
        server.kill()
        server.wait(10)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        began = time.monotonic()
        out, _ = proc.communicate(timeout=30)
        took = time.monotonic() - began
        assert proc.returncode == 3, out
        assert "process.exit_without_server" in out, out
        assert "Traceback" not in out, out
        assert took < 8, (took, out)  # the driver's wait alone is 10 s
    finally:
        if proc.poll() is None:
            proc.kill()
        if server.poll() is None:
            server.kill()
