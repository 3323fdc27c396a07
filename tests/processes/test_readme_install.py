"""The README's "Running it" block, run as written in a fresh virtualenv.

A copy of the checkout (its files, without ``.venv`` or caches) is the current
directory, with the README's ``jobs.py`` and ``enqueue.py`` saved in it, as the
README says, and its ``result.py``. The block is taken from the README itself, so the test fails when
the README drifts; its one change is the port of the URI (a free one instead of
27017, which the machine may be using). The block runs under ``bash -e``: it
creates the virtualenv, installs the package from the copy (pip's cache and
configured index, so it works offline where the index is local), starts the
embedded server, the recruiter, two workers and the cleaner in the background,
enqueues, waits for one job's result and prints the status; the test then waits for every job to be archived
and stops the processes the block left running.

Then, on the same virtualenv and processes, the README's "In your own project": a directory
outside the checkout holding a user's files (``tests/newcomer_project``), recruiter installed
there from a wheel, a worker, the results, and ``mypy --strict`` on the user's code.

Select it alone with ``bin/test -m fresh_venv``; it takes a few minutes.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from recruiter.store import strict
from tests.conftest import REPO, free_port, wait_for
from tests.processes.test_readme import readme_files

pytestmark = pytest.mark.fresh_venv

FENCE = "`" * 3
COPY_IGNORES = shutil.ignore_patterns(".git", ".venv", ".demo", ".recruiter", "__pycache__", "*.egg-info", "build",
                                      ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", "results",
                                      "node_modules")
NEWCOMER_PROJECT = REPO / "tests" / "newcomer_project"  # a user's own files: one more *jobs.py, one more way
JOBS_IN_ENQUEUE_PY = 19  # INV-1, INV-2 and INV-3..INV-19
JOBS_OF_THE_BLOCK = JOBS_IN_ENQUEUE_PY + 1  # and result.py's INV-42


def running_it_block() -> str:
    """The first sh block of the README's "Running it" section."""
    text = (REPO / "README.md").read_text()
    section = text.split("\n## Running it\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(FENCE + r"sh\n(.*?)" + FENCE, section, flags=re.S)
    assert found, "no sh block in the README's Running it section"
    return found.group(1)


def own_project_block() -> str:
    """The sh block of the README's "In your own project" section."""
    text = (REPO / "README.md").read_text()
    section = text.split("\n### In your own project\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(FENCE + r"sh\n(.*?)" + FENCE, section, flags=re.S)
    assert found, "no sh block in the README's In your own project section"
    return found.group(1)


def test_the_own_project_block_installs_from_outside_the_checkout() -> None:
    block = own_project_block()
    for command in ("pip install '/path/to/recruiter[embedded]'", "pip wheel --no-deps -w wheels /path/to/recruiter",
                    'pip install "$(ls wheels/recruiter-*.whl)[embedded]"', "@ git+https://"):
        assert command in block, command
    assert "pip install 'recruiter[embedded]'" in (REPO / "README.md").read_text()  # the name once published


def test_the_running_it_block_installs_and_names_the_commands() -> None:
    block = running_it_block()
    for command in ("pip install '.[embedded]'", "recruiter embedded start &", "recruiter start &",
                    "worker start --group billing &", "cleaner start &", "python enqueue.py",
                    "python result.py"):
        assert command in block, command
    assert block.count("localhost:27017") == 1


def test_running_it_verbatim_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    checkout = tmp_path / "recruiter"
    shutil.copytree(REPO, checkout, ignore=COPY_IGNORES)
    for name in ("jobs.py", "enqueue.py", "result.py"):
        (checkout / name).write_text(readme_files()[name])
    port = free_port()
    script = running_it_block().replace("localhost:27017", f"localhost:{port}")
    env = {k: v for k, v in os.environ.items()
           if k not in ("RECRUITER_MONGODB_URI", "MONGODB_URI", "PYTHONPATH", "VIRTUAL_ENV")}
    # The embedded server's default storage is .recruiter/embedded in the current directory (the copy's).
    env.update(RECRUITER_LOG_FORMAT="json")
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(REPO)))
    log_path = tmp_path / "block.log"
    started = time.monotonic()
    with open(log_path, "wb") as out:
        block = subprocess.Popen(["bash", "-e", "-c", script], cwd=checkout, env=env, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    client: MongoClient[Any] = MongoClient(f"mongodb://127.0.0.1:{port}/recruiter", serverSelectionTimeoutMS=2000,
                                           event_listeners=strict.listeners())
    try:
        assert block.wait(300) == 0, log_path.read_text()[-4000:]
        installed = checkout / ".venv" / "bin"
        for name in ("worker", "cleaner"):  # the console scripts, with their own usage lines
            usage = subprocess.run([str(installed / name), "start", "--help"], capture_output=True, text=True,
                                   env=env, timeout=60)
            assert usage.stdout.startswith(f"Usage: {name} start [OPTIONS]"), usage.stdout[:200] + usage.stderr
        assert (installed / "recruiter").exists()
        db = client["recruiter"]
        wait_for(lambda: db.archived.count_documents({"why": "done"}) == JOBS_OF_THE_BLOCK, timeout_s=120,
                 message=f"the README's {JOBS_OF_THE_BLOCK} jobs archived")
        assert db.scheduled.count_documents({}) == 0
        log = log_path.read_text()
        assert f"enqueued {JOBS_IN_ENQUEUE_PY} jobs" in log
        assert "{'sent': 'INV-42'}" in log  # result.py waited for its job's result
        assert "Traceback" not in log, log[-4000:]
        print(f"README block: installed, ran and archived {JOBS_OF_THE_BLOCK} jobs in "
              f"{time.monotonic() - started:.0f}s")
        in_own_project(tmp_path, checkout, env, db, port)
    finally:
        client.close()
        stop_group(block.pid)


def in_own_project(tmp_path: Path, checkout: Path, env: dict[str, str], db: Any, port: int) -> None:
    """The newcomer's path, on the block's virtualenv and processes: a project directory outside the
    checkout with the files of tests/newcomer_project, recruiter installed there from a wheel as the
    README's "In your own project" block says, a worker started there, every example enqueued and its
    result checked (enqueue.py), then ``mypy --strict`` on the project's files against the installed package.

    The block's workers are stopped first (they run in the checkout's copy and could not import the
    project's jobs); its recruiter, cleaner and server go on serving."""
    venv = checkout / ".venv"
    project = tmp_path / "my-app"
    shutil.copytree(NEWCOMER_PROJECT, project, ignore=COPY_IGNORES)
    env = {**env, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}",
           "RECRUITER_MONGODB_URI": f"mongodb://localhost:{port}/recruiter"}
    stop = subprocess.run([str(venv / "bin" / "recruiter"), "workers", "stop", "--all"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    wait_for(lambda: db.roster.count_documents({}) == 0, timeout_s=60, message="the block's workers stopped")
    # The user's virtualenv has no recruiter yet: the block's install is removed (its dependencies stay).
    run_in(project, env, "pip uninstall --yes --quiet recruiter")
    assert run_in(project, env, "python -c 'import recruiter' 2>&1 || true").strip().endswith(
        "No module named 'recruiter'")
    started = time.monotonic()
    lines = [line.split("#", 1)[0].replace("/path/to/recruiter", str(checkout))
             for line in own_project_block().splitlines() if line.startswith(("pip wheel", 'pip install "$(ls'))]
    assert len(lines) == 2, lines
    run_in(project, env, "\n".join(lines), timeout_s=300)
    installed = run_in(project, env, "python -c 'import recruiter; print(recruiter.__file__)'")
    assert installed.startswith(str(venv)), installed  # the wheel's copy, not the checkout's
    installing = time.monotonic() - started
    with open(tmp_path / "my-app.log", "wb") as out:
        worker = subprocess.Popen(["worker", "start", "--group", "myapp"], cwd=project, env=env, stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        enqueued = run_in(project, env, "python enqueue.py", timeout_s=240)
        assert enqueued.strip().endswith("results as expected"), enqueued
    finally:
        stop_group(worker.pid)
    # The suite's own mypy (the version pyproject pins), told to find packages where the user's
    # python does (--python-executable): the same check as a mypy installed in that virtualenv
    # (it finds no recruiter where the virtualenv has none), without installing mypy there.
    checked = run_in(project, env, f"{shlex.quote(sys.executable)} -m mypy --python-executable "
                     f"{shlex.quote(str(venv / 'bin' / 'python'))} --strict --no-incremental .", timeout_s=300)
    assert "Success: no issues found" in checked, checked
    print(f"own project: the wheel built and installed in {installing:.0f}s, {enqueued.strip()}, mypy --strict clean")


def run_in(directory: Path, env: dict[str, str], script: str, timeout_s: float = 120) -> str:
    """Run ``script`` with bash -e in ``directory``; its output (the test fails with it if it fails)."""
    done = subprocess.run(["bash", "-e", "-c", script], cwd=directory, env=env, capture_output=True, text=True,
                          timeout=timeout_s)
    assert done.returncode == 0, f"{script}: {(done.stdout + done.stderr)[-4000:]}"
    return done.stdout


def stop_group(pgid: int, timeout_s: float = 30.0) -> None:
    """SIGTERM every process the block left running (its own process group), SIGKILL what remains."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
