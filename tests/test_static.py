"""The code passes its own static checks: ruff on everything, mypy --strict on the package and the benchmarks."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_ruff() -> None:
    result = run("ruff", "check", "recruiter", "bench", "tests", "examples")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict() -> None:
    result = run("mypy", "recruiter", "bench")
    assert result.returncode == 0, result.stdout + result.stderr
