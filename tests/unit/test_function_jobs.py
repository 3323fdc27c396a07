"""Functions made jobs by ``@recruiter.job``: stored as ordinary jobs named by the function, their
call bound to its signature at enqueue (a call that does not fit is refused with one line), run
inline sync and async, rebuilt by a worker from their document, and typed for mypy."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from recruiter import JobContext, JobRefused, job
from recruiter.domain.builder import as_builder
from recruiter.domain.functions import FunctionWorkable
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.domain.workable import workable_from_document
from recruiter.testing import Inline, run_inline
from tests.conftest import REPO
from tests.function_jobs import flaky, ping, plain, renamed, send_invoice
from tests.processes.test_readme import readme_files

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def document(item: Any) -> dict[str, Any]:
    return dict(build_job_document(item, JobOptions(), NOW))


def test_a_function_job_is_stored_as_an_ordinary_job_named_by_the_function() -> None:
    doc = document(send_invoice.workable("INV-1", 5, copy_to="ops@example.com", region="eu"))
    # Positional arguments by name, **extra flattened, defaults left out (as the class form stores them).
    assert doc["workable"] == {"class": "tests.function_jobs:send_invoice", "method": "execute",
                               "parameters": {"invoice_id": "INV-1", "amount": 5, "copy_to": "ops@example.com",
                                              "region": "eu"}}
    assert (doc["group"], doc["timeout_s"], doc["retry_policy"]["class"]) == ("billing", 60.0,
                                                                               "recruiter.retry:RetryManyTimes")
    assert doc["unique"]["key"] == "invoice-INV-1"
    assert document(send_invoice.workable("INV-2"))["workable"]["parameters"] == {"invoice_id": "INV-2"}
    # A keyword named as the **extra parameter itself is stored, and rebuilds the same call.
    extra = send_invoice.workable("INV-2", **{"extra": "e"})
    assert run_inline(extra).result == {"invoice": "INV-2", "amount": 1, "copy_to": None, "extra": {"extra": "e"}}
    # The context parameter is no argument of the call and is not stored.
    assert document(ping.workable(3))["workable"]["parameters"] == {"n": 3}
    assert document(ping.workable(3))["group"] == "generic"
    once = document(plain.workable())
    assert (once["group"], once["at_most_once"], once["workable"]["parameters"]) == ("once", True, {})


def test_the_builder_gives_per_job_options_over_the_decorators() -> None:
    builder = send_invoice.job(Inline(), "INV-3").in_group("urgent").with_timeout(5)
    doc = builder.build(NOW)
    assert (doc["group"], doc["timeout_s"]) == ("urgent", 5.0)


@pytest.mark.parametrize(("call", "reason"), [
    (lambda: send_invoice.workable(), "missing a required argument: 'invoice_id'"),
    (lambda: send_invoice.workable("a", 1, 2), "too many positional arguments"),
    (lambda: send_invoice.workable(invoice_id="a"), "'invoice_id' parameter is positional only"),
    (lambda: ping.workable(n=1, m=2), "got an unexpected keyword argument 'm'"),
    (lambda: send_invoice.enqueue(Inline(), "a", copy_to="x", amount=1, **{"invoice_id": "b"}),
     "keyword argument 'invoice_id' has the name of a parameter"),
])
def test_a_call_that_does_not_fit_the_signature_is_refused_at_enqueue_with_one_line(call: Any, reason: str) -> None:
    with pytest.raises(JobRefused) as caught:
        call()
    assert reason in str(caught.value)
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(("send_invoice(invoice_id, /, amount=1, *, copy_to=None, **extra): ",
                                         "ping(n): ", "send_invoice: "))


def test_enqueueing_the_function_itself_says_how_to_enqueue_a_call_of_it() -> None:
    with pytest.raises(JobRefused, match=r"send_invoice is a function job: enqueue a call of it, "
                                         r"send_invoice\.enqueue\(rec, \.\.\.\) or send_invoice\.workable"):
        as_builder(send_invoice, Inline())  # what rec.enqueue(send_invoice) does first


def test_it_is_still_a_plain_function() -> None:
    assert send_invoice("INV-4", copy_to="x") == {"invoice": "INV-4", "amount": 1, "copy_to": "x", "extra": {}}
    assert (send_invoice.__name__, send_invoice.__doc__) == ("send_invoice", "Sends one invoice.")
    assert flaky(JobContext("j", 5, "w", "g"), 1) == 5
    assert repr(send_invoice) == "<job tests.function_jobs:send_invoice>"


def test_sync_and_async_function_jobs_run_inline_with_their_context_and_retries() -> None:
    result = run_inline(send_invoice.workable("INV-5", 2, note="n"))
    assert (result.why, result.result) == ("done", {"invoice": "INV-5", "amount": 2, "copy_to": None,
                                                    "extra": {"note": "n"}})
    assert run_inline(ping.workable(7)).result == "pong 7 in generic, attempt 1"
    retried = run_inline(flaky.workable(2))
    assert (retried.why, retried.result, len(retried.attempts)) == ("done", 3, 3)
    assert run_inline(flaky.workable(5)).why == "tried-too-many-times"
    assert send_invoice.enqueue(Inline(), "INV-6").result["invoice"] == "INV-6"
    with pytest.raises(TypeError, match="Inline runs the job here and writes nothing: it takes no session"):
        send_invoice.job(Inline(), "INV-6").enqueue(session=object())


def test_a_worker_rebuilds_a_function_job_from_its_document() -> None:
    stored = document(send_invoice.workable("INV-7", copy_to="y"))["workable"]
    again = workable_from_document(stored)
    assert isinstance(again, send_invoice.workable_class)
    assert isinstance(again, FunctionWorkable)
    assert again.export_parameters() == {"invoice_id": "INV-7", "copy_to": "y"}
    assert again.execute(JobContext("j", 1, "w", "g")) == {"invoice": "INV-7", "amount": 1, "copy_to": "y",
                                                           "extra": {}}


def test_stored_parameters_that_no_longer_fit_the_function_fail_the_attempt_with_the_reason() -> None:
    with pytest.raises(TypeError, match=r"ping cannot take its stored parameters \['m'\]: missing a required"):
        workable_from_document({"class": "tests.function_jobs:ping", "parameters": {"m": 1}, "method": "execute"})
    with pytest.raises(TypeError, match=r"undecorated is not a recruiter\.Workable subclass nor a function made a job"):
        workable_from_document({"class": "tests.function_jobs:undecorated", "parameters": {"n": 1}})


def test_a_function_job_workers_could_not_import_by_its_name_is_refused_at_enqueue() -> None:
    with pytest.raises(JobRefused, match="undecorated names another object than the one given"):
        document(renamed.workable(1))

    @job
    def local(n: int) -> int:
        return n

    with pytest.raises(JobRefused, match="is defined inside a function"):
        document(local.workable(1))


def test_the_decorator_checks_its_function_and_options_at_once() -> None:
    def context_second(n: int, ctx: JobContext) -> None: ...
    def star_args(*names: str) -> None: ...
    def keyword_context(*, ctx: JobContext) -> None: ...

    for fn, reason in [(context_second, "make it the first parameter"), (star_args, r"takes \*args"),
                       (keyword_context, "make it the first parameter")]:
        with pytest.raises(TypeError, match=reason):
            job(fn)
    with pytest.raises(JobRefused, match="invalid group name"):
        job(group="a.b")
    with pytest.raises(JobRefused, match="timeout must be a positive number"):
        job(timeout=0)
    with pytest.raises(JobRefused, match="retry policy must be"):
        job(retry_policy="often")  # type: ignore[arg-type]
    with pytest.raises(JobRefused, match="on_conflict must be"):
        job(unique_on_conflict="replace")


def test_the_guides_function_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/guide/writing-jobs.md's reminders.py (tests/integration/test_function_jobs_run.py runs remind.py)."""
    (tmp_path / "reminders.py").write_text(readme_files()["reminders.py"])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "reminders", raising=False)
    reminders = importlib.import_module("reminders")
    doc = document(reminders.send_reminder.workable("INV-9", days_late=3))
    assert doc["workable"] == {"class": "reminders:send_reminder", "method": "execute",
                               "parameters": {"invoice_id": "INV-9", "days_late": 3}}
    assert (doc["group"], doc["retry_policy"]["class"]) == ("billing", "recruiter.retry:ExponentialBackoff")
    assert run_inline(reminders.send_reminder.workable("INV-9", days_late=3)).result == {"reminded": "INV-9",
                                                                                         "days": 3}
    rate = run_inline(reminders.fetch_rate.workable("EUR"))
    assert (rate.why, rate.result, rate.group) == ("done", 1.0, "billing")
    assert [c.message for c in rate.attempts[0].progress] == ["fetching EUR, attempt 1"]


def test_mypy_checks_the_arguments_of_a_function_job_and_types_its_handles(tmp_path: Path) -> None:
    """A user's files (tests/typed_functions, copied into a project of their own), type-checked with
    mypy --strict: the good calls pass, each wrong call is an error, and nothing else."""
    samples = REPO / "tests" / "typed_functions"
    for name in ("good.py", "wrong.py"):
        shutil.copy(samples / name, tmp_path / name)
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--hide-error-context",
                             "--cache-dir", str(REPO / ".mypy_cache"), "good.py", "wrong.py"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "MYPYPATH": str(REPO)})
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert not [e for e in errors if not e.startswith("wrong.py:")], result.stdout + result.stderr
    expected = {n for n, line in enumerate((samples / "wrong.py").read_text().splitlines(), 1) if "# error:" in line}
    assert {int(e.split(":")[1]) for e in errors} == expected, result.stdout
    assert len(expected) == 9
