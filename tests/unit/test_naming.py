"""Names: the one group/tenant rule, the worker's module allow-list, importability at enqueue."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import bson
import pytest
from bson import ObjectId
from hypothesis import given
from hypothesis import strategies as st

from recruiter.domain.attempt import (
    MAX_LOG_BYTES,
    MAX_MESSAGE_CHARS,
    MAX_RESULT_BYTES,
    MAX_TRACE_CHARS,
    import_refusal,
)
from recruiter.domain.job import (
    HISTORY_ALLOWANCE_BYTES,
    MAX_EXECUTIONS_KEPT,
    JobOptions,
    JobRefused,
    build_job_document,
)
from recruiter.domain.naming import (
    AllowedModules,
    UnknownClass,
    import_qualified,
    importable_problem,
    module_problem,
    modules_under,
    name_problem,
    split_qualified,
)
from recruiter.domain.outcome import (
    DETAILED_EXECUTIONS_KEPT,
    MALFORMED,
    Execution,
    Outcome,
    archived_document,
    history,
)
from recruiter.domain.retry import Archive, RetryManyTimes
from recruiter.processes.worker.runtime import WorkerConfig
from recruiter.producer.client import limit_from_hello
from tests.unit.test_outcome import Job, locked_job

NOW = datetime(2026, 1, 1, tzinfo=UTC)


# -- one rule for group and tenant names ---------------------------------------------------------

GOOD_NAMES = ["billing", "Billing-2", "eu_west", "a$b", "100%", "é" * 200, "reports:daily", "a b"]
BAD_NAMES = ["", "   ", "*", "a.b", "$g", ".", "a,b", " billing", "billing\n", "bill\x00ing", "g" * 201, None, 5]


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_good_names_pass_everywhere(name: str) -> None:
    assert name_problem("group", name) is None
    build_job_document(Job(1), JobOptions(group=name, tenant=name), NOW)
    WorkerConfig(groups=(name, "*"))


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names_are_refused_everywhere_with_one_reason(name: Any) -> None:
    problem = name_problem("group", name)
    assert problem is not None
    assert problem.startswith(f"invalid group name {name!r}: ")
    assert "\n" not in problem
    options = [JobOptions(group=name), JobOptions(tenant=name)] if name is not None else []  # None: the default
    for option in options:
        with pytest.raises(JobRefused):
            build_job_document(Job(1), option, NOW)
    if isinstance(name, str) and name != "*":
        with pytest.raises(ValueError, match="invalid group name"):
            WorkerConfig(groups=(name,))


@given(st.text(max_size=30))
def test_the_rule_matches_its_description(name: str) -> None:
    ok = (bool(name.strip()) and name == name.strip() and name != "*" and not name.startswith("$")
          and "." not in name and "," not in name and all(ord(c) >= 32 and not 0x7F <= ord(c) < 0xA0 for c in name))
    assert (name_problem("tenant", name) is None) == ok


# -- the worker's allow-list -----------------------------------------------------------------------


def test_prefixes_match_on_dotted_boundaries() -> None:
    allowed = AllowedModules(("foo", "app.jobs"))
    assert allowed.allows("foo")
    assert allowed.allows("foo.bar")
    assert allowed.allows("foo.bar.baz")
    assert not allowed.allows("foobar")
    assert not allowed.allows("fo")
    assert allowed.allows("app.jobs.billing")
    assert not allowed.allows("app")
    assert not allowed.allows("app.jobsx")
    assert allowed.allows("recruiter.retry")  # the built-in retry policies
    assert not allowed.allows("recruiter")
    assert not allowed.allows("recruiter.cli")
    assert not AllowedModules(("recruiter",)).allows("recruiter.__main__")
    assert not AllowedModules(("foo",)).allows("foo.__main__")


@pytest.mark.parametrize(("name", "allowed"), [
    ("foo.jobs:Send", True), ("foo.jobs.Send", True), ("foo:Outer.Inner", True),
    ("this:nothing", False), ("os:system", False), ("foobar:X", False), ("foo.__main__:X", False),
    ("recruiter.retry:RetryForever", True), ("recruiter.__main__:main", False),
    ("", False), ("nodots", False), (".foo:X", False), ("foo..bar:X", False), ("foo:", False), (5, False),
    (None, False),
])
def test_refusal_is_decided_on_the_name_alone(name: Any, allowed: bool) -> None:
    refusal = AllowedModules(("foo",)).refusal(name)
    assert (refusal is None) == allowed
    if refusal is not None:
        assert refusal.startswith("class not allowed: ")
        assert "\n" not in refusal


def test_refusal_never_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tripwire_mod.py").write_text("raise SystemExit('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert AllowedModules(("foo",)).refusal("tripwire_mod:X") is not None
    assert "tripwire_mod" not in sys.modules


def test_import_refusal_looks_at_the_workable_and_every_policy_class() -> None:
    allowed = AllowedModules(("tests",))
    job = build_job_document(Job(1), JobOptions(retry_policy=RetryManyTimes(2)), NOW)
    assert import_refusal(job, allowed) is None
    job["workable"]["class"] = "this:nothing"
    assert import_refusal(job, allowed) == (
        "class not allowed: this:nothing (module 'this' is not in the worker's allowed modules: tests)")
    job = build_job_document(Job(1), JobOptions(retry_policy=RetryManyTimes(2)), NOW)
    job["retry_policy"]["parameters"]["x"] = [{"y": {"class": "antigravity:Fly", "parameters": {}}}]
    assert (import_refusal(job, allowed) or "").startswith("class not allowed: antigravity:Fly")
    job["retry_policy"] = {"class": "os.system"}
    assert (import_refusal(job, allowed) or "").startswith("class not allowed: os.system")
    assert import_refusal({"workable": "junk"}, allowed) is not None


def test_modules_under_lists_what_a_path_entry_provides(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "namespace").mkdir()
    (tmp_path / "namespace" / "module.py").write_text("")  # a namespace package: modules, no __init__
    (tmp_path / "outer" / "inner").mkdir(parents=True)  # a namespace package of packages
    (tmp_path / "outer" / "inner" / "__init__.py").write_text("")
    (tmp_path / "single.py").write_text("")
    # Data directories are not modules: no code in them (a worker started in the wrong directory
    # listed "logs" as an allowed module).
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "worker.log").write_text("")
    (tmp_path / "static" / "css").mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    (tmp_path / "ext.cpython-311-x86_64-linux-gnu.so").write_text("")
    for skipped in ("not-a-module.py", "README.md", "__main__.py"):
        (tmp_path / skipped).write_text("")
    for skipped_dir in (".venv", "__pycache__", "my-dir"):
        (tmp_path / skipped_dir).mkdir()
    assert modules_under(tmp_path) == ["ext", "namespace", "outer", "pkg", "single"]
    assert modules_under(tmp_path / "missing") == []


@pytest.mark.parametrize(("prefix", "ok"), [("myapp", True), ("myapp.jobs", True), ("my-app", False), ("", False),
                                        ("a..b", False), ("app.__main__", False), ("__main__", False)])
def test_module_prefixes_are_checked(prefix: str, ok: bool) -> None:
    assert (module_problem(prefix) is None) == ok
    if not ok:
        with pytest.raises(ValueError, match="invalid allowed module"):
            WorkerConfig(allowed_modules=(prefix,))


# -- importable by name, checked at enqueue without importing ------------------------------------


def test_importable_problem() -> None:
    assert importable_problem("tests.unit.test_outcome:Job", expected=Job) is None
    assert "the script being run" in (importable_problem("__main__:Job") or "")
    assert "not imported here" in (importable_problem("surely_not_imported_module:X") or "")
    assert "not found under that name" in (importable_problem("tests.unit.test_outcome:Nope") or "")
    assert "another object" in (importable_problem("tests.unit.test_outcome:Job", expected=object) or "")


def test_split_qualified_is_what_import_qualified_imports() -> None:
    assert split_qualified("a.b:C.D") == ("a.b", "C.D")
    assert split_qualified("a.b.C") == ("a.b", "C")
    with pytest.raises(UnknownClass):
        import_qualified("os:")


# -- what a job cannot keep ------------------------------------------------------------------------


def test_the_history_allowance_covers_the_worst_case_growth() -> None:
    """A job at the size limit less the allowance still fits once its history is full."""
    worst_message = "\U0001f600" * MAX_MESSAGE_CHARS  # four bytes a character
    worst_logs = "\U0001f600" * (MAX_LOG_BYTES // 4)  # MAX_LOG_BYTES of UTF-8
    entry = Execution(attempt=99, kind="timed-out", worker="w" * 200, pid=2**31, hostname="h" * 255,
                      scheduled_at=NOW, started_at=NOW, ended_at=NOW, error_class="m" * 500,
                      message=worst_message, trace="\U0001f600" * MAX_TRACE_CHARS, assigned_at=NOW,
                      logs=worst_logs, logs_cut=2**62).to_document()
    job = {"executions": [entry] * (3 * MAX_EXECUTIONS_KEPT)}
    executions = history(job, entry)
    assert len(executions) == MAX_EXECUTIONS_KEPT
    assert sum("logs" in e for e in executions) == DETAILED_EXECUTIONS_KEPT
    growth = {
        "executions": executions, "last_execution": entry, "result": "r" * MAX_RESULT_BYTES,
        "locked_by": "w" * 200, "locked_at": NOW, "lock_token": ObjectId(), "lock_epoch": 2**62,
        "archived_at": NOW, "why": "crashed-too-many-times", "reason": "x" * 1000, "crash_pending": True,
        "status": "retrying",
    }
    assert len(bson.encode(growth)) < HISTORY_ALLOWANCE_BYTES


def test_size_is_checked_against_the_given_limit() -> None:
    small = build_job_document(Job(1), JobOptions(), NOW)
    limit = len(bson.encode(small)) + HISTORY_ALLOWANCE_BYTES
    build_job_document(Job(1), JobOptions(), NOW, max_document_bytes=limit)
    with pytest.raises(JobRefused, match=f"at most {limit - 1} bytes"):
        build_job_document(Job(1), JobOptions(), NOW, max_document_bytes=limit - 1)


# -- the malformed outcome carries its reason to the archive --------------------------------------


def test_a_refused_job_is_archived_malformed_with_its_reason() -> None:
    job = locked_job(attempts=1)
    execution = Execution(attempt=1, kind="refused", worker="w1", pid=1, hostname="h", scheduled_at=NOW,
                          started_at=NOW, ended_at=NOW, message="class not allowed: this:nothing")
    outcome = Outcome(job["_id"], job["lock_token"], 1, executed=False,
                      decision=Archive(MALFORMED, "class not allowed: this:nothing"), execution=execution)
    doc = outcome.to_document()
    assert doc["decision"] == {"archive": "malformed", "reason": "class not allowed: this:nothing"}
    archived = archived_document(job, doc, NOW)
    assert (archived["why"], archived["reason"], archived["attempts"]) == (
        "malformed", "class not allowed: this:nothing", 0)
    assert archived["last_execution"]["outcome"] == "refused"
    assert Archive("done").reason is None
    assert "reason" not in Outcome(
        job["_id"], job["lock_token"], 1, executed=True, decision=Archive("done")).to_document()["decision"]


def test_a_long_allow_list_is_shortened_in_the_reason() -> None:
    allowed = AllowedModules(tuple(f"m{i}" for i in range(25)))
    reason = allowed.refusal("this:nothing") or ""
    assert reason.endswith("allowed modules: m0, m1, m2, m3, m4, m5, m6, m7, m8, m9 and 15 more)")
    assert AllowedModules(()).refusal("this:nothing") == (
        "class not allowed: this:nothing (module 'this' is not in the worker's allowed modules: none)")


def test_a_policy_document_with_a_class_that_is_no_class_name_is_refused_at_enqueue() -> None:
    assert importable_problem("not a class name") == "'not a class name' is not of the form 'module:Qualname'"


@pytest.mark.parametrize(("hello", "limit"), [
    ({"maxBsonObjectSize": 48_000_000}, 48_000_000), ({"maxBsonObjectSize": 1024}, 1024), ({}, 16 * 1024 * 1024),
    ({"maxBsonObjectSize": True}, 16 * 1024 * 1024), ({"maxBsonObjectSize": -5}, 16 * 1024 * 1024),
    ({"maxBsonObjectSize": "16MB"}, 16 * 1024 * 1024), (None, 16 * 1024 * 1024),
])
def test_the_size_limit_from_hello_is_checked(hello: Any, limit: int) -> None:
    assert limit_from_hello(hello) == limit
