from __future__ import annotations

import dataclasses
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import bson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from recruiter.domain.naming import UnknownClass, exception_lineage, name_problem
from recruiter.domain.retry import (
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
    SelectByException,
    SwitchGroup,
    TimeTable,
    WorkerCrashed,
    policy_from_document,
    policy_to_document,
)

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]


class Boom(RuntimeError):
    pass


class BigBoom(Boom):
    pass


@dataclass(frozen=True)
class RetryUnlessMessageSays(RetryPolicy):
    """A user-defined policy: every field kind the generic serialisation handles."""

    word: str
    wait: timedelta
    otherwise: RetryPolicy
    exceptions: tuple[str, ...] = ("builtins:ValueError",)
    limit: timedelta | None = None
    attempts_cap: int = 3

    def decide(self, failure: Failure, now: datetime) -> Decision:
        if self.word in failure.message:
            return Archive("user-said-stop")
        if set(self.exceptions) & set(failure.exception_types):
            if self.limit is not None and now - failure.created_at > self.limit:
                return Archive("too-old")
            if failure.attempts <= self.attempts_cap:
                return RetryAt(now + self.wait)
        return self.otherwise.decide(failure, now)


class NotADataclassPolicy(RetryPolicy):
    def decide(self, failure: Failure, now: datetime) -> Decision:
        return Archive("x")


def failure(
    attempts: int = 1,
    exc: type[BaseException] = Boom,
    *,
    age: timedelta = timedelta(0),
    crashed: bool = False,
    job_id: str = "job-1",
    message: str = "it failed",
) -> Failure:
    if crashed:
        exc = WorkerCrashed
    return Failure(
        job_id=job_id,
        attempts=attempts,
        created_at=NOW - age,
        scheduled_at=NOW - timedelta(seconds=1),
        ended_at=NOW,
        exception_types=exception_lineage(exc),
        message=message,
        crashed=crashed,
    )


def run_until_settled(policy: RetryPolicy, limit: int = 100) -> tuple[list[timedelta], Decision]:
    """Fail every execution; return the delays chosen and the final decision."""
    delays: list[timedelta] = []
    for attempts in range(1, limit + 1):
        decision = policy.decide(failure(attempts), NOW)
        if not isinstance(decision, RetryAt):
            return delays, decision
        delays.append(decision.at - NOW)
    raise AssertionError(f"{policy} still retrying after {limit} executions")


# -- single policies ------------------------------------------------------------


def test_do_not_do_it_again_archives() -> None:
    assert DoNotDoItAgain().decide(failure(), NOW) == Archive("not-scheduled-by-retry-policy")


def test_retry_many_times_counts_executions() -> None:
    delays, final = run_until_settled(RetryManyTimes(times=2, wait="30s"))
    assert delays == [timedelta(seconds=30)] * 2
    assert final == Archive("tried-too-many-times")


def test_exponential_backoff_two_times_means_three_executions() -> None:
    delays, final = run_until_settled(ExponentialBackoff(times=2, initial=timedelta(seconds=1)))
    assert delays == [timedelta(seconds=1), timedelta(seconds=2)]
    assert final == Archive("tried-too-many-times")


@given(st.integers(0, 30), st.integers(1, 10**6))
def test_backoff_retries_exactly_times_and_grows(times: int, initial_ms: int) -> None:
    policy = ExponentialBackoff(times=times, initial=timedelta(milliseconds=initial_ms))
    delays, final = run_until_settled(policy)
    assert len(delays) == times
    assert final == Archive("tried-too-many-times")
    for attempts in range(1, times):
        assert policy.delay(attempts + 1) == 2 * policy.delay(attempts)
    # Retry times past the end of the calendar saturate instead of overflowing.
    latest = datetime.max.replace(tzinfo=UTC)
    assert delays == [min(policy.delay(a), latest - NOW) for a in range(1, times + 1)]


def test_backoff_cap() -> None:
    policy = ExponentialBackoff(times=6, initial="1s", cap="10s")
    delays, _ = run_until_settled(policy)
    assert [d.total_seconds() for d in delays] == [1, 2, 4, 8, 10, 10]


