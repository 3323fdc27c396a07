"""The suite's embedded servers: one per test module (tests/conftest.py says why), each started
while the module before it runs.

A server takes one to four seconds to answer its first ping, more on a busy machine, and the
suite starts about 140 of them. The module that takes a server launches the next one at once, so
that the next module finds its server up: the start overlaps a module's tests instead of delaying
them. A spare that died while it waited is replaced by a fresh start.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from recruiter.processes import embedded


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    storage: Path

    @property
    def uri(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/"

    @property
    def log(self) -> Path:
        return self.storage / "server.log"

    @classmethod
    def launch(cls, storage: Path) -> Server:
        """Start a server on a free port, without waiting for it to answer."""
        port = embedded.free_port()
        return cls(embedded.start(port, storage / "data", log_path=storage / "server.log"), port, storage)

    def ready(self) -> Server:
        """This server once it answers (raises ConnectionProblem if it does not)."""
        embedded.await_answering(self.proc, self.port, log_path=self.log)
        return self

    def discard(self) -> None:
        """End it at once and drop its data (the log stays, with pytest's temporary files): the
        data is thrown away, and a graceful stop takes about 2 s."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        shutil.rmtree(self.storage / "data", ignore_errors=True)


class Servers:
    """Hands each module a server, and starts the next module's meanwhile."""

    def __init__(self) -> None:
        self.spare: Server | None = None

    def take(self, storage: Path, spare_storage: Path) -> Server:
        """A server that answers, in ``storage`` unless a spare was waiting; a spare is launched
        in ``spare_storage`` for the next module."""
        server = self.spare if self.spare is not None and self.spare.proc.poll() is None else None
        if server is None:
            if self.spare is not None:
                self.spare.discard()
            server = Server.launch(storage)
        self.spare = Server.launch(spare_storage)
        return server.ready()

    def close(self) -> None:
        if self.spare is not None:
            self.spare.discard()
            self.spare = None
