"""Bad input on the command line: one clear line, a non-zero exit, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, free_port


def run_cli(*args: str, env: dict[str, str] | None = None, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    for var in ("RECRUITER_MONGODB_URI", "MONGODB_URI"):
        if not env or var not in env:
            full_env.pop(var, None)
    return subprocess.run([sys.executable, "-m", "recruiter.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env=full_env, timeout=timeout_s)


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert len(error_lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in error_lines[0], result.stderr


@pytest.mark.parametrize("command", [["start"], ["worker", "start"], ["cleaner", "start"]])
def test_unreachable_server_is_one_line(command: list[str]) -> None:
    uri = f"mongodb://127.0.0.1:{free_port()}/recruiter"
    result = run_cli(*command, "--target", uri)
    assert_one_line_error(result, "cannot reach MongoDB", "127.0.0.1")


@pytest.mark.parametrize("uri", ["not-a-uri", "mongodb://", "mongodb://host:99999/db"])
def test_bad_uri_is_one_line(uri: str) -> None:
    assert_one_line_error(run_cli("start", "--target", uri), "invalid MongoDB URI")


def test_uri_from_environment_is_used() -> None:
    result = run_cli("worker", "start", env={"MONGODB_URI": "definitely not a uri"})
    assert_one_line_error(result, "invalid MongoDB URI", "definitely not a uri")


@pytest.mark.parametrize(("args", "fragment"), [
    (["start", "--backoff-from", "soon"], "invalid duration 'soon'"),
    (["start", "--backoff-from", "2s", "--backoff-to", "1s"], "backoff-from"),
    (["start", "--round-size", "0"], "--round-size"),
    (["start", "--sweep-interval", "0s"], "longer than zero"),
    (["worker", "start", "--concurrency", "zero"], "--concurrency"),
    (["worker", "start", "--id", "a.b"], "invalid worker id"),
    (["worker", "start", "--group", "$bad"], "invalid group"),
    (["cleaner", "start", "--considered-dead-after", "-5s"], "invalid duration"),
    (["cleaner", "start", "--clean-after", "0s"], "longer than zero"),
])
def test_bad_option_values_are_one_line(args: list[str], fragment: str) -> None:
    result = run_cli(*args, "--target", "mongodb://127.0.0.1:1/never-contacted")
    assert result.returncode == 2, result.stderr
    assert_one_line_error(result, fragment)


def test_options_come_from_environment_variables() -> None:
    result = run_cli("start", env={"RECRUITER_BACKOFF_FROM": "whenever"})
    assert_one_line_error(result, "invalid duration 'whenever'")


def test_preloading_an_unknown_module_is_one_line() -> None:
    result = run_cli("worker", "start", "--preload", "no_such_module_here")
    assert_one_line_error(result, "cannot preload 'no_such_module_here'")


def test_status_reports_counts(db_uri: str) -> None:
    import json

    from recruiter import Recruiter
    from tests.workables import Record

    with Recruiter.connect(db_uri) as rec:
        rec.enqueue_many([Record(db_uri, n=1).as_job_of(rec), Record(db_uri, n=2).as_job_of(rec).in_group("x")])
        rec.db.archived.insert_one({"_id": "old", "why": "done"})
    result = run_cli("status", "--target", db_uri, "--json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["scheduled"] == {"queued": 2}
    assert figures["archived"] == {"done": 1}
    assert figures["workers"]["total"] == 0
    text = run_cli("status", "--target", db_uri)
    assert "scheduled: queued=2" in text.stdout
    assert "archived:  done=1" in text.stdout


@pytest.mark.parametrize("command", [["status"], ["status", "--json"], ["workers", "list"],
                                     ["workers", "list", "--json"], ["stats"], ["stats", "--json"]])
def test_read_commands_show_malformed_roster_entries_without_failing(db_uri: str, command: list[str]) -> None:
    """A roster entry is untrusted input: one whose ``_id``, ``work_on`` or ``assigned_to`` is of
    another type is shown as malformed, beside the well-formed one, and the command succeeds."""
    from recruiter import Recruiter

    with Recruiter.connect(db_uri) as rec:
        rec.db.roster.insert_many([
            {"_id": "w-ok", "work_on": ["bench"], "available": True, "pid": 7, "hostname": "h"},
            {"_id": {"a": 1}, "work_on": ["bench"], "available": True},
            {"_id": "w-null-group", "work_on": ["bench", None], "available": True},
            {"_id": "w-doc-group", "work_on": [{"a": 1}], "available": True},
            {"_id": "w-list-group", "work_on": [["x"]], "available": True},
            {"_id": "w-text-assigned", "work_on": ["bench"], "assigned_to": "x", "available": False},
        ])
    result = run_cli(*command, "--target", db_uri)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    out = result.stdout
    if "--json" in command:
        doc = json.loads(out)
        if command[0] == "workers":
            states = {row["id"]: row["state"] for row in doc}
            assert states["w-ok"] == "idle"
            assert sorted(i for i, s in states.items() if s == "malformed") == \
                sorted(["{'a': 1}", "w-null-group", "w-doc-group", "w-list-group", "w-text-assigned"])
        else:
            assert doc["workers"]["malformed"] == 5
    elif command[0] == "workers":
        assert out.splitlines()[1].split()[:3] == ["w-ok", "bench", "idle"]
        assert "malformed roster entry w-null-group: work_on.1: expected a non-empty string, got null" in out
        assert "malformed roster entry {'a': 1}: _id: " in out
    else:
        assert "5 malformed roster entries" in out
