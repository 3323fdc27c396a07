"""``python -m bench.stream_count`` writes with each count of streams open and checks what they hear.

A smoke test of the harness, not a measurement: nothing here depends on how fast anything is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO


def _run(server_uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RECRUITER_TEST_MONGODB_URI": server_uri, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "bench.stream_count", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_stream_count_runs_each_count_side_by_side(server_uri: str) -> None:
    done = _run(server_uri, "--streams", "0,2,3", "--jobs", "9", "--rounds", "2")
    # The bench exits non-zero if the streams heard an entry that is not theirs or missed one of their own.
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines[2:5]] == ["0", "2", "3"]
    runs = json.loads(lines[-1])["runs"]
    assert {n: len(r) for n, r in runs.items()} == {"0": 2, "2": 2, "3": 2}
    assert all(run["empty_per_write"] == 0 for run in runs["0"])  # no stream, no reply
    assert all(run["wall_ms_per_write"] > 0 for r in runs.values() for run in r)


def test_stream_count_refuses_a_bad_list_in_one_line(server_uri: str) -> None:
    done = _run(server_uri, "--streams", "2,x")
    assert done.returncode == 2
    assert "is not a comma-separated list of numbers" in done.stderr
    assert "Traceback" not in done.stderr