def test_backoff_huge_attempts_saturate_instead_of_overflowing() -> None:
    policy = ExponentialBackoff(times=10_000, initial="1d")
    decision = policy.decide(failure(5_000), NOW)
    assert isinstance(decision, RetryAt)
    assert decision.at.year == 9999
    assert decision.at.tzinfo is UTC


@given(
    times=st.integers(1, 40),
    initial_ms=st.integers(0, 10**7),
    cap_ms=st.integers(0, 10**8),
    jitter=st.floats(0, 1),
    attempts=st.integers(1, 40),
    job_id=st.text(max_size=20),
)
def test_jitter_never_exceeds_cap(
    times: int, initial_ms: int, cap_ms: int, jitter: float, attempts: int, job_id: str
) -> None:
    cap = timedelta(milliseconds=cap_ms)
    policy = ExponentialBackoff(times, timedelta(milliseconds=initial_ms), cap, jitter)
    delay = policy.delay(attempts, job_id)
    assert timedelta(0) <= delay <= cap
    decision = policy.decide(failure(attempts, job_id=job_id), NOW)
    if attempts <= times:
        assert decision == RetryAt(NOW + delay)


@given(
    initial_ms=st.integers(1, 10**6),
    jitter=st.floats(0, 1),
    attempts=st.integers(1, 20),
    job_id=st.text(max_size=20),
)
def test_jitter_stays_within_its_fraction(
    initial_ms: int, jitter: float, attempts: int, job_id: str
) -> None:
    policy = ExponentialBackoff(50, timedelta(milliseconds=initial_ms), jitter=jitter)
    base = timedelta(milliseconds=initial_ms) * 2 ** (attempts - 1)
    delay = policy.delay(attempts, job_id)
    tolerance = timedelta(microseconds=1)
    assert base * (1 - jitter) - tolerance <= delay <= base * (1 + jitter) + tolerance


@given(st.text(max_size=30), st.integers(1, 20), st.floats(0.01, 1))
def test_jitter_is_deterministic(job_id: str, attempts: int, jitter: float) -> None:
    a = ExponentialBackoff(20, "1s", jitter=jitter)
    b = ExponentialBackoff(20, "1s", jitter=jitter)
    assert a.decide(failure(attempts, job_id=job_id), NOW) == b.decide(
        failure(attempts, job_id=job_id), NOW
    )


def test_jitter_spreads_jobs_apart() -> None:
    policy = ExponentialBackoff(5, "10s", jitter=0.5)
    delays = {policy.delay(1, f"job-{i}") for i in range(50)}
    assert len(delays) > 40
    assert min(delays) >= timedelta(seconds=5)
    assert max(delays) <= timedelta(seconds=15)


