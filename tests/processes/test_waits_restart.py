"""Waits outlive a restart of the server (issue 40): a job archived after the restart ends
every wait of it, whether the producer's one stream is resumed by the driver, fails and is
opened again (its waits polling meanwhile), or is stuck in a getMore (its waits read their
jobs every SAFETY_READ_S). A server of this test's own is restarted, so no other test waits
on it. Observed on SecantusDB: the stream's getMore stayed stuck for about 25 s after the
restart, then failed; the waits had their outcome by then."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bench.commands import Commands
from recruiter import JobFailed, Recruiter
from recruiter.processes import embedded
from recruiter.processes.embedded import free_port
from tests.conftest import wait_for
from tests.workables import Record

pytestmark = pytest.mark.skipif(bool(os.environ.get("RECRUITER_TEST_MONGODB_URI")),
                                reason="restarts a server of its own, the embedded one")

WAITS = 5


def reason_of(job: object) -> object:
    try:
        return ("result", job.wait(120))  # type: ignore[attr-defined]
    except JobFailed as failure:
        return (failure.why, failure.view.document.get("cancel_reason"))


def test_waits_outlive_a_restart_of_the_server(tmp_path: Path) -> None:
    port, data = free_port(), tmp_path / "data"
    uri = f"mongodb://127.0.0.1:{port}/restart"
    commands = Commands()
    with ThreadPoolExecutor(WAITS) as pool:
        with embedded.serving(port, data, log_path=tmp_path / "before.log"):
            rec = Recruiter.connect(uri, event_listeners=[commands], server_selection_timeout_s=60)
            jobs = rec.enqueue_many([Record(uri, n=i) for i in range(WAITS)])
            waits = [pool.submit(reason_of, job) for job in jobs]
            wait_for(lambda: len(commands.named("find", "archived")) >= WAITS, message="every wait to read its job")
            # A wait reads its job after OPEN_WAIT_S even while the stream is still opening (a loaded machine).
            wait_for(lambda: rec.streams.opened >= 1, message="the stream to open before the restart")
            assert rec.streams.opened == 1
        try:
            with embedded.serving(port, data, log_path=tmp_path / "after.log"):
                with Recruiter.connect(uri) as other:
                    for i, job in enumerate(jobs):
                        assert other.cancel(job, reason=f"after the restart {i}").state == "cancelled"
                outcomes = [w.result(timeout=120) for w in waits]
                assert outcomes == [("cancelled", f"after the restart {i}") for i in range(WAITS)]
        finally:
            rec.close()
