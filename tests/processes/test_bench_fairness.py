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
    for _backlog, _tenants, trips, documents, assigned, l_trips, _l_docs, l_assigned, extra, _time in rows:
        assert int(assigned) == 4, result.stdout
        assert int(l_assigned) == 4, result.stdout
        # Flow control costs at most one more round trip per round (the count of locked jobs in
        # capped groups; the limits come with the pause switches, the tokens with the cursor).
        assert int(extra) == int(l_trips) - int(trips) <= 1, result.stdout
        # Roster read, pause switches, fence, lock, assign, cursor, commit; then the candidate
        # finds (recruiter/readahead.py: the embedded server serves one index range per command):
        # per tenant served at most a gap and four substreams, each split in two at a tie.
        # Bounded by the workers, not the backlog; documents as before.
        assert int(trips) <= 7 + 4 * 16, result.stdout
        assert int(documents) <= 4 * 10, result.stdout
