"""Building ``scheduled`` documents: defaults, options, refusals, and BSON round trips."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import bson
import pytest
from bson import ObjectId
from bson.codec_options import CodecOptions
from hypothesis import given, settings
from hypothesis import strategies as st

from recruiter.domain.builder import JobBuilder, as_builder
from recruiter.domain.job import (
    DEFAULT_GROUP,
    JobOptions,
    JobRefused,
    Priority,
    Status,
    build_job_document,
)
from recruiter.domain.retry import DoNotDoItAgain, ExponentialBackoff, RetryManyTimes, policy_from_document
from recruiter.domain.workable import Workable, workable_from_document

NOW = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
NOW_MS = NOW.replace(microsecond=123000)  # BSON dates keep milliseconds
CODEC: CodecOptions[dict[str, Any]] = CodecOptions(tz_aware=True, tzinfo=UTC)


class Invoice(Workable):
    def __init__(self, invoice_id: str, amount: int = 0) -> None:
        self.invoice_id = invoice_id
        self.amount = amount

    def execute(self) -> None:
        pass


class Billing(Workable):
    group = "billing"
    retry_policy = RetryManyTimes(times=2)
    timeout_s = 30

    def __init__(self, n: int) -> None:
        self.n = n

    def execute(self) -> None:
        pass


class Bag(Workable):
    """Takes any keyword parameters, for the round-trip property."""

    def __init__(self, **values: Any) -> None:
        self.values = values

    def execute(self) -> None:
        pass


class Holder(Workable):
    def __init__(self, value: Any) -> None:
        self.value = value

    def execute(self) -> None:
        pass


class FakeRecruiter:
    """Stands for a producer: ``enqueue`` receives the builder."""

    def __init__(self) -> None:
        self.enqueued: list[JobBuilder] = []

    def enqueue(self, builder: JobBuilder) -> str:
        self.enqueued.append(builder)
        return "queued"


def bson_round_trip(doc: dict[str, Any]) -> dict[str, Any]:
    return bson.decode(bson.encode(doc), codec_options=CODEC)


# -- defaults ----------------------------------------------------------------------


def test_defaults_of_a_new_job() -> None:
    doc = build_job_document(Invoice("42"), JobOptions(), NOW)

    assert isinstance(doc["_id"], ObjectId)
    assert doc["group"] == DEFAULT_GROUP == "generic"
    assert doc["status"] == Status.QUEUED == "queued"
    assert doc["attempts"] == 0
    assert doc["crashes"] == 0
    assert doc["locked"] is False
    assert doc["done"] is False
    assert doc["tags"] == []
    assert doc["tenant"] is None
    assert doc["priority"] == "low"
    assert doc["executions"] == []
    assert "timeout_s" not in doc
    assert doc["retry_policy"] == {"class": "recruiter.retry:DoNotDoItAgain", "parameters": {}}
    assert isinstance(policy_from_document(doc["retry_policy"]), DoNotDoItAgain)
    assert doc["workable"] == {
        "class": f"{__name__}:Invoice",
        "parameters": {"invoice_id": "42"},
        "method": "execute",
    }


def test_dates_are_aware_utc_and_bson_precise() -> None:
    doc = build_job_document(Invoice("42"), JobOptions(), NOW)
    assert doc["created_at"] == NOW_MS
    assert doc["scheduled_at"] == NOW_MS
    assert doc["created_at"].tzinfo is not None
    assert doc["created_at"].utcoffset() == timedelta(0)

    stored = bson_round_trip(doc)
    # What MongoDB gives back is exactly what was built: no precision or zone drift.
    assert stored["created_at"] == doc["created_at"]
    assert stored["scheduled_at"] == doc["scheduled_at"]
    raw = bson.decode(bson.encode(doc), codec_options=CodecOptions(tz_aware=False))
    assert isinstance(raw["created_at"], datetime)  # a BSON date, not a string


def test_naive_and_non_utc_now_become_utc() -> None:
    naive = build_job_document(Invoice("1"), JobOptions(), datetime(2026, 1, 1, 10, 0))
    assert naive["created_at"] == datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
    paris = timezone(timedelta(hours=1))
    shifted = build_job_document(Invoice("1"), JobOptions(), datetime(2026, 1, 1, 11, 0, tzinfo=paris))
    assert shifted["created_at"] == datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
    assert shifted["created_at"].utcoffset() == timedelta(0)


def test_class_attributes_give_defaults() -> None:
    doc = build_job_document(Billing(1), JobOptions(), NOW)
    assert doc["group"] == "billing"
    assert policy_from_document(doc["retry_policy"]) == RetryManyTimes(times=2)
    assert doc["timeout_s"] == 30.0


def test_options_override_class_attributes() -> None:
    policy = ExponentialBackoff(times=5, initial=timedelta(seconds=30))
    doc = build_job_document(
        Billing(1), JobOptions(group="urgent", retry_policy=policy, timeout_s=2.5), NOW
    )
    assert doc["group"] == "urgent"
    assert policy_from_document(doc["retry_policy"]) == policy
    assert doc["timeout_s"] == 2.5


def test_given_job_id_is_used() -> None:
    job_id = ObjectId()
    assert build_job_document(Invoice("1"), JobOptions(), NOW, job_id=job_id)["_id"] == job_id


# -- the fluent builder ----------------------------------------------------------


def test_builder_sets_every_option() -> None:
    rec = FakeRecruiter()
    policy = ExponentialBackoff(times=3, initial=timedelta(seconds=1))
    builder = (
        Invoice("42", amount=7)
        .as_job_of(rec)
        .in_group("billing")
        .tagged("a", "b")
        .tagged("c")
        .for_tenant("acme")
        .with_priority("high")
        .retry_with(policy)
        .with_timeout(12)
    )
    doc = builder.build(NOW)
    assert doc["group"] == "billing"
    assert doc["tags"] == ["a", "b", "c"]
    assert doc["tenant"] == "acme"
    assert doc["priority"] == Priority.HIGH == "high"
    assert policy_from_document(doc["retry_policy"]) == policy
    assert doc["timeout_s"] == 12.0
    assert doc["workable"]["parameters"] == {"invoice_id": "42", "amount": 7}

    assert builder.enqueue() == "queued"
    assert rec.enqueued == [builder]


def test_schedule_at_and_schedule_in() -> None:
    rec = FakeRecruiter()
    at = datetime(2026, 5, 1, 8, 30, tzinfo=UTC)
    assert Invoice("1").as_job_of(rec).schedule_at(at).build(NOW)["scheduled_at"] == at

    later = Invoice("1").as_job_of(rec).schedule_in(minutes=5).build(NOW)
    assert later["scheduled_at"] == NOW_MS + timedelta(minutes=5)
    assert later["created_at"] == NOW_MS

    both = Invoice("1").as_job_of(rec).schedule_in(timedelta(hours=1), minutes=30).build(NOW)
    assert both["scheduled_at"] == NOW_MS + timedelta(hours=1, minutes=30)


def test_last_schedule_call_wins() -> None:
    rec = FakeRecruiter()
    at = datetime(2027, 1, 1, tzinfo=UTC)
    assert Invoice("1").as_job_of(rec).schedule_in(minutes=5).schedule_at(at).build(NOW)["scheduled_at"] == at
    assert (
        Invoice("1").as_job_of(rec).schedule_at(at).schedule_in(seconds=10).build(NOW)["scheduled_at"]
        == NOW_MS + timedelta(seconds=10)
    )


def test_schedule_at_in_other_zone_is_stored_in_utc() -> None:
    rec = FakeRecruiter()
    at = datetime(2026, 5, 1, 10, 0, tzinfo=timezone(timedelta(hours=2)))
    doc = Invoice("1").as_job_of(rec).schedule_at(at).build(NOW)
    assert doc["scheduled_at"] == datetime(2026, 5, 1, 8, 0, tzinfo=UTC)
    assert doc["scheduled_at"].utcoffset() == timedelta(0)


def test_negative_delay_is_refused() -> None:
    with pytest.raises(JobRefused, match="non-negative"):
        Invoice("1").as_job_of(FakeRecruiter()).schedule_in(seconds=-1)


def test_builder_is_immutable() -> None:
    base = Invoice("1").as_job_of(FakeRecruiter())
    billing = base.in_group("billing")
    tagged = billing.tagged("x")
    assert base is not billing
    assert billing is not tagged
    assert base.options == JobOptions()
    assert billing.options.group == "billing"
    assert billing.options.tags == ()
    assert tagged.options.tags == ("x",)
    assert base.build(NOW)["group"] == "generic"
    with pytest.raises(AttributeError):
        base.options = JobOptions(group="x")  # type: ignore[misc]


def test_as_builder() -> None:
    rec = FakeRecruiter()
    builder = Invoice("1").as_job_of(rec)
    assert as_builder(builder, rec) is builder
    wrapped = as_builder(Invoice("2"), rec)
    assert isinstance(wrapped, JobBuilder)
    assert wrapped.recruiter is rec
    with pytest.raises(JobRefused, match="expected a Workable or a job builder, got dict"):
        as_builder({"class": "x"}, rec)  # type: ignore[arg-type]


# -- refusals ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({1, 2}, "set"),
        (object(), "object"),
        ({1: "x"}, "key"),
        (2**64, "Holder"),
        ([1, {"deep": {3}}], "set"),
    ],
    ids=["set", "object", "non-str-key", "int-too-big", "nested-set"],
)
def test_unserialisable_parameters_are_refused(value: Any, fragment: str) -> None:
    with pytest.raises(JobRefused) as caught:
        build_job_document(Holder(value), JobOptions(), NOW)
    message = str(caught.value)
    assert "cannot store the parameters of" in message
    assert "Holder" in message  # names the workable class
    assert fragment in message
    assert "\n" not in message


def test_refused_error_is_a_value_error() -> None:
    assert issubclass(JobRefused, ValueError)


@pytest.mark.parametrize("group", ["*", "", "   "])
def test_bad_group_is_refused(group: str) -> None:
    with pytest.raises(JobRefused, match="group"):
        build_job_document(Invoice("1"), JobOptions(group=group), NOW)
    with pytest.raises(JobRefused, match="group"):
        Invoice("1").as_job_of(FakeRecruiter()).in_group(group).build(NOW)


def test_star_group_message_says_why() -> None:
    with pytest.raises(JobRefused, match=r"'\*' is reserved for workers that take any group"):
        Invoice("1").as_job_of(FakeRecruiter()).in_group("*").build(NOW)


def test_empty_group_message_names_the_value() -> None:
    with pytest.raises(JobRefused, match="invalid group name '': it must be a non-empty string"):
        Invoice("1").as_job_of(FakeRecruiter()).in_group("").build(NOW)


@pytest.mark.parametrize("tenant", ["", "*"])
def test_bad_tenant_is_refused(tenant: str) -> None:
    with pytest.raises(JobRefused, match="tenant"):
        Invoice("1").as_job_of(FakeRecruiter()).for_tenant(tenant).build(NOW)


@pytest.mark.parametrize("tag", ["", "*"])
def test_bad_tag_is_refused(tag: str) -> None:
    with pytest.raises(JobRefused, match="tag"):
        Invoice("1").as_job_of(FakeRecruiter()).tagged("ok", tag).build(NOW)


@pytest.mark.parametrize("priority", ["urgent", "HIGH", "", "1"])
def test_bad_priority_is_refused(priority: str) -> None:
    with pytest.raises(JobRefused, match="priority must be 'high' or 'low'"):
        Invoice("1").as_job_of(FakeRecruiter()).with_priority(priority)


@pytest.mark.parametrize("timeout", [0, -1, "10"])
def test_bad_timeout_is_refused(timeout: Any) -> None:
    with pytest.raises(JobRefused, match="timeout must be a positive number"):
        Invoice("1").as_job_of(FakeRecruiter()).with_timeout(timeout).build(NOW)


def test_bad_retry_policy_is_refused() -> None:
    with pytest.raises(JobRefused, match="retry policy must be"):
        build_job_document(Invoice("1"), JobOptions(retry_policy="forever"), NOW)  # type: ignore[arg-type]


def test_non_workable_is_refused() -> None:
    with pytest.raises(JobRefused, match=r"only recruiter\.Workable instances can be enqueued, got str"):
        build_job_document("send invoice", JobOptions(), NOW)  # type: ignore[arg-type]


def test_workable_defined_inside_a_function_is_refused() -> None:
    class Local(Workable):
        def __init__(self, n: int) -> None:
            self.n = n

        def execute(self) -> None:
            pass

    with pytest.raises(JobRefused, match="defined inside a function") as caught:
        build_job_document(Local(1), JobOptions(), NOW)
    assert "module level" in str(caught.value)
    assert isinstance(caught.value.__cause__, TypeError)


# -- round trip ----------------------------------------------------------------------

def _storable(key: str) -> bool:
    """A field name every write can store: no NUL, no leading '$', no '.' (recruiter.domain.storage_rules)."""
    return "\x00" not in key and not key.startswith("$") and "." not in key


_keys = st.text(min_size=1, max_size=12).filter(lambda k: _storable(k) and k != "self")
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
    | st.datetimes(
        min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
    ).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))
    | st.builds(ObjectId)
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(min_size=1, max_size=8).filter(_storable), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=6))
def test_bson_friendly_parameters_round_trip(params: dict[str, Any]) -> None:
    doc = build_job_document(Bag(**params), JobOptions(), NOW)
    stored = bson_round_trip(doc)  # what a worker reads back from MongoDB
    rebuilt = workable_from_document(stored["workable"])
    assert isinstance(rebuilt, Bag)
    assert rebuilt.values == params
    assert rebuilt.export_parameters() == params


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=30), st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_named_parameters_round_trip(invoice_id: str, amount: int) -> None:
    stored = bson_round_trip(build_job_document(Invoice(invoice_id, amount=amount), JobOptions(), NOW))
    rebuilt = workable_from_document(stored["workable"])
    assert isinstance(rebuilt, Invoice)
    assert (rebuilt.invoice_id, rebuilt.amount) == (invoice_id, amount)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=3), st.sampled_from(["$", "a.b", "$where", "."]), st.data())
def test_a_name_an_update_cannot_store_is_refused_wherever_it_is(params: dict[str, Any], odd: str,
                                                                 data: st.DataObject) -> None:
    """Anywhere in the parameters, a '$'-prefixed or dotted name is refused, naming its path."""
    nest = data.draw(st.lists(st.sampled_from(["list", "dict"]), max_size=3))
    value: Any = {odd: 1}
    path = odd
    for kind in reversed(nest):
        value, path = ([value], f"0.{path}") if kind == "list" else ({"k": value}, f"k.{path}")
    with pytest.raises(JobRefused) as caught:
        build_job_document(Bag(**params, deep=value), JobOptions(), NOW)
    assert f"parameters.deep.{path}: field name" in str(caught.value)
