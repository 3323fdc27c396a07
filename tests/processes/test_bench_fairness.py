"""The fairness benchmark runs, with tiny sizes, so it does not rot."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO


def test_fairness_bench_prints_its_table(server_uri: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "bench.fairness", "--target", server_uri, "--backlogs", "40,400",
         "--tenants", "2,30", "--workers", "4"],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 4, result.stdout
    for _backlog, _tenants, trips, documents, assigned, _time in rows:
        assert int(assigned) == 4, result.stdout
        # Roster read, candidate reads (about one per worker at most), fence, lock, assign, cursor, commit.
        assert int(trips) <= 4 + 8 and int(documents) <= 4 * 10, result.stdout
