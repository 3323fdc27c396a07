"""The write guard's rules, pinned to MongoDB's own examples.

Each case is an example from MongoDB's documentation ("Field Names with Periods
and Dollar Signs" and its pages "Dollar-Prefixed Field Names" and "Field Names
with Periods"; "MongoDB Limits and Thresholds") or from MongoDB's own tests
(``jstests/core/write/update/updateh.js``, ``jstests/core/field_name_validation.js``,
SERVER-26703), with the verdict MongoDB 5.0+ gives it:

- ``ok``: MongoDB stores it and so does the guard;
- ``queue``: MongoDB 5.0+ stores it, MongoDB 4.4 refuses it, and the queue's
  ``stored-name`` rule refuses it (a ``$`` or dotted name inside what an update writes);
- a rule name: MongoDB refuses it, and the guard says which rule.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from recruiter.domain.storage_rules import (
    MAX_BSON_BYTES,
    Violation,
    command_violations,
    deepest,
    insert_violations,
    odd_name,
    odd_name_problem,
    update_violations,
)


def verdict(found: list[Violation]) -> str:
    if not found:
        return "ok"
    if all(not v.refused_by_mongodb for v in found):
        return "queue"
    return next(v.rule for v in found if v.refused_by_mongodb)


def nested(levels: int) -> dict[str, Any]:
    """SERVER-26703's makeNestObj: ``levels`` embedded documents, the innermost field at that level."""
    doc: dict[str, Any] = {"s": 1}
    for _ in range(1, levels):
        doc = {"s": doc}
    return doc


INSERTS = [
    # Dollar-Prefixed Field Names, "Insert Operations"
    ({"$price": 50.00, "quantity": 30}, "ok"),
    ({"$id": "h1961-01", "location": {"$db": "novels", "$ref": "2007042768", "$inc": True}}, "ok"),
    # Field Names with Periods, "Insert a Field Name with a Period"
    ({"item": "sweatshirt", "price.usd": 45.99, "quantity": 20}, "ok"),
    # field_name_validation.js
    ({"a": {"a.b": 1}}, "ok"),
    ({"_id": {"a.b": 1}}, "ok"),
    ({"a": {"$b": 1}}, "ok"),
    ({"a": {"_id": [9]}}, "ok"),
    ({"a": {"_id": {"$b": 1}}}, "ok"),
    ({"$a": {"$b": 1}}, "ok"),
    ({"_id.$gt": 4}, "ok"),
    ({"_id": {"$b": 1}}, "id-field"),
    ({"_id": {"a": 1, "$b": 1}}, "id-field"),
    ({"_id": {"a": {"$b": 1}}, "x": 1}, "id-field"),  # SERVER-75880: at any depth
    ({"_id": [9]}, "id-field"),
    ({"_id": re.compile("a")}, "id-field"),
    # MongoDB Limits and Thresholds, "Nested Depth for BSON Documents"; SERVER-26703
    (nested(100), "ok"),
    (nested(101), "depth"),
    ({"a": [[[[nested(96)]]]]}, "depth"),  # arrays are levels too
]


@pytest.mark.parametrize(("doc", "expected"), INSERTS)
def test_inserts_as_mongodb_judges_them(doc: dict[str, Any], expected: str) -> None:
    assert verdict(insert_violations(doc, "insert")) == expected


