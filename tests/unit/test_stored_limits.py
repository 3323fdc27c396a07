"""Limits edited by hand keep their word (recruiter.domain.stored_limits): integers in any BSON
numeric type, every other malformed limit held at the last good one (or whole), never unlimited."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from bson.decimal128 import Decimal128
from bson.int64 import Int64

from recruiter.domain.limits import Limit, Limits, allowance
from recruiter.domain.pacing import LimitState, Rate
from recruiter.domain.stored_limits import LastGood, in_force, read_limits

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def doc(**groups: object) -> dict[str, object]:
    return {"_id": "limits", "groups": groups}


@pytest.mark.parametrize("two", [2, Int64(2), 2.0, Decimal128("2"), Decimal128("2.000")])
def test_an_integer_in_any_bson_numeric_type_is_read_as_one(two: object) -> None:
    stored = read_limits(doc(pay={"max_running": two, "rate": "5/s", "burst": two}))
    assert stored.lines() == []
    assert stored.limits.by_key[("pay", None)] == Limit(2, Rate.parse("5/s", 2))


@pytest.mark.parametrize(("value", "why"), [
    (2.5, "expected an integer, got float 2.5"), ("2", "got str"), (True, "got bool"),
    (Decimal128("2.5"), "got Decimal128"), (float("nan"), "got float nan"), (float("inf"), "got float inf"),
    (Decimal128("NaN"), "got Decimal128"),
])
def test_anything_else_is_malformed_with_its_reason(value: object, why: str) -> None:
    stored = read_limits(doc(pay={"max_running": value}))
    assert ("pay", None) in stored.malformed()
    assert why in stored.malformed()[("pay", None)]
    assert not stored.limits


def test_an_unknown_field_beside_a_valid_one_makes_the_limit_malformed() -> None:
    stored = read_limits(doc(pay={"max_running": 2, "rates": "5/s", "brust": 3}))
    assert stored.malformed() == {("pay", None): "unknown fields 'rates', 'brust' (a limit has max_running, rate, "
                                                 "burst)"}
    line = stored.lines()
    assert line == ["groups.pay (group pay): unknown fields 'rates', 'brust' (a limit has max_running, rate, burst)"]


def test_a_name_stored_twice_shadows_nothing_both_are_malformed() -> None:
    stored = read_limits({"_id": "limits", "groups": {"a.b": {"max_running": 1}, "a%2Eb": {"max_running": 9},
                                                       "x%y": {"max_running": 1}, "x%25y": {"max_running": 2}}})
    problems = "\n".join(stored.lines())
    assert "groups.a.b" in problems
    assert "groups.a%2Eb" in problems
    assert "is stored 2 times (groups.x%y, groups.x%25y)" in problems
    assert set(stored.malformed()) == {("a.b", None), ("x%y", None)}
    assert not stored.limits  # neither of the two applies alone


def test_unknown_fields_of_the_document_are_reported() -> None:
    stored = read_limits({"_id": "limits", "groups": {"pay": {"max_running": 1}}, "tenant": {"pay": {}}})
    assert stored.lines() == ["unknown field 'tenant' in the limits document (limits go in groups and tenants): "
                              "not applied"]
    assert stored.limits.by_key == {("pay", None): Limit(1)}


def test_a_malformed_limit_holds_its_group_at_the_last_good_one_or_whole() -> None:
    memory = LastGood()
    assert memory.in_force(read_limits(doc(pay={"max_running": 2}))).by_key == {("pay", None): Limit(2)}
    held = memory.in_force(read_limits(doc(pay={"max_running": "lots"}, mail={"max_running": 2.5})))
    assert held.by_key == {("pay", None): Limit(2)}  # pay at its last good limit, not unlimited
    assert held.held == frozenset({("mail", None)})  # mail: none seen, so nothing of it starts
    remaining = allowance(held, LimitState(), {}, T0)
    assert remaining.remaining[("mail", None)] == 0
    assert "mail" in remaining.exhausted_groups()
    fixed = memory.in_force(read_limits(doc(pay={"max_running": 3}, mail={"max_running": 1})))
    assert fixed == Limits({("pay", None): Limit(3), ("mail", None): Limit(1)})
    cleared = memory.in_force(read_limits(doc()))
    assert cleared == Limits()


def test_a_section_that_is_not_a_document_keeps_every_limit_it_held() -> None:
    memory = LastGood()
    memory.in_force(read_limits({"_id": "limits", "groups": {"pay": {"max_running": 2}},
                                 "tenants": {"pay": {"acme": {"rate": "1/s"}}}}))
    broken = memory.in_force(read_limits({"_id": "limits", "groups": "oops", "tenants": {"pay": 5}}))
    assert broken.by_key == {("pay", None): Limit(2), ("pay", "acme"): Limit(rate=Rate.parse("1/s"))}
    assert in_force(read_limits({"_id": "limits", "groups": "oops"})) == Limits()  # nothing seen: nothing to keep