def test_jitter_does_not_depend_on_hash_seed() -> None:
    code = (
        "from recruiter.retry import ExponentialBackoff as E;"
        "print(E(5, '10s', jitter=1.0).delay(3, 'job-42').total_seconds())"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO,
            env={"PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    in_process = ExponentialBackoff(5, "10s", jitter=1.0).delay(3, "job-42").total_seconds()
    assert outputs == {f"{in_process}\n"}


def test_retry_forever() -> None:
    policy = RetryForever(wait=timedelta(minutes=2))
    for attempts in (1, 10, 10_000):
        assert policy.decide(failure(attempts), NOW) == RetryAt(NOW + timedelta(minutes=2))


def test_waits_beyond_a_century_are_refused_in_one_line() -> None:
    """A wait no date can hold is refused when the policy is built (it used to saturate at
    datetime.max; issue 22 bounds every duration at a century)."""
    with pytest.raises(ValueError, match="too large"):
        RetryForever(timedelta.max)


# -- TimeTable ------------------------------------------------------------------

TABLE = TimeTable({"5m": "1m", "1h": "5m", "1d": "1h"})


@pytest.mark.parametrize(
    ("age", "decision"),
    [
        (timedelta(0), RetryAt(NOW + timedelta(minutes=1))),
        (timedelta(minutes=5) - timedelta(microseconds=1), RetryAt(NOW + timedelta(minutes=1))),
        (timedelta(minutes=5), RetryAt(NOW + timedelta(minutes=5))),
        (timedelta(minutes=59), RetryAt(NOW + timedelta(minutes=5))),
        (timedelta(hours=1), RetryAt(NOW + timedelta(hours=1))),
        (timedelta(days=1) - timedelta(microseconds=1), RetryAt(NOW + timedelta(hours=1))),
        (timedelta(days=1), Archive("tried-too-many-times")),
        (timedelta(days=300), Archive("tried-too-many-times")),
    ],
)
def test_time_table_boundaries(age: timedelta, decision: Decision) -> None:
    assert TABLE.decide(failure(age=age), NOW) == decision


def test_time_table_reads_a_naive_created_at_as_utc() -> None:
    f = failure(age=timedelta(minutes=10))
    naive = Failure(**{**vars(f), "created_at": f.created_at.replace(tzinfo=None)})
    assert TABLE.decide(naive, NOW) == TABLE.decide(f, NOW) == RetryAt(NOW + timedelta(minutes=5))


def test_time_table_sorts_its_rows_and_stores_pairs_of_seconds() -> None:
    shuffled = TimeTable([("1d", "1h"), (300, 60), (timedelta(hours=1), "5m")])
    assert shuffled == TABLE
    assert TABLE.to_document()["parameters"] == {
        "table": [[300.0, 60.0], [3600.0, 300.0], [86400.0, 3600.0]]
    }


@given(st.integers(0, 3 * 86400))
def test_time_table_matches_reference(age_s: int) -> None:
    age = timedelta(seconds=age_s)
    expected: Decision = Archive("tried-too-many-times")
    if age < timedelta(minutes=5):
        expected = RetryAt(NOW + timedelta(minutes=1))
    elif age < timedelta(hours=1):
        expected = RetryAt(NOW + timedelta(minutes=5))
    elif age < timedelta(days=1):
        expected = RetryAt(NOW + timedelta(hours=1))
    assert TABLE.decide(failure(attempts=age_s + 1, age=age), NOW) == expected


# -- exception-based policies ---------------------------------------------------


def test_filter_delegates_for_listed_exceptions_and_their_subclasses() -> None:
    policy = RetriableExceptionFilter(RetryForever("1s"), [Boom, "builtins:KeyError"])
    retry = RetryAt(NOW + timedelta(seconds=1))
    assert policy.decide(failure(exc=Boom), NOW) == retry
    assert policy.decide(failure(exc=BigBoom), NOW) == retry
    assert policy.decide(failure(exc=KeyError), NOW) == retry
    assert policy.decide(failure(exc=RuntimeError), NOW) == Archive("non-retriable-exception")
    assert policy.decide(failure(exc=ValueError), NOW) == Archive("non-retriable-exception")


def test_filter_lets_the_inner_policy_judge_crashes() -> None:
    policy = RetriableExceptionFilter(RetryManyTimes(1, "1s"), [KeyError])
    assert policy.decide(failure(1, crashed=True), NOW) == RetryAt(NOW + timedelta(seconds=1))
    assert policy.decide(failure(2, crashed=True), NOW) == Archive("tried-too-many-times")


def test_filter_accepts_names_in_several_forms() -> None:
    by_class = RetriableExceptionFilter(RetryForever(), Boom)
    by_colon = RetriableExceptionFilter(RetryForever(), f"{__name__}:Boom")
    by_dot = RetriableExceptionFilter(RetryForever(), f"{__name__}.Boom")
    assert by_class == by_colon == by_dot
    assert by_class.exceptions == (f"{__name__}:Boom",)


def test_select_by_exception_first_matching_rule_wins() -> None:
    policy = SelectByException(
        [
            (BigBoom, RetryForever("1s")),
            ((Boom, KeyError), RetryForever("2s")),
            (WorkerCrashed, RetryForever("3s")),
            (Exception, RetryForever("4s")),
        ],
        default=RetryForever("5s"),
    )

    def delay(f: Failure) -> timedelta:
        decision = policy.decide(f, NOW)
        assert isinstance(decision, RetryAt)
        return decision.at - NOW

    assert delay(failure(exc=BigBoom)) == timedelta(seconds=1)
    assert delay(failure(exc=Boom)) == timedelta(seconds=2)
    assert delay(failure(exc=KeyError)) == timedelta(seconds=2)
    assert delay(failure(crashed=True)) == timedelta(seconds=3)
    assert delay(failure(exc=ValueError)) == timedelta(seconds=4)
    assert delay(failure(exc=KeyboardInterrupt)) == timedelta(seconds=5)


def test_select_by_exception_default_is_do_not_do_it_again() -> None:
    policy = SelectByException([(KeyError, RetryForever())])
    assert policy.default == DoNotDoItAgain()
    assert policy.decide(failure(exc=Boom), NOW) == Archive("not-scheduled-by-retry-policy")


def test_switch_group_moves_instead_of_archiving() -> None:
    policy = SwitchGroup("slow-lane", after=RetryManyTimes(1, "10s"), wait="1m")
    assert policy.decide(failure(1), NOW) == RetryAt(NOW + timedelta(seconds=10))
    assert policy.decide(failure(2), NOW) == MoveToGroup("slow-lane", NOW + timedelta(minutes=1))


def test_switch_group_archives_once_the_job_is_in_the_target_group() -> None:
    policy = SwitchGroup("slow-lane", after=RetryManyTimes(1, "10s"))
    moved = dataclasses.replace(failure(2), group="slow-lane")
    assert policy.decide(moved, NOW) == Archive("tried-too-many-times")


def test_switch_group_inside_filter_still_archives_non_retriable() -> None:
    policy = RetriableExceptionFilter(SwitchGroup("other", DoNotDoItAgain()), [Boom])
    assert policy.decide(failure(exc=Boom), NOW) == MoveToGroup("other", NOW)
    assert policy.decide(failure(exc=KeyError), NOW) == Archive("non-retriable-exception")


# -- serialisation --------------------------------------------------------------

durations = st.integers(0, 10**9).map(lambda ms: timedelta(milliseconds=ms))
positive_durations = st.integers(1, 10**9).map(lambda ms: timedelta(milliseconds=ms))
exception_refs = st.sampled_from(
    [ValueError, KeyError, OSError, Boom, WorkerCrashed, "builtins:LookupError", "a.b:C"]
)
exception_lists = st.lists(exception_refs, min_size=1, max_size=3)

leaf_policies = st.one_of(
    st.just(DoNotDoItAgain()),
    st.builds(RetryManyTimes, st.integers(0, 20), durations),
    st.builds(
        ExponentialBackoff,
        st.integers(0, 20),
        durations,
        st.none() | durations,
        st.floats(0, 1),
    ),
    st.builds(RetryForever, durations),
    st.builds(TimeTable, st.dictionaries(positive_durations, durations, min_size=1, max_size=4)),
)


def _extend(children: st.SearchStrategy[RetryPolicy]) -> st.SearchStrategy[RetryPolicy]:
    return st.one_of(
        st.builds(RetriableExceptionFilter, children, exception_lists),
        st.builds(
            SelectByException,
            st.lists(st.tuples(exception_lists, children), max_size=3),
            children,
        ),
        st.builds(SwitchGroup, st.text(min_size=1).filter(lambda g: name_problem("group", g) is None), children,
                  durations),
        st.builds(
            RetryUnlessMessageSays,
            st.text(min_size=1, max_size=5),
            durations,
            children,
            st.lists(st.sampled_from(["builtins:ValueError", "builtins:OSError"])).map(tuple),
            st.none() | durations,
            st.integers(0, 5),
        ),
    )


policies = st.recursive(leaf_policies, _extend, max_leaves=8)

failures = st.builds(
    failure,
    attempts=st.integers(1, 30),
    exc=st.sampled_from([ValueError, KeyError, OSError, Boom, BigBoom, KeyboardInterrupt]),
    age=st.integers(0, 10**8).map(lambda s: timedelta(seconds=s)),
    crashed=st.booleans(),
    job_id=st.text(max_size=10),
    message=st.text(max_size=10),
)


def _assert_plain(value: Any) -> None:
    if isinstance(value, dict):
        assert all(isinstance(key, str) for key in value)
        for item in value.values():
            _assert_plain(item)
    elif isinstance(value, list):
        for item in value:
            _assert_plain(item)
    else:
        assert value is None or isinstance(value, (str, int, float, bool)), value


@given(policies)
def test_documents_round_trip_through_bson(policy: RetryPolicy) -> None:
    document = policy_to_document(policy)
    _assert_plain(document)
    assert document == policy.to_document()
    stored = bson.decode(bson.encode({"retry_policy": document}))["retry_policy"]
    restored = policy_from_document(stored)
    assert restored == policy
    assert type(restored) is type(policy)
    assert policy_to_document(restored) == document


@given(policies, failures)
def test_restored_policies_decide_alike_and_never_in_the_past(
    policy: RetryPolicy, f: Failure
) -> None:
    decision = policy.decide(f, NOW)
    assert policy_from_document(policy_to_document(policy)).decide(f, NOW) == decision
    assert isinstance(decision, (RetryAt, Archive, MoveToGroup))
    if isinstance(decision, (RetryAt, MoveToGroup)):
        assert decision.at >= NOW


def test_user_defined_dataclass_policy_round_trips_and_decides() -> None:
    policy = RetryUnlessMessageSays(
        word="fatal",
        wait=timedelta(seconds=90),
        otherwise=SwitchGroup("slow", RetryManyTimes(1, "1m")),
        limit=timedelta(hours=1),
    )
    document = policy.to_document()
    assert document["class"] == f"{__name__}:RetryUnlessMessageSays"
    assert document["parameters"]["wait"] == 90.0
    assert document["parameters"]["exceptions"] == ["builtins:ValueError"]
    assert document["parameters"]["otherwise"]["class"] == "recruiter.retry:SwitchGroup"
    restored = policy_from_document(bson.decode(bson.encode(document)))
    assert restored == policy
    assert isinstance(restored, RetryUnlessMessageSays)
    assert isinstance(restored.wait, timedelta)
    assert isinstance(restored.exceptions, tuple)

    assert restored.decide(failure(exc=KeyError, message="fatal error"), NOW) == Archive(
        "user-said-stop"
    )
    assert restored.decide(failure(exc=ValueError), NOW) == RetryAt(NOW + timedelta(seconds=90))
    too_old = failure(exc=ValueError, age=timedelta(hours=2))
    assert restored.decide(too_old, NOW) == Archive("too-old")
    assert restored.decide(failure(1, exc=KeyError), NOW) == RetryAt(NOW + timedelta(minutes=1))
    assert restored.decide(failure(2, exc=KeyError), NOW) == MoveToGroup("slow", NOW)


def test_policy_without_dataclass_must_override_serialisation() -> None:
    with pytest.raises(TypeError, match="override to_document"):
        NotADataclassPolicy().to_document()


def test_policy_defined_in_a_function_is_refused() -> None:
    @dataclass(frozen=True)
    class Local(RetryPolicy):
        def decide(self, failure: Failure, now: datetime) -> Decision:
            return Archive("x")

    with pytest.raises(TypeError, match="module level"):
        Local().to_document()


@pytest.mark.parametrize(
    ("document", "error", "message"),
    [
        ({"class": "no_such_module_xyz:Policy", "parameters": {}}, UnknownClass, "cannot import"),
        ({"class": "recruiter.retry:NoSuchPolicy", "parameters": {}}, UnknownClass, "no attribute"),
        ({"class": "builtins:dict", "parameters": {}}, ValueError, "not a RetryPolicy"),
        ({"parameters": {}}, ValueError, "'class'"),
        ("recruiter.retry:RetryForever", ValueError, "'class'"),
        ({"class": "recruiter.retry:RetryForever", "parameters": []}, ValueError, "mapping"),
        (
            {"class": "recruiter.retry:RetryForever", "parameters": {"wiat": 1}},
            ValueError,
            "unknown parameters for RetryForever: wiat",
        ),
        (
            {"class": "recruiter.retry:RetryManyTimes", "parameters": {}},
            ValueError,
            "invalid parameters for retry policy recruiter.retry:RetryManyTimes",
        ),
        (
            {"class": "recruiter.retry:RetryManyTimes", "parameters": {"times": -1}},
            ValueError,
            "times must not be negative",
        ),
    ],
)
def test_bad_documents(document: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        policy_from_document(document)


def test_missing_parameters_mean_defaults() -> None:
    assert policy_from_document({"class": "recruiter.retry:DoNotDoItAgain"}) == DoNotDoItAgain()
    assert policy_from_document({"class": "recruiter.retry.RetryForever"}) == RetryForever(0)


def test_policy_to_document_refuses_other_objects() -> None:
    with pytest.raises(TypeError):
        policy_to_document({"class": "x"})  # type: ignore[arg-type]


# -- validation -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: RetryManyTimes(-1), "times must not be negative"),
        (lambda: RetryManyTimes(1.5), "times must be an integer"),  # type: ignore[arg-type]
        (lambda: RetryManyTimes(True), "times must be an integer"),
        (lambda: RetryManyTimes(1, wait=-1), "wait must not be negative"),
        (lambda: RetryManyTimes(1, wait=timedelta(seconds=-1)), "wait must not be negative"),
        (lambda: RetryManyTimes(1, wait=float("inf")), "finite"),
        (lambda: RetryManyTimes(1, wait="soon"), "^wait: invalid duration 'soon': use a number"),
        (lambda: RetryManyTimes(1, wait=[1]), "wait must be a timedelta"),  # type: ignore[arg-type]
        (lambda: ExponentialBackoff(-2), "times must not be negative"),
        (lambda: ExponentialBackoff(2, initial="-1s"), "cannot be negative"),
        (lambda: ExponentialBackoff(2, cap=-5), "cap must not be negative"),
        (lambda: ExponentialBackoff(2, jitter=1.5), "jitter must be a number between 0 and 1"),
        (lambda: ExponentialBackoff(2, jitter=-0.1), "jitter"),
        (lambda: ExponentialBackoff(2, jitter=float("nan")), "jitter"),
        (lambda: RetryForever(-3), "wait must not be negative"),
        (lambda: TimeTable({}), "at least one"),
        (lambda: TimeTable([]), "at least one"),
        (lambda: TimeTable({"0s": "1m"}), "'within' must be positive"),
        (lambda: TimeTable({"5m": "-1m"}), "cannot be negative"),
        (lambda: TimeTable([("5m", "1m"), (300, 10)]), "twice"),
        (lambda: TimeTable([("5m",)]), "pairs"),  # type: ignore[list-item]
        (lambda: TimeTable(["5m1m"]), "pairs"),  # type: ignore[list-item]
        (lambda: RetriableExceptionFilter(RetryForever(), []), "at least one"),
        (lambda: RetriableExceptionFilter(RetryForever(), [int]), "not an exception class"),  # type: ignore[list-item]
        (lambda: RetriableExceptionFilter(RetryForever(), ["ValueError"]), "module:Qualname"),
        (lambda: RetriableExceptionFilter(RetryForever(), [""]), "neither"),
        (lambda: RetriableExceptionFilter(RetryForever(), 5), "exception classes or names"),  # type: ignore[arg-type]
        (lambda: RetriableExceptionFilter("retry", [KeyError]), "policy must be a RetryPolicy"),  # type: ignore[arg-type]
        (lambda: SelectByException([(KeyError,)]), "rules\\[0\\] must be"),  # type: ignore[list-item]
        (lambda: SelectByException([(KeyError, "x")]), "rules\\[0\\] policy"),  # type: ignore[list-item]
        (lambda: SelectByException([], default="x"), "default must be a RetryPolicy"),  # type: ignore[arg-type]
        (lambda: SwitchGroup("", RetryForever()), "invalid group name '': it must be a non-empty string"),
        (lambda: SwitchGroup("g", None), "after must be a RetryPolicy"),  # type: ignore[arg-type]
        (lambda: SwitchGroup("g", RetryForever(), wait="-1m"), "cannot be negative"),
    ],
)
def test_bad_arguments(build: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()


def test_durations_are_normalised() -> None:
    assert RetryManyTimes(1, "1m30s").wait == timedelta(seconds=90)
    assert RetryManyTimes(1, 1.5).wait == timedelta(seconds=1.5)
    assert ExponentialBackoff(1, 2, cap="1h").cap == timedelta(hours=1)
    assert RetryForever("200ms") == RetryForever(timedelta(milliseconds=200))


def test_failure_needs_an_attempt() -> None:
    with pytest.raises(ValueError, match="attempts must be at least 1"):
        failure(attempts=0)


def test_policies_are_frozen_and_hashable() -> None:
    policy = SelectByException([(KeyError, TimeTable({"1h": "1m"}))])
    with pytest.raises(AttributeError):
        policy.default = RetryForever()  # type: ignore[misc]
    assert hash(policy) == hash(policy_from_document(policy.to_document()))
