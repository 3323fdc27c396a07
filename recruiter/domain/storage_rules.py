"""What MongoDB refuses to store, as pure checks of the write commands a client sends.

The write guard (:mod:`recruiter.store.strict`) runs :func:`command_violations`
on every ``insert``, ``update``, ``findAndModify`` and ``bulkWrite`` command; the
producer and the reader use :func:`~recruiter.domain.field_names.odd_name` to refuse or set aside field names
before anything writes them. Nothing here does I/O.

The rules, and where they come from:

- **Size.** A stored document is at most 16 MiB (16 777 216 bytes), the BSON
  document size limit ("MongoDB Limits and Thresholds",
  https://www.mongodb.com/docs/manual/reference/limits/). An inserted or
  replacing document is checked whole; an update only by the values it stores
  (the guard does not know the rest of the document).
- **Depth.** "MongoDB supports no more than 100 levels of nesting for BSON
  documents" (same page); every embedded document and array is a level, a
  top-level field is level 1 (SERVER-26703: a chain of 101 embedded documents is
  refused). An update's value is counted from the level of its path, so
  ``$set: {"a.b": v}`` puts ``v``'s fields at level 3.
- **Dollar-prefixed names in updates** ("Field Names with Periods and Dollar
  Signs", https://www.mongodb.com/docs/manual/core/dot-dollar-considerations/,
  and its page "Dollar-Prefixed Field Names", .../dot-dollar-considerations/dollar-prefix/).
  Since MongoDB 5.0: an update operator may not target a top-level ``$`` field
  (``$set: {"$hotel": 1}`` is refused unless an upsert inserts: the guard cannot
  tell, so it refuses it, except under ``$setOnInsert``, which only an insert
  applies); a replacement
  document may not have top-level ``$`` fields; ``_id`` may hold no ``$`` field at
  any depth; inserts may use ``$`` names anywhere else. MongoDB's own tests pin
  the same lines: ``jstests/core/write/update/updateh.js`` ("Disallow $ in field
  names at the top-level"; ``$set: {a: {$z: 1}}`` works) and
  ``jstests/core/field_name_validation.js``.
- **Dollar-prefixed or dotted names inside what an update stores** (the rule
  :data:`STORED_NAME`). MongoDB before 5.0 refuses a ``$`` name at any depth of
  a stored document ("The dollar ($) prefixed field ... is not valid for
  storage", ``src/mongo/db/update/storage_validation.cpp`` of 4.x), and PyMongo
  4 still supports MongoDB 4.4. On 5.0+ such names are stored but "not directly
  accessible": a dotted name is read as a path, a ``$`` name as an operator, so
  no later update or query can reach them without ``$getField``/``$setField``.
  The queue copies documents between collections with updates, so it never lets
  such a name into a value an update writes: ``$set``, ``$setOnInsert``,
  ``$push``, ``$addToSet``, ``$min``, ``$max``, a replacement below its top
  level, or a ``$literal`` of an update pipeline.
- **Update pipelines.** Only ``$addFields``/``$set``, ``$project``, ``$unset``,
  ``$replaceRoot`` and ``$replaceWith`` stages; a field a stage sets may not
  start with ``$``; outside ``$literal``, an expression object is either one
  operator (``{"$add": [...]}``) or plain fields without dots (a dotted name
  there is an error, "Dotted fields without $literal cannot be updated in a
  pipeline-style update", field_name_validation.js). Values that come from
  data belong in ``$literal``: a string ``"$x"`` outside it reads field ``x``.
- **Paths.** An update path has no empty part (``a..b``) and at most 255 parts
  (dot-dollar-considerations, "General Restrictions").
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import bson
from bson.errors import InvalidDocument
from bson.regex import Regex

# MAX_DEPTH, deepest, odd_name and odd_name_problem are named here too, as callers use them.
from recruiter.domain.field_names import MAX_DEPTH as MAX_DEPTH
from recruiter.domain.field_names import deepest as deepest
from recruiter.domain.field_names import has_dollar_name
from recruiter.domain.field_names import odd_name as odd_name
from recruiter.domain.field_names import odd_name_problem as odd_name_problem

MAX_BSON_BYTES = 16 * 1024 * 1024
MAX_PATH_PARTS = 255

# Rule names, as the guard reports them.
SIZE = "size"
DEPTH = "depth"
TOP_LEVEL_DOLLAR = "top-level-dollar"
ID_FIELD = "id-field"
STORED_NAME = "stored-name"
UPDATE_SHAPE = "update-shape"
PATH = "path"
PIPELINE = "pipeline"

# Operators whose value is stored at the path (the others take numbers, conditions or flags).
_STORING = frozenset({"$set", "$setOnInsert", "$min", "$max"})
_APPENDING = frozenset({"$push", "$addToSet"})  # the value (or each of its $each) becomes an element
_OTHER = frozenset({"$unset", "$inc", "$mul", "$rename", "$currentDate", "$bit", "$pop", "$pull", "$pullAll"})
_STAGES = frozenset({"$addFields", "$set", "$project", "$unset", "$replaceRoot", "$replaceWith"})


@dataclass(frozen=True)
class Violation:
    """One write MongoDB (or the queue's rule for stored names) refuses: which rule, where, why."""

    rule: str
    where: str
    detail: str

    def line(self) -> str:
        return f"{self.where}: {self.detail} [{self.rule}]"

    @property
    def refused_by_mongodb(self) -> bool:
        """Whether MongoDB 5.0+ itself refuses the write (:data:`STORED_NAME` is the queue's rule,
        which MongoDB before 5.0 enforces)."""
        return self.rule != STORED_NAME


def _size(value: object) -> int:
    try:
        return len(bson.encode(value if isinstance(value, Mapping) else {"v": value}))
    except (InvalidDocument, TypeError, OverflowError, ValueError):
        return 0  # not BSON at all: the driver refuses it before it is sent


# -- documents ---------------------------------------------------------------------------------------


def _id_violations(doc: Mapping[str, object], where: str) -> Iterator[Violation]:
    if "_id" not in doc:
        return
    value = doc["_id"]
    if isinstance(value, list | tuple | Regex | re.Pattern):
        yield Violation(ID_FIELD, f"{where}._id", f"_id cannot be {type(value).__name__}")
    elif has_dollar_name(value):
        yield Violation(ID_FIELD, f"{where}._id", "_id cannot hold a field name starting with '$' at any depth")


def _document_violations(doc: object, where: str) -> Iterator[Violation]:
    """Size, depth and ``_id`` of a whole document (inserted or replacing)."""
    if not isinstance(doc, Mapping):
        yield Violation(UPDATE_SHAPE, where, f"expected a document, got {type(doc).__name__}")
        return
    yield from _id_violations(doc, where)
    size = _size(doc)
    if size > MAX_BSON_BYTES:
        yield Violation(SIZE, where, f"document of {size} bytes; MongoDB stores at most {MAX_BSON_BYTES}")
    level = max((deepest(v, 1) for v in doc.values()), default=0)
    if level > MAX_DEPTH:
        yield Violation(DEPTH, where, f"nested more than {MAX_DEPTH} levels deep")


def insert_violations(doc: object, where: str) -> list[Violation]:
    """What MongoDB 5.0+ refuses in an inserted document ($ and dotted names are allowed)."""
    return list(_document_violations(doc, where))


def _replacement_violations(doc: Mapping[str, object], where: str) -> Iterator[Violation]:
    yield from _document_violations(doc, where)
    found = odd_name({k: v for k, v in doc.items() if k != "_id"}, where)
    if found:
        yield Violation(STORED_NAME, found, "a replacement document stores a field name with '$' or '.'")


# -- update operators --------------------------------------------------------------------------------


def _path_violations(path: str, where: str, operator: str = "") -> Iterator[Violation]:
    parts = path.split(".")
    if any(not part for part in parts):
        yield Violation(PATH, f"{where}.{path}", "an update path cannot have an empty part")
    elif len(parts) > MAX_PATH_PARTS:
        yield Violation(PATH, f"{where}.{path[:60]}", f"an update path has at most {MAX_PATH_PARTS} parts")
    elif parts[0].startswith("$") and operator == "$setOnInsert":
        # Applied only when an upsert inserts, which MongoDB 5.0+ validates as an insert.
        yield Violation(STORED_NAME, f"{where}.{path}", "an upsert inserts a top-level field starting with '$'")
    elif parts[0].startswith("$"):
        yield Violation(TOP_LEVEL_DOLLAR, f"{where}.{path}",
                        "an update cannot set a top-level field whose name starts with '$'")
    elif any(_named_dollar(p) for p in parts[1:]):
        if parts[0] == "_id":
            yield Violation(ID_FIELD, f"{where}.{path}", "_id cannot hold a field name starting with '$'")
        else:
            yield Violation(STORED_NAME, f"{where}.{path}", "the path creates a field name starting with '$'")


def _named_dollar(part: str) -> bool:
    """A path part naming a ``$`` field: not the positional ``$``, ``$[]`` or ``$[name]``."""
    return part.startswith("$") and part != "$" and not part.startswith("$[")


def _stored_items(operator: str, value: object, level: int) -> list[tuple[object, int]]:
    """What an operator stores at a path of ``level`` parts: (value, level of the value's element)."""
    if operator in _STORING:
        return [(value, level)]
    if isinstance(value, Mapping) and "$each" in value:
        each = value["$each"]
        return [(item, level + 1) for item in (each if isinstance(each, list | tuple) else [each])]
    return [(value, level + 1)]


def _stored_violations(operator: str, path: str, value: object, where: str) -> Iterator[Violation]:
    here = f"{where}.{path}"
    if path.split(".")[0] == "_id" and has_dollar_name(value):
        yield Violation(ID_FIELD, here, "_id cannot hold a field name starting with '$' at any depth")
        return
    for item, level in _stored_items(operator, value, len(path.split("."))):
        found = odd_name(item, here)
        if found:
            yield Violation(STORED_NAME, found, f"{operator} stores a field name with '$' or '.'")
            return
        if deepest(item, level) > MAX_DEPTH:
            yield Violation(DEPTH, here, f"{operator} nests the document more than {MAX_DEPTH} levels deep")
            return


def _operator_violations(operator: str, spec: object, where: str) -> Iterator[Violation]:
    here = f"{where}.{operator}"
    if operator not in _STORING | _APPENDING | _OTHER:
        yield Violation(UPDATE_SHAPE, here, f"unknown update operator {operator}")
        return
    if not isinstance(spec, Mapping):
        yield Violation(UPDATE_SHAPE, here, f"{operator} needs a document, got {type(spec).__name__}")
        return
    for path, value in spec.items():
        yield from _path_violations(str(path), here, operator)
        if operator == "$rename" and isinstance(value, str):
            yield from _path_violations(value, f"{here}.{path}")
        if operator in _STORING | _APPENDING:
            yield from _stored_violations(operator, str(path), value, here)


def _operators_violations(update: Mapping[str, object], where: str) -> Iterator[Violation]:
    stored = 0
    for operator, spec in update.items():
        yield from _operator_violations(operator, spec, where)
        if operator in _STORING | _APPENDING and isinstance(spec, Mapping):
            stored += _size(spec)
    if stored > MAX_BSON_BYTES:
        yield Violation(SIZE, where, f"the update stores {stored} bytes; a document holds at most {MAX_BSON_BYTES}")


# -- update pipelines --------------------------------------------------------------------------------


def _literal_violations(value: object, where: str) -> Iterator[Violation]:
    found = odd_name(value, where)
    if found:
        yield Violation(STORED_NAME, found, "a $literal of an update pipeline holds a field name with '$' or '.'")
    elif deepest(value, 1) > MAX_DEPTH:
        yield Violation(DEPTH, where, f"a $literal nested more than {MAX_DEPTH} levels deep")


def _expression_violations(value: object, where: str, depth: int = 0) -> Iterator[Violation]:
    if depth > MAX_DEPTH:
        yield Violation(DEPTH, where, f"an expression nested more than {MAX_DEPTH} levels deep")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _expression_violations(item, f"{where}.{index}", depth + 1)
    elif isinstance(value, Mapping):
        yield from _object_violations(value, where, depth)


def _object_violations(value: Mapping[str, object], where: str, depth: int) -> Iterator[Violation]:
    items = [(str(k), v) for k, v in value.items()]
    operators = [(k, v) for k, v in items if k.startswith("$")]
    if operators and len(items) > 1:
        yield Violation(PIPELINE, f"{where}.{operators[0][0]}",
                        "an expression object holds one operator and no other field (wrap data in $literal)")
    elif operators and operators[0][0] == "$literal":
        yield from _literal_violations(operators[0][1], f"{where}.$literal")
    elif operators:
        yield from _expression_violations(operators[0][1], f"{where}.{operators[0][0]}", depth + 1)
    else:
        for key, child in items:
            if "." in key:
                yield Violation(PIPELINE, f"{where}.{key}", "a field name in an expression cannot hold a '.'")
            yield from _expression_violations(child, f"{where}.{key}", depth + 1)


def _stage_violations(stage: object, where: str) -> Iterator[Violation]:
    if not isinstance(stage, Mapping) or len(stage) != 1 or next(iter(stage)) not in _STAGES:
        yield Violation(PIPELINE, where, "an update pipeline stage is one of " + ", ".join(sorted(_STAGES)))
        return
    name, spec = next(iter(stage.items()))
    here = f"{where}.{name}"
    if name in ("$addFields", "$set", "$project") and isinstance(spec, Mapping):
        for field, expression in spec.items():
            if str(field).startswith("$"):
                yield Violation(TOP_LEVEL_DOLLAR, f"{here}.{field}", f"{name} cannot set a field starting with '$'")
            yield from _expression_violations(expression, f"{here}.{field}")
    elif name in ("$replaceWith", "$replaceRoot"):
        yield from _expression_violations(spec, here)


def _pipeline_violations(pipeline: list[object], where: str) -> Iterator[Violation]:
    for index, stage in enumerate(pipeline):
        yield from _stage_violations(stage, f"{where}.{index}")


# -- commands ----------------------------------------------------------------------------------------


def update_violations(update: object, where: str) -> list[Violation]:
    """What MongoDB refuses in one update (the ``u`` of an ``update``, the ``update`` of a
    ``findAndModify``): an operator document, a replacement document or a pipeline."""
    if isinstance(update, list):
        return list(_pipeline_violations(update, where))
    if not isinstance(update, Mapping):
        return [Violation(UPDATE_SHAPE, where, f"an update is a document or a pipeline, got {type(update).__name__}")]
    dollar = [str(k).startswith("$") for k in update]
    if dollar and all(dollar):
        return list(_operators_violations(update, where))
    if any(dollar):
        first = next(k for k in update if str(k).startswith("$"))
        return [Violation(TOP_LEVEL_DOLLAR, f"{where}.{first}",
                          "a replacement document cannot have a top-level field starting with '$' "
                          "(nor mix update operators and fields)")]
    return list(_replacement_violations(update, where))


def _bulk_write_violations(command: Mapping[str, object]) -> Iterator[Violation]:
    """The client-level ``bulkWrite`` command (MongoDB 8.0): its ``ops`` name a namespace index."""
    ops = command.get("ops")
    for index, op in enumerate(ops if isinstance(ops, list) else []):
        if not isinstance(op, Mapping):
            continue
        if "insert" in op:
            yield from insert_violations(op.get("document"), f"bulkWrite.ops.{index}.document")
        elif "update" in op and "updateMods" in op:
            yield from update_violations(op["updateMods"], f"bulkWrite.ops.{index}.updateMods")


def command_violations(name: str, command: Mapping[str, object]) -> list[Violation]:
    """Every violation in one write command as the driver sends it (its document sequences merged in)."""
    collection = command.get(name, "")
    if name == "insert":
        docs = command.get("documents")
        return [v for i, d in enumerate(docs if isinstance(docs, list) else [])
                for v in insert_violations(d, f"insert {collection} #{i}")]
    if name == "update":
        updates = command.get("updates")
        return [v for i, u in enumerate(updates if isinstance(updates, list) else [])
                if isinstance(u, Mapping) for v in update_violations(u.get("u"), f"update {collection} #{i}")]
    if name.lower() == "findandmodify" and "update" in command:
        return update_violations(command["update"], f"findAndModify {collection}")
    if name == "bulkWrite":
        return list(_bulk_write_violations(command))
    return []
