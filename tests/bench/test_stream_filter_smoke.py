"""``python -m bench.stream_filter`` runs both filters and checks that each hears exactly its own entries.

A smoke test of the harness, not a measurement: nothing here depends on how fast anything is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO


def test_stream_filter_runs_both_filters_side_by_side(server_uri: str) -> None:
    env = {**os.environ, "RECRUITER_TEST_MONGODB_URI": server_uri, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "bench.stream_filter", "--processes", "3", "--slots", "2",
                           "--jobs", "12", "--rounds", "2"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    # The bench exits non-zero if a filter heard another process's entry or missed one of its own.
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines[2:4]] == ["listed", "pattern"]
    runs = json.loads(lines[-1])["runs"]
    assert {kind: len(r) for kind, r in runs.items()} == {"listed": 2, "pattern": 2}
    assert all(run["wall_ms_per_job"] > 0 for r in runs.values() for run in r)
