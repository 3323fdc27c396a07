"""``python -m bench.bigjobs`` runs end to end with tiny sizes and prints its table and target line.

A smoke test of the benchmark, not a measurement: nothing here depends on how fast anything is.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import REPO


def test_bigjobs_bench_prints_a_row_per_size_and_the_ratio(server_uri: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "bench.bigjobs", "--target", server_uri, "--sizes", "1KiB,100KiB,1MiB",
         "--samples", "2"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = {line.split()[0] + " " + line.split()[1]: line.split() for line in result.stdout.splitlines()
            if re.match(r"\s*\d+ (KiB|MiB) ", line)}
    assert set(rows) == {"1 KiB", "100 KiB", "1 MiB"}, result.stdout
    for row in rows.values():
        assert row[2] == "2", row  # samples
        assert float(row[3]) > 0, row  # enqueue->start p50, in ms
    assert rows["1 KiB"][7] == "1.00x"
    assert re.search(r"target: a 1 MiB job starts within 2x of a 1 KiB job \(median enqueue->start\): "
                     r"[\d.]+x, (met|NOT met)", result.stdout), result.stdout
