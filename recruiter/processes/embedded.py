"""Starting the embedded development server (SecantusDB) as a separate process.

SecantusDB is GPL-2.0 and optional (``pip install 'recruiter[embedded]'``); it
is only ever run as a child process through its ``secantusd-py`` command, never
imported.

Invariants: the server binds the host and port of the URI it serves (one local
host), never a default of its own. A server started for ``--embedded`` is kept
when the process that started it exits (:data:`LIFETIME` says so in the log).
``<storage>/server.pid`` names the server running on that storage, and is only
trusted after checking that the pid is alive and is our server on that port.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import structlog

from recruiter.store.connection import (
    ConnectionProblem,
    Target,
    answers_ping,
    parse_target,
    sync_client,
    wait_until_reachable,
)

log = structlog.get_logger("recruiter.embedded")

DEFAULT_PORT = 27017
# Per project: relative, so under the directory the command runs in (the project's), beside its code.
# Two projects on one machine never share data; deleting the project deletes it.
DEFAULT_STORAGE = Path(".recruiter") / "embedded"
LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}


def server_command() -> str:
    # Prefer the server installed beside this interpreter (the same environment).
    found = shutil.which("secantusd-py", path=str(Path(sys.executable).parent)) or shutil.which("secantusd-py")
    if not found:
        raise ConnectionProblem(
            "the embedded server is not installed: pip install 'recruiter[embedded]' (SecantusDB)"
        )
    return found


def make_storage(storage_path: Path | str) -> Path:
    """Create the storage directory; the absolute path. In a ``.recruiter`` directory (the default's), a
    ``.gitignore`` of ``*`` there keeps the server's files out of the project's git, as ``.venv`` does."""
    storage = Path(storage_path).absolute()
    storage.mkdir(parents=True, exist_ok=True)
    ignore = storage.parent / ".gitignore"
    if storage.parent.name == ".recruiter" and not ignore.exists():
        with contextlib.suppress(OSError):
            ignore.write_text("# recruiter's embedded server keeps its data here\n*\n")
    return storage


def start(port: int, storage_path: Path | str, *, host: str = "127.0.0.1", log_path: Path | None = None,
          detach: bool = False) -> subprocess.Popen[bytes]:
    """Start ``secantusd-py``; with ``detach`` it outlives this process, without it it ends with it."""
    storage = str(storage_path)
    if storage != ":memory:":
        storage = str(make_storage(storage))
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    return subprocess.Popen(
        [server_command(), "--host", host, "--port", str(port), "--storage-path", storage],
        stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=detach,
        preexec_fn=None if detach else _die_with_parent,
    )


def _die_with_parent() -> None:
    """In the child, before exec: on Linux, get SIGTERM when the parent dies, even by SIGKILL."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def free_port() -> int:
    """A TCP port nothing listens on right now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(port: int, storage_path: Path | str, *, log_path: Path, timeout_s: float = 30.0,
            stop_wait_s: float = 10.0) -> Iterator[subprocess.Popen[bytes]]:
    """A throwaway server for the block (tests, benchmarks): started on ``port``,
    answering pings when the block begins, stopped when it ends.

    Raises :class:`ConnectionProblem` with the end of its log if it exits or
    does not answer within ``timeout_s``.
    """
    proc = start(port, storage_path, log_path=log_path)
    try:
        await_answering(proc, port, log_path=log_path, timeout_s=timeout_s)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(stop_wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def await_answering(proc: subprocess.Popen[bytes], port: int, *, log_path: Path, timeout_s: float = 30.0) -> None:
    """Wait until the server ``proc`` started on ``port`` answers pings. Raises
    :class:`ConnectionProblem` with the end of its log if it exits or does not answer within ``timeout_s``."""
    client = sync_client(parse_target(f"mongodb://127.0.0.1:{port}/"), app_name="recruiter-embedded",
                         server_selection_timeout_s=0.5)
    try:
        deadline = time.monotonic() + timeout_s
        while not answers_ping(client):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ConnectionProblem(
                    f"the embedded server did not start on port {port}: {log_path.read_text()[-2000:]}"
                ) from None
            time.sleep(0.1)
    finally:
        client.close()


def local_address(target: Target) -> tuple[str, int]:
    """The address to bind for ``target``: its one host, which must be on this machine, and its port.

    ``localhost`` binds ``127.0.0.1``. Raises :class:`ConnectionProblem` for a remote
    host or several hosts: the embedded server only ever runs here.
    """
    nodes = target.hosts
    if len(nodes) != 1 or nodes[0][0] not in LOCAL_HOSTS:
        raise ConnectionProblem(
            f"the embedded server only runs on this machine, and {target.display} is not a single local host "
            f"({', '.join(sorted(LOCAL_HOSTS))})"
        )
    host, port = nodes[0]
    return ("127.0.0.1" if host == "localhost" else host), int(port)


def local_port(target: Target) -> int | None:
    """The port of ``target`` if it is a single server on this machine."""
    try:
        return local_address(target)[1]
    except ConnectionProblem:
        return None


# -- the pid file: which server runs on a storage directory ------------------------------------

PID_FILE = "server.pid"


@dataclass(frozen=True)
class ServerRecord:
    """What ``<storage>/server.pid`` says: the server's pid and address (one JSON line)."""

    pid: int
    host: str
    port: int

    @property
    def uri(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"mongodb://{host}:{self.port}/"


def write_record(storage: Path, record: ServerRecord) -> None:
    (storage / PID_FILE).write_text(json.dumps(asdict(record)) + "\n")


def read_record(storage: Path) -> ServerRecord | None:
    """The record in ``storage``, or None if there is none or it is unreadable (checked, never trusted)."""
    try:
        doc = json.loads((storage / PID_FILE).read_text())
        record = ServerRecord(int(doc["pid"]), str(doc["host"]), int(doc["port"]))
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return record if record.pid > 0 and 0 < record.port < 65536 else None


def is_running(record: ServerRecord) -> bool:
    """Whether the record's pid is alive and (where /proc tells) is our server on its port."""
    try:
        os.kill(record.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    cmdline = Path(f"/proc/{record.pid}/cmdline")
    if not cmdline.exists():
        return True
    try:
        argv = cmdline.read_bytes().split(b"\0")
    except OSError:
        return False
    return any(b"secantusd" in a for a in argv) and str(record.port).encode() in argv


def stop_recorded(storage: Path, timeout_s: float = 15.0) -> ServerRecord | None:
    """Stop the server recorded in ``storage`` (SIGTERM, then SIGKILL after ``timeout_s``).

    Returns its record, or None if no server of ours runs there.
    """
    record = read_record(storage)
    if record is None or not is_running(record):
        (storage / PID_FILE).unlink(missing_ok=True)
        return None
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, sig)
        deadline = time.monotonic() + wait_s
        while is_running(record) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not is_running(record):
            break
    (storage / PID_FILE).unlink(missing_ok=True)
    return record


# -- --embedded: start a server where nothing answers --------------------------------------------

LIFETIME = ("kept: it keeps running after this process exits, shared by every process that uses it; "
            "'recruiter embedded stop' stops it")


def ensure_running(uri: str | None, storage_path: Path | str = DEFAULT_STORAGE, timeout_s: float = 20.0) -> Target:
    """Make ``uri`` reachable, starting the embedded server on its host and port if nothing answers there.

    The server is started detached and kept on purpose (:data:`LIFETIME`): the
    recruiter, workers and cleaner started with ``--embedded`` share it, and none
    of them knows whether it is the last. It is logged (``embedded.started``) with
    its address, pid and storage; ``<storage>/server.pid`` records it for
    ``recruiter embedded stop|status``. When several processes race to start it,
    one binds the port and the others find it answering.
    """
    target = parse_target(uri)
    try:
        wait_until_reachable(target, timeout_s=1.0)
        return target
    except ConnectionProblem:
        pass
    try:
        host, port = local_address(target)
    except ConnectionProblem:
        raise ConnectionProblem(
            f"cannot reach MongoDB at {target.display}, and the embedded server only starts on this machine "
            "(localhost)"
        ) from None
    storage = make_storage(storage_path)
    proc = start(port, storage, host=host, log_path=storage / "server.log", detach=True)
    try:
        wait_until_reachable(target, timeout_s=timeout_s)
    except ConnectionProblem:
        if proc.poll() is not None:
            raise ConnectionProblem(
                f"the embedded server did not start on port {port}; see {storage / 'server.log'}"
            ) from None
        raise
    if proc.poll() is None:  # ours answers (another process's start lost the race and exited)
        write_record(storage, ServerRecord(proc.pid, host, port))
        log.info("embedded.started", uri=ServerRecord(proc.pid, host, port).uri, pid=proc.pid,
                 storage=str(storage), server_log=str(storage / "server.log"), lifetime=LIFETIME)
    return target
