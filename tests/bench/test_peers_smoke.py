"""``bin/bench --quick --peers-only`` runs the recruiter beside Agenda and Celery and prints the peer table.

A smoke test of the peer harness, not a measurement: it checks that every figure of
the table was measured for every system, not how they compare. Skipped where
``node`` or ``npm`` is missing, or Celery cannot be imported (the bench then skips that
series with one line).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.peers import agenda, celery_peer
from tests.conftest import REPO

NUMBER = re.compile(r"^\d+(\.\d+)?$")


# Three peers' series and three SIGKILL tests, each starting its own worker processes: 322 s on a
# shared 2-CPU machine at load average 26 to 29, past the default 300 s. It
# checks Celery's series and column too (their sizes: celery_peer.LONG_QUEUE_QUICK).
@pytest.mark.timeout(900)
@pytest.mark.skipif(agenda.missing() is not None, reason=f"Agenda needs Node.js: {agenda.missing()}")
@pytest.mark.skipif(celery_peer.missing() is not None, reason=f"the Celery peer: {celery_peer.missing()}")
def test_quick_peer_table_has_both_systems(server_uri: str, tmp_path: Path) -> None:
    env = {**os.environ, "RECRUITER_TEST_MONGODB_URI": server_uri, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "bench.run", "--quick", "--peers-only", "--workers", "1",
                             "--no-plot", "--output", str(tmp_path)], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=840)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "peer table: recruiter beside Agenda" in result.stdout
    assert "Celery 5." in result.stdout
    assert "delivery: at most once on a crash" in result.stdout

    rows = {parts[0]: parts[1:] for line in result.stdout.splitlines()
            if len(parts := re.split(r"\s{2,}", line.strip())) >= 3}
    assert rows["figure"] == ["recruiter", "agenda", "ratio", "agenda-poll", "ratio", "celery", "ratio"]
    for figure in ("no-op jobs/s", "100 ms jobs/s", "enqueue-to-start p50 ms", "enqueue-to-start p95 ms",
                   "commands per no-op job (all but the enqueuer)", "requests/s of one idle worker",
                   "worker resident memory MiB"):
        cells = rows[f"{figure}, 1 worker(s)"]
        assert all(NUMBER.match(c) for c in cells[:5]), (figure, cells)  # recruiter, each Agenda series and its ratio
        if figure != "100 ms jobs/s":  # Celery runs no-op tasks only
            assert all(NUMBER.match(c) for c in cells[5:]), (figure, cells)
    for figure in ("no-op jobs/s, long queue", "commands per no-op job, long queue"):
        assert NUMBER.match(rows[f"{figure}, 1 worker(s)"][5]), figure  # Celery's, the others not measured

    doc = json.loads((tmp_path / "latest.json").read_text())
    assert doc["capacity"] is None
    assert doc["backlog"] is None
    assert list(doc["results"]) == ["recruiter"]
    peers = doc["peers"]
    assert peers["design"] == "recruiter"
    assert set(peers["series"]) == {"agenda", "agenda-poll", "celery"}
    celery = peers["series"].pop("celery")
    assert celery["settings"]["long_queue"] == celery_peer.LONG_QUEUE_QUICK
    assert celery["settings"]["polling_interval_s"] == 0.1
    point = celery["results"]["1"]
    for kind in ("noop", "noop_long"):
        assert point[kind]["jobs"] > 0, kind
        assert point[kind]["min_outstanding"] > 0, kind  # tasks were waiting through the window
        # kombu's commands, counted in the worker: a findAndModify per task at least
        assert point[kind]["per_job"]["worker"]["round_trips"] >= 1, kind
        assert point[kind]["commands"]["worker"]["@findAndModify:messages"] >= point[kind]["jobs"] - 1, kind
    assert point["noop_long"]["min_outstanding"] >= celery_peer.LONG_QUEUE_QUICK - 50
    assert 0 < point["latency"]["p50_ms"] <= point["latency"]["p95_ms"]
    for name, series in peers["series"].items():
        assert series["versions"]["agenda"] == "6.2.6"
        assert series["settings"]["notify"] == ("poll" if name == "agenda-poll" else "changestream")
        point = series["results"]["1"]
        for kind in ("noop", "sleep100"):
            assert point[kind]["jobs"] > 0, (name, kind)
            assert point[kind]["min_outstanding"] > 0, (name, kind)  # jobs were waiting through the window
            assert point[kind]["per_job"]["worker"]["round_trips"] >= 1, (name, kind)  # Agenda's commands counted
        assert 0 < point["latency"]["p50_ms"] <= point["latency"]["p95_ms"]
    for system in ("recruiter", "agenda"):
        killed = peers["kill"][system]
        assert killed["jobs"] == 8
        assert 0 <= killed["lost"] <= killed["jobs"], (system, killed)
        assert 0 <= killed["twice"] <= killed["jobs"], (system, killed)
        # The victim was killed in the middle of a job: some job was started again.
        assert killed["rerun"] >= 1, (system, killed)
        assert killed["runs"] > killed["jobs"] - killed["lost"], (system, killed)
    # Celery's transport deletes a message when it fetches it: the task the victim was running is lost.
    assert peers["kill"]["celery"]["jobs"] == 8
    assert peers["kill"]["celery"]["lost"] >= 1, peers["kill"]["celery"]
    assert peers["kill"]["celery"]["rerun"] == 0, peers["kill"]["celery"]
    # The recruiter's promise (the chaos test proves it at length): nothing lost, nothing finished twice.
    assert peers["kill"]["recruiter"]["all_finished"]
    assert rows["jobs lost after one SIGKILLed worker"][0] == "0 of 8"
    assert rows["jobs run twice after one SIGKILLed worker"][0] == "0 of 8"
