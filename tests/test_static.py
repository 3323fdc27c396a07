"""The code passes its own static checks: ruff on everything, mypy --strict on the package and the
benchmarks, and the layering contracts of pyproject.toml (import-linter), which a deliberate
violation breaks."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=300)


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the package under ``root`` (its pyproject.toml, its ``recruiter/``)."""
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=root, capture_output=True,
                          text=True, timeout=300, env={"PYTHONPATH": str(root), "PATH": str(LINT_IMPORTS.parent)})


def contract(contract_id: str) -> dict[str, object]:
    with (REPO / "pyproject.toml").open("rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if c["id"] == contract_id)


def test_ruff() -> None:
    result = run("ruff", "check", "recruiter", "bench", "tests", "examples")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict() -> None:
    result = run("mypy", "recruiter", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def test_layering_contracts() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"Contracts: [1-9]\d* kept, 0 broken\.", result.stdout), result.stdout


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of the package and its pyproject.toml, to break on purpose."""
    shutil.copytree(REPO / "recruiter", tmp_path / "recruiter", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def breaks(copy: Path, module: str, line: str, contract_id: str) -> str:
    """Add ``line`` to ``module`` of the copy; the check must fail, naming the contract and the import."""
    path = copy / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = copy / module.replace(".", "/") / "__init__.py"
    path.write_text(path.read_text() + f"\n{line}  # a deliberate violation\n")
    result = lint_imports(copy)
    print(f"$ lint-imports   # after adding `{line}` to {module}\n{result.stdout}{result.stderr}")
    assert result.returncode != 0, result.stdout
    name = str(contract(contract_id)["name"])
    # The summary names the broken contract (wrapped at 80 columns: compare without the line breaks).
    assert f"{name} BROKEN" in " ".join(result.stdout.split()), result.stdout
    imported = line.split()[1]
    assert f"{module} -> {imported}" in result.stdout, result.stdout
    return result.stdout


def test_a_driver_import_in_the_domain_fails_the_check(copy: Path) -> None:
    breaks(copy, "recruiter.domain.sizes", "import pymongo", "domain-is-pure")


def test_a_store_internal_imported_by_the_cli_fails_the_check(copy: Path) -> None:
    assert contract("cli-uses-public-store")["forbidden_modules"] == ["recruiter.store.*"]
    internal = min(p.stem for p in (copy / "recruiter" / "store").glob("*.py") if p.stem != "__init__")
    breaks(copy, "recruiter.cli", f"import recruiter.store.{internal}", "cli-uses-public-store")