UPDATES = [
    # Dollar-Prefixed Field Names: an update that matches a document fails on "$hotel"
    ({"$set": {"phone": 25.17, "$hotel": 320.10}}, "top-level-dollar"),
    # ... and an upsert that inserts is validated as an insert: $setOnInsert applies only then
    ({"$setOnInsert": {"phone": 25.17, "$hotel": 320.10}}, "queue"),
    # "Document Replacing Updates": a nested $ field can be set through its path
    ({"$set": {"address.$street": "Elm Ave"}}, "queue"),
    # "Document Modifying Updates"
    ({"$inc": {"pricing.$discount": 10}}, "queue"),
    ({"$inc": {"quantity": 10}}, "ok"),
    # "Updates Using Aggregation Pipelines" and Field Names with Periods, "Update a Field that has a Period"
    ([{"$replaceWith": {"$setField": {"field": {"$literal": "$term"}, "input": "$$ROOT", "value": "spring"}}}], "ok"),
    ([{"$replaceWith": {"$setField": {"field": "price.usd", "input": "$$ROOT", "value": 29.99}}}], "ok"),
    ({"$set": {"price.usd": 29.99}}, "ok"),  # a path: sets price: {usd: ...}
    # updateh.js
    ({"$set": {"y": 1}}, "ok"),
    ({"$set": {"$z": 1}}, "top-level-dollar"),
    ({"$inc": {"$z": 1}}, "top-level-dollar"),
    ({"$set": {"$$$": 1}}, "top-level-dollar"),
    ({"$set": {"$secret.agent.x": 1}}, "top-level-dollar"),
    ({"$set": {"a.$b": 1}}, "queue"),
    ({"$set": {"a": {"$z": 1}}}, "queue"),
    ({"$set": {"sneaky.$x": 1}}, "queue"),
    ({"$set": {"secret.agent$": 1}}, "ok"),
    ({"$set": {"ke$sha": 1}}, "ok"),
    ({"$set": {"more$$moreproblem$": 1}}, "ok"),
    ({"$set": {"$reffoo": 1}}, "top-level-dollar"),
    ({"$set": {"x": {"$ref": "1", "$id": 1, "$db": "1"}}}, "queue"),
    # field_name_validation.js, update command
    ({"a.b": 1}, "queue"),  # a replacement stores "a.b" as a name
    ({"$set": {"_id": {"$invalid": 1}}}, "id-field"),
    ({"$set": {"_id.$gt": 1}}, "id-field"),
    ({"$setOnInsert": {"_id": {"$invalid": 1}}}, "id-field"),
    ({"$setOnInsert": {"_id.$invalid": 1}}, "id-field"),
    ({"a": {"$c": 1}}, "queue"),
    ({"foo": {"$c": 1, "bar": {"$d": 4}}}, "queue"),
    ([{"$replaceWith": {"$literal": {"$a": 1}}}], "queue"),
    ([{"$replaceWith": {"$literal": {"a": {"$a": 1}}}}], "queue"),
    ({"$c": 1}, "update-shape"),  # not an operator: FailedToParse
    ({"$ref": 1}, "update-shape"),
    # field_name_validation.js, findAndModify
    ({"_id": 0, "a.b": 1}, "queue"),
    ({"$set": {"_id": 1, "a.b": 1}}, "ok"),
    ([{"$replaceWith": {"$literal": {"_id": 1, "a.b": 3}}}], "queue"),
    ([{"$replaceWith": {"_id": 1, "a.b.c": 3}}], "pipeline"),
    ({"_id": 1, "$invalid": 1}, "top-level-dollar"),
    ({"$set": {"_id": 1, "$invalid": 1}}, "top-level-dollar"),
    ({"_id": 2, "out": {"$in": 1, "x": 2}}, "queue"),
    # field_name_validation.js, aggregation: a stage cannot set a $ field
    ([{"$addFields": {"_id.a": 1, "$newField": {"$multiply": ["$_id.b", "$_id.a"]}}}], "top-level-dollar"),
    ([{"$project": {"_id.a": 1, "$newField": {"$multiply": ["$_id.b", "$_id.a"]}}}], "top-level-dollar"),
    # an expression object is one operator or plain fields (data goes in $literal)
    ([{"$set": {"j": {"order": {"$where": 1}, "x": 1}}}], "ok"),
    ([{"$set": {"j": {"$where": 1, "x": 1}}}], "pipeline"),
    ([{"$match": {"a": 1}}], "pipeline"),
    # paths
    ({"$set": {"a..b": 1}}, "path"),
    ({"$set": {".a": 1}}, "path"),
    ({"$unset": {"a.": ""}}, "path"),
    ({"$rename": {"a": "$b"}}, "top-level-dollar"),
    ({"$set": {".".join(["p"] * 256): 1}}, "path"),
    ({"$frobnicate": {"a": 1}}, "update-shape"),
    ({"$set": 1}, "update-shape"),
]


