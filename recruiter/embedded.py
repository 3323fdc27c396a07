"""Starting the embedded development server (SecantusDB) as a separate process.

SecantusDB is GPL-2.0 and optional (``pip install 'recruiter[embedded]'``); it
is only ever run as a child process through its ``secantusd-py`` command, never
imported.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pymongo.errors import PyMongoError

from recruiter.connection import ConnectionProblem, Target, parse_target, sync_client, wait_until_reachable

DEFAULT_PORT = 27017
DEFAULT_STORAGE = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / "recruiter" / "embedded"
LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}


def server_command() -> str:
    # Prefer the server installed beside this interpreter (the same environment).
    found = shutil.which("secantusd-py", path=str(Path(sys.executable).parent)) or shutil.which("secantusd-py")
    if not found:
        raise ConnectionProblem(
            "the embedded server is not installed: pip install 'recruiter[embedded]' (SecantusDB)"
        )
    return found


def start(port: int, storage_path: Path | str, *, host: str = "127.0.0.1", log_path: Path | None = None,
          detach: bool = False) -> subprocess.Popen[bytes]:
    """Start ``secantusd-py``; with ``detach`` it outlives this process."""
    storage = str(storage_path)
    if storage != ":memory:":
        Path(storage).mkdir(parents=True, exist_ok=True)
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    return subprocess.Popen(
        [server_command(), "--host", host, "--port", str(port), "--storage-path", storage],
        stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=detach,
    )


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
    client = sync_client(parse_target(f"mongodb://127.0.0.1:{port}/"), app_name="recruiter-embedded",
                         server_selection_timeout_s=0.5)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                client.admin.command("ping")
                break
            except PyMongoError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise ConnectionProblem(
                        f"the embedded server did not start on port {port}: {log_path.read_text()[-2000:]}"
                    ) from None
                time.sleep(0.1)
        client.close()
        yield proc
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(stop_wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def local_port(target: Target) -> int | None:
    """The port of ``target`` if it is a single server on this machine."""
    from pymongo.uri_parser import parse_uri

    nodes = parse_uri(target.uri, validate=False)["nodelist"]
    if len(nodes) == 1 and nodes[0][0] in LOCAL_HOSTS:
        return int(nodes[0][1])
    return None


def ensure_running(uri: str | None, storage_path: Path | str = DEFAULT_STORAGE, timeout_s: float = 20.0) -> Target:
    """Make ``uri`` reachable, starting the embedded server on its port if nothing answers there.

    The server is started detached (it outlives this process, so the recruiter,
    workers and cleaner can share it); its pid is written to ``server.pid`` in the
    storage directory. When several processes race to start it, one binds the port
    and the others find it answering.
    """
    target = parse_target(uri)
    try:
        wait_until_reachable(target, timeout_s=1.0)
        return target
    except ConnectionProblem:
        pass
    port = local_port(target)
    if port is None:
        raise ConnectionProblem(
            f"cannot reach MongoDB at {target.display}, and the embedded server only starts on this machine "
            "(localhost)"
        )
    storage = Path(storage_path)
    storage.mkdir(parents=True, exist_ok=True)
    proc = start(port, storage, log_path=storage / "server.log", detach=True)
    (storage / "server.pid").write_text(f"{proc.pid}\n")
    try:
        wait_until_reachable(target, timeout_s=timeout_s)
    except ConnectionProblem:
        if proc.poll() is not None:
            raise ConnectionProblem(
                f"the embedded server did not start on port {port}; see {storage / 'server.log'}"
            ) from None
        raise
    return target
