"""Judging attempts: retry decisions, crash verdicts and storable results, without I/O."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId

from recruiter.domain.attempt import (
    BAD_RETRY_POLICY,
    MAX_MESSAGE_CHARS,
    MAX_RESULT_BYTES,
    MAX_TRACE_CHARS,
    describe_exception,
    failure_of,
    judge,
    judge_crash,
    storable_result,
)
from recruiter.domain.outcome import CRASHED, CRASHED_TOO_MANY_TIMES
from recruiter.domain.retry import (
    NON_RETRIABLE,
    NOT_SCHEDULED,
    TRIED_TOO_MANY_TIMES,
    Archive,
    Decision,
    DoNotDoItAgain,
    ExponentialBackoff,
    Failure,
    MoveToGroup,
    RetriableExceptionFilter,
    RetryAt,
    RetryForever,
    RetryManyTimes,
    RetryPolicy,
    SwitchGroup,
    policy_to_document,
)

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
NOW = T0 + timedelta(minutes=10)


class Boom(RuntimeError):
    pass


@dataclass(frozen=True)
class Divides(RetryPolicy):
    """A user policy with a bug: it raises ArithmeticError."""

    def decide(self, failure: Failure, now: datetime) -> Decision:
        return RetryAt(now + timedelta(seconds=1 / 0))


@dataclass(frozen=True)
class Raises(RetryPolicy):
    """A user policy with a bug: it raises an exception of its own."""

    def decide(self, failure: Failure, now: datetime) -> Decision:
        raise Boom("policy bug")


@dataclass(frozen=True)
class ReturnsNothing(RetryPolicy):
    """A user policy with a bug: it returns no decision."""

    def decide(self, failure: Failure, now: datetime) -> Decision:
        return None  # type: ignore[return-value]


@dataclass(frozen=True)
class Remembers(RetryPolicy):
    """Retries at a time that encodes what it was told, so tests can read it back."""

    def decide(self, failure: Failure, now: datetime) -> Decision:
        return MoveToGroup(
            f"attempts={failure.attempts},crashed={failure.crashed},type={failure.exception_types[0]}",
            now + timedelta(seconds=1),
        )


def job(policy: RetryPolicy | dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "_id": ObjectId(),
        "created_at": T0,
        "scheduled_at": T0 + timedelta(minutes=1),
        "attempts": 1,
        "crashes": 0,
        "retry_policy": policy_to_document(policy or DoNotDoItAgain())
        if not isinstance(policy, dict) else policy,
    }
    doc.update(extra)
    return doc


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001
        return caught


def failure(j: dict[str, Any], exc: BaseException | None = None) -> Failure:
    return failure_of(j, raised(exc or ValueError("bad input")), NOW)


# -- describing exceptions ---------------------------------------------------------------


def test_describe_exception() -> None:
    cls, message, trace = describe_exception(raised(Boom("it broke")))
    assert cls == f"{__name__}:Boom"
    assert message == "it broke"
    assert trace.startswith("Traceback")
    assert "Boom: it broke" in trace


def test_describe_exception_trims_to_storable_sizes() -> None:
    cls, message, trace = describe_exception(raised(ValueError("x" * (MAX_TRACE_CHARS * 2))))
    assert cls == "builtins:ValueError"
    assert len(message) == MAX_MESSAGE_CHARS
    assert len(trace) == MAX_TRACE_CHARS
    assert trace.endswith("x\n")  # the end of a trace (the error line) is what is kept


def test_failure_of() -> None:
    j = job(attempts=3)
    f = failure_of(j, raised(Boom("no")), NOW)
    assert f.job_id == str(j["_id"])
    assert f.attempts == 3
    assert f.created_at == T0
    assert f.scheduled_at == j["scheduled_at"]
    assert f.ended_at == NOW
    assert f.exception_types[0] == f"{__name__}:Boom"
    assert "builtins:RuntimeError" in f.exception_types
    assert "builtins:Exception" in f.exception_types
    assert f.message == "no"
    assert f.crashed is False


# -- judging a failed attempt ------------------------------------------------------------


def test_judge_follows_the_policy() -> None:
    assert judge(job(), failure(job()), NOW) == Archive(NOT_SCHEDULED)
    j = job(RetryManyTimes(times=2, wait=timedelta(seconds=30)))
    assert judge(j, failure(j), NOW) == RetryAt(NOW + timedelta(seconds=30))
    tired = job(RetryManyTimes(times=2), attempts=3)
    assert judge(tired, failure(tired), NOW) == Archive(TRIED_TOO_MANY_TIMES)


def test_judge_exponential_backoff_delays() -> None:
    policy = ExponentialBackoff(times=3, initial=timedelta(seconds=1))
    delays = []
    for attempts in (1, 2, 3):
        j = job(policy, attempts=attempts)
        decision = judge(j, failure(j), NOW)
        assert isinstance(decision, RetryAt)
        delays.append(decision.at - NOW)
    assert delays == [timedelta(seconds=1), timedelta(seconds=2), timedelta(seconds=4)]
    last = job(policy, attempts=4)
    assert judge(last, failure(last), NOW) == Archive(TRIED_TOO_MANY_TIMES)


def test_judge_uses_the_exception() -> None:
    j = job(RetriableExceptionFilter(RetryForever(), [KeyError]))
    assert judge(j, failure(j, KeyError("k")), NOW) == RetryAt(NOW)
    assert judge(j, failure(j, ValueError("v")), NOW) == Archive(NON_RETRIABLE)


def test_judge_can_move_the_job() -> None:
    j = job(SwitchGroup("slow", DoNotDoItAgain(), wait=timedelta(minutes=1)))
    assert judge(j, failure(j), NOW) == MoveToGroup("slow", NOW + timedelta(minutes=1))


@pytest.mark.parametrize(
    "policy_doc",
    [
        {"class": "nonexistent.module:Policy", "parameters": {}},
        {"class": "recruiter.retry:NoSuchPolicy", "parameters": {}},
        {"class": "builtins:dict", "parameters": {}},
        {"class": "recruiter.retry:RetryManyTimes", "parameters": {"times": -1}},
        {"class": "recruiter.retry:RetryManyTimes", "parameters": {"unknown": 1}},
        {"class": "recruiter.retry:RetryManyTimes", "parameters": "times=2"},
        {"parameters": {}},
        "DoNotDoItAgain",
        None,
    ],
    ids=["no-module", "no-class", "not-a-policy", "bad-value", "unknown-parameter",
         "parameters-not-a-mapping", "no-class-field", "a-string", "none"],
)
def test_bad_policy_document_archives_as_bad_retry_policy(policy_doc: Any) -> None:
    j = job(attempts=1)
    j["retry_policy"] = policy_doc
    assert judge(j, failure(j), NOW) == Archive(BAD_RETRY_POLICY) == Archive("bad-retry-policy")


def test_missing_policy_archives_as_bad_retry_policy() -> None:
    j = job()
    del j["retry_policy"]
    assert judge(j, failure(j), NOW) == Archive(BAD_RETRY_POLICY)


@pytest.mark.parametrize("policy", [Divides(), Raises(), ReturnsNothing()],
                         ids=["arithmetic", "own-exception", "no-decision"])
def test_buggy_policy_archives_as_bad_retry_policy(policy: RetryPolicy) -> None:
    j = job(policy)
    assert judge(j, failure(j), NOW) == Archive(BAD_RETRY_POLICY)


# -- judging a crash ---------------------------------------------------------------------


def crashed_job(policy: RetryPolicy, crashes: int = 1, **extra: Any) -> dict[str, Any]:
    """A job the cleaner unlocked, as the next worker finds it (attempt counted again)."""
    fields: dict[str, Any] = {
        "attempts": 2,
        "crashes": crashes,
        "crash_pending": True,
        "last_execution": {
            "attempt": 1,
            "crashed": True,
            "scheduled_at": T0,
            "ended_at": NOW - timedelta(seconds=5),
            "message": "worker w1 stopped heartbeating",
        },
    }
    fields.update(extra)
    return job(policy, **fields)


def test_poison_limit_archives_a_job_that_crashed_too_many_times() -> None:
    # The policy would retry forever; the framework's limit archives the job anyway.
    assert judge_crash(crashed_job(RetryForever(), crashes=3), NOW, max_crashes=3) == Archive(
        CRASHED_TOO_MANY_TIMES
    )
    assert judge_crash(crashed_job(RetryForever(), crashes=5), NOW, max_crashes=3) == Archive(
        "crashed-too-many-times"
    )
    assert judge_crash(crashed_job(RetryForever(), crashes=2), NOW, max_crashes=3) is None


@pytest.mark.parametrize("policy", [
    DoNotDoItAgain(), RetryManyTimes(times=3, wait=timedelta(minutes=2)), Remembers(),
    ExponentialBackoff(times=1, initial=timedelta(seconds=10)),
    RetriableExceptionFilter(RetryManyTimes(times=3), ["builtins:KeyError"]),
], ids=["do-not-do-it-again", "retry-later", "own-policy", "backoff", "filter"])
def test_a_crash_reruns_the_job_now_whatever_its_retry_policy(policy: RetryPolicy) -> None:
    # A SIGKILL, an OOM kill or a lost machine is the infrastructure's failure, not the job's.
    assert judge_crash(crashed_job(policy), NOW, max_crashes=3) is None
    assert judge_crash(crashed_job(policy, crashes=2), NOW, max_crashes=3) is None
    assert judge_crash(crashed_job(policy, crashes=3), NOW, max_crashes=3) == Archive(CRASHED_TOO_MANY_TIMES)


def test_a_broken_retry_policy_does_not_matter_to_a_crash() -> None:
    j = crashed_job(RetryForever())
    j["retry_policy"] = {"class": "nonexistent:Policy", "parameters": {}}
    assert judge_crash(j, NOW, max_crashes=3) is None


def test_an_at_most_once_job_is_archived_on_its_first_crash() -> None:
    assert judge_crash(crashed_job(RetryForever(), crashes=1, at_most_once=True), NOW, max_crashes=3) == Archive(
        CRASHED)
    assert judge_crash(crashed_job(RetryForever(), crashes=1), NOW, max_crashes=3) is None


def test_a_crash_count_that_is_not_a_count_is_taken_as_spent() -> None:
    assert judge_crash(crashed_job(RetryForever(), crashes="2"), NOW, max_crashes=3) == Archive(
        CRASHED_TOO_MANY_TIMES)


# -- results --------------------------------------------------------------------------------


def test_storable_results() -> None:
    assert storable_result(None) == (None, None)
    assert storable_result(42) == (42, None)
    assert storable_result({"ok": True, "items": [1, 2]}) == ({"ok": True, "items": [1, 2]}, None)
    assert storable_result("") == ("", None)


@pytest.mark.parametrize("value", [{1, 2}, object(), {1: "non-str key"}, 2**70],
                         ids=["set", "object", "int-key", "too-big-int"])
def test_unencodable_result_is_dropped_with_a_reason(value: Any) -> None:
    stored, dropped = storable_result(value)
    assert stored is None
    assert dropped is not None
    assert dropped.reason.startswith("the result cannot be stored: ")
    assert dropped.size_bytes is None


def test_too_big_result_is_dropped_with_a_reason() -> None:
    stored, dropped = storable_result("x" * MAX_RESULT_BYTES)
    assert stored is None
    assert dropped is not None
    assert f"over the {MAX_RESULT_BYTES}-byte limit" in dropped.reason
    assert dropped.size_bytes == MAX_RESULT_BYTES + 13  # the BSON of {"r": value}
    fits = "x" * (MAX_RESULT_BYTES - 100)
    assert storable_result(fits) == (fits, None)