@pytest.mark.parametrize(("update", "expected"), UPDATES)
def test_updates_as_mongodb_judges_them(update: Any, expected: str) -> None:
    assert verdict(update_violations(update, "u")) == expected


def test_an_update_is_deep_from_the_level_of_its_path() -> None:
    assert verdict(update_violations({"$set": {"a": nested(99)}}, "u")) == "ok"
    assert verdict(update_violations({"$set": {"a": nested(100)}}, "u")) == "depth"
    assert verdict(update_violations({"$set": {"a.b": nested(99)}}, "u")) == "depth"
    assert verdict(update_violations({"$push": {"a": nested(99)}}, "u")) == "depth"  # an element: one more
    assert verdict(update_violations({"$push": {"a": {"$each": [nested(98)]}}}, "u")) == "ok"
    assert verdict(update_violations({"$push": {"a": {"$each": [{"$x": 1}]}}}, "u")) == "queue"


def test_sizes() -> None:
    big = "x" * MAX_BSON_BYTES
    assert verdict(insert_violations({"a": big}, "i")) == "size"
    assert verdict(insert_violations({"a": "x" * (MAX_BSON_BYTES - 100)}, "i")) == "ok"
    assert verdict(update_violations({"$set": {"a": big}}, "u")) == "size"
    assert verdict(update_violations({"b": big}, "u")) == "size"


def test_commands_name_the_document_and_path() -> None:
    found = command_violations("update", {"update": "roster", "updates": [
        {"q": {}, "u": {"$set": {"ok": 1}}},
        {"q": {}, "u": {"$set": {"job": {"workable": {"parameters": {"order": {"$where": 1}}}}}}, "upsert": True},
    ]})
    assert [v.line() for v in found] == [
        "update roster #1.$set.job.workable.parameters.order.$where: $set stores a field name with '$' or '.' "
        "[stored-name]"]
    assert [v.where for v in command_violations("insert", {"insert": "c", "documents": [{}, {"_id": [1]}]})] == [
        "insert c #1._id"]
    assert command_violations("findAndModify", {"findAndModify": "c", "query": {}, "remove": True}) == []
    assert command_violations("delete", {"delete": "c", "deletes": [{"q": {"$where": 1}}]}) == []
    assert [v.where for v in command_violations("bulkWrite", {"bulkWrite": 1, "ops": [
        {"insert": 0, "document": {"_id": {"$x": 1}}},
        {"update": 0, "filter": {}, "updateMods": {"$set": {"$y": 1}}},
    ]})] == ["bulkWrite.ops.0.document._id", "bulkWrite.ops.1.updateMods.$set.$y"]


@pytest.mark.parametrize("value", [None, 1, "x", [], {}, {1: 2}, {"a": [{"b": {"c": None}}]}, nested(500)])
def test_the_walks_never_raise(value: Any) -> None:
    odd_name(value, "v")
    deepest(value, 1)
    update_violations({"$set": {"v": value}}, "u")
    update_violations([{"$set": {"v": value}}], "u")
    insert_violations({"v": value}, "i")


def test_odd_names_are_named_by_their_path() -> None:
    assert odd_name({"order": {"lines": [{"a": 1}, {"b.c": 2}]}}, "parameters") == "parameters.order.lines.1.b.c"
    assert odd_name({"order": {"$where": "1"}}, "parameters") == "parameters.order.$where"
    assert odd_name({"ok": [1, {"fine": "$value"}]}, "p") is None  # values may start with $
    assert odd_name_problem({"order": {"$where": "1"}}, "parameters") == (
        "parameters.order.$where: field name starts with '$'; MongoDB cannot store it in an update "
        "(use names without a leading '$' or a '.')")


def test_a_deep_path_is_shown_by_its_start_and_end() -> None:
    value: Any = {"$where": 1}
    for _ in range(80):
        value = {"level": value}
    problem = odd_name_problem(value, "parameters")
    assert problem is not None
    assert problem.startswith("parameters.level.level")
    assert "level...level." in problem
    assert ".level.$where: field name starts with '$'" in problem
    assert len(problem) < 400
