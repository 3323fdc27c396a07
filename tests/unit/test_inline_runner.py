"""recruiter.testing.run_inline: a job run here, retried as its policy says, without a server."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from datetime import timedelta

import pytest
import structlog

from recruiter import JobRefused, Workable
from recruiter.retry import DoNotDoItAgain, ExponentialBackoff, RetryForever
from recruiter.testing import STILL_RETRYING, Inline, run_inline, run_inline_async
from tests.testing_workables import (
    AsyncDoubles,
    AsyncSlow,
    BadProgress,
    FailsTwice,
    OnlyFlakyRetried,
    Tupled,
    Unstorable,
)


def test_a_failing_job_is_retried_as_its_policy_says_without_sleeping() -> None:
    result = run_inline(FailsTwice("inv"))
    assert result.why == "done"
    assert result.done
    assert result.result == "inv on inline in generic"
    assert [a.outcome for a in result.attempts] == ["failed", "failed", "done"]
    assert [a.attempt for a in result.attempts] == [1, 2, 3]
    first = result.attempts[0]
    assert first.error_class == "tests.testing_workables:Flaky"
    assert first.message == "flaky 1"
    assert "raise Flaky" in (first.trace or "")
    assert isinstance(first.error, Exception)
    assert first.decision.startswith("retry at ")
    # The waits were skipped, but the job's clock saw them pass.
    assert result.waits == (timedelta(minutes=10), timedelta(minutes=10))
    assert result.attempts[1].started_at - result.attempts[0].ended_at >= timedelta(minutes=10)
    assert (result.attempts[2].ended_at - result.attempts[0].started_at) < timedelta(minutes=21)


def test_the_policy_decides_the_end_and_a_builder_sets_it() -> None:
    given_up = FailsTwice("x").as_job_of(Inline()).retry_with(DoNotDoItAgain()).in_group("billing").enqueue()
    assert given_up.why == "not-scheduled-by-retry-policy"
    assert len(given_up.attempts) == 1
    assert given_up.group == "billing"
    assert given_up.result is None
    with pytest.raises(Exception, match="flaky 1"):
        given_up.unwrap()
    backoff = FailsTwice("x").as_job_of(Inline()).retry_with(ExponentialBackoff(times=1, initial="1s")).enqueue()
    assert backoff.why == "tried-too-many-times"
    assert backoff.waits == (timedelta(seconds=1),)
    assert run_inline(OnlyFlakyRetried()).why == "non-retriable-exception"


def test_a_policy_that_never_gives_up_stops_at_max_attempts() -> None:
    result = run_inline(OnlyFlakyRetried().as_job_of(Inline()).retry_with(RetryForever("1h")), max_attempts=4)
    assert result.why == STILL_RETRYING
    assert len(result.attempts) == 4


def test_progress_and_logs_are_kept_per_attempt_and_nothing_stays_installed() -> None:
    root = logging.getLogger()
    before = (root.level, list(root.handlers), sys.stdout, sys.stderr, list(structlog.get_config()["processors"]))
    result = run_inline(FailsTwice("logs"))
    assert [(c.value, c.message) for c in result.progress] == [(1 / 3, "attempt 1"), (2 / 3, "attempt 2"),
                                                                (1.0, "attempt 3")]
    assert [c.message for c in result.attempts[1].progress] == ["attempt 2"]
    second = result.attempts[1].logs
    assert "INFO    tests.testing_workables: attempt 2 of logs" in second
    assert "PRINT   stdout: printed in attempt 2" in second
    assert "structured attempt=2" in second
    assert "attempt 1" not in second
    assert result.logs.count("printed in attempt") == 3
    after = (root.level, list(root.handlers), sys.stdout, sys.stderr, list(structlog.get_config()["processors"]))
    assert after == before


def test_a_bad_progress_call_fails_the_attempt_as_in_a_worker() -> None:
    result = run_inline(BadProgress())
    assert result.why == "not-scheduled-by-retry-policy"
    assert result.last.error_class == "builtins:ValueError"
    assert result.progress == []


def test_async_jobs_run_from_sync_and_async_code() -> None:
    result = run_inline(AsyncDoubles(21))
    assert result.result == {"n": 42, "attempt": 1}
    assert [c.value for c in result.progress] == [1.0]

    async def main() -> None:
        inner = await run_inline_async(AsyncDoubles(5))
        assert inner.result == {"n": 10, "attempt": 1}
        synchronous = await run_inline_async(FailsTwice("a"))
        assert synchronous.result == "a on inline in generic"
        with pytest.raises(RuntimeError, match="run_inline_async"):
            run_inline(AsyncDoubles(1))

    asyncio.run(main())


def test_an_async_job_is_stopped_at_its_timeout() -> None:
    result = run_inline(AsyncSlow())
    assert result.why == "not-scheduled-by-retry-policy"
    assert result.last.outcome == "timed-out"
    assert result.last.error_class == "recruiter.child:JobTimedOut"


def test_the_job_is_rebuilt_from_what_would_be_stored() -> None:
    assert run_inline(Tupled((1, 2))).result == "list"
    unstorable = run_inline(Unstorable())
    assert unstorable.done
    assert unstorable.result is None
    assert "the result cannot be stored: InvalidDocument" in (unstorable.result_dropped or "")


def test_a_job_enqueue_would_refuse_is_refused() -> None:
    class Local(Workable):
        def execute(self) -> None:
            pass

    with pytest.raises(JobRefused, match="import"):
        run_inline(Local())
    with pytest.raises(ValueError, match="max_attempts"):
        run_inline(Tupled((1, 2)), max_attempts=0)


def test_importing_the_helpers_imports_neither_pytest_nor_the_embedded_server() -> None:
    code = ("import sys, recruiter.testing; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pytest', '_pytest', 'secantusdb') or m == 'recruiter.processes.embedded'))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert found.stdout.strip() == "[]"
