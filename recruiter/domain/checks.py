"""Value checks for documents read from the database: pure, and they never raise on data.

Each check takes any value and returns ``None`` when it is fine, or what is
wrong with it in a few words (``expected a non-empty string, got int``).
:func:`fields` and :func:`list_of` build checks of embedded documents and
arrays, whose reasons name the path (``.class: missing``, ``.3: ...``);
:mod:`recruiter.domain.documents` composes them into the readers of each
collection's documents.

Invariant: no input value makes a check raise (:func:`fields_problem` turns an
exception of a check into a reason, should one slip through).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime

from bson import Binary, Int64, ObjectId

from recruiter.domain.naming import ANY_GROUP, MAX_NAME_CHARS
from recruiter.domain.records import Raw

# Counts (attempts, crashes) stay far below this; a bigger one would overflow an $inc.
MAX_COUNT = 2**31 - 1

Problem = str | None
Check = Callable[[object], Problem]
Spec = Mapping[str, tuple[bool, Check]]


def kind_of(value: object) -> str:
    """A value's kind in a few words, for reasons: ``int``, ``NaN``, ``an empty string``."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, float) and math.isinf(value):
        return "infinity"
    if isinstance(value, str) and not value:
        return "an empty string"
    if value is None:
        return "null"
    if type(value).__name__ == "DatetimeMS":
        return "a date outside the range Python can read"
    return type(value).__name__


def expected(what: str, value: object) -> str:
    return f"expected {what}, got {kind_of(value)}"


# -- value checks: each returns what is wrong with a value, or None ------------------------------


def name(value: object) -> Problem:
    """A group, tenant, tag or worker id: a non-empty string without NUL (it may become a field name)."""
    if not isinstance(value, str) or not value:
        return expected("a non-empty string", value)
    if "\x00" in value:
        return "expected a string without NUL characters"
    return None


def queue_name(value: object) -> Problem:
    """A group or tenant: a name of bounded length (it becomes a field name of the fairness cursor).

    Looser than the producer's rule (:func:`recruiter.domain.naming.name_problem`), so that
    jobs an older version enqueued (``a.b``) still run: only what no process can use is refused.
    """
    problem = name(value)
    if problem is None and isinstance(value, str) and len(value) > MAX_NAME_CHARS:
        return f"too long: {len(value)} characters, at most {MAX_NAME_CHARS}"
    return problem


def group_name(value: object) -> Problem:
    if value == ANY_GROUP:
        return "'*' is reserved for workers that take any group"
    return queue_name(value)


def optional(check: Check) -> Check:
    """``check``, or null."""

    def check_optional(value: object) -> Problem:
        if value is None:
            return None
        problem = check(value)
        if problem and problem.startswith("expected ") and ", got " in problem:
            head, _, tail = problem.partition(", got ")
            return f"{head} or null, got {tail}"
        return problem

    return check_optional


def text(value: object) -> Problem:
    return None if isinstance(value, str) else expected("a string", value)


def date(value: object) -> Problem:
    # A BSON date outside Python's range is read as bson.DatetimeMS (DATETIME_AUTO), never as datetime.
    return None if isinstance(value, datetime) else expected("a date", value)


def boolean(value: object) -> Problem:
    return None if isinstance(value, bool) else expected("true or false", value)


def count(value: object) -> Problem:
    """A non-negative whole number that an ``$inc`` cannot overflow (mongosh writes numbers as doubles)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return expected("a whole number", value)
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        return expected("a whole number", value)
    if not 0 <= value <= MAX_COUNT:
        return f"expected a whole number from 0 to {MAX_COUNT}, got {str(int(value))[:24]}"
    return None


def epoch(value: object) -> Problem:
    """A lease epoch (informational on a lock: the lock token fences): any whole number from 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not float(value).is_integer() or value < 0:
        return expected("a whole number from 0", value)
    return None


def positive_seconds(value: object) -> Problem:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return expected("a positive number of seconds", value)
    return None if value > 0 else f"expected a positive number of seconds, got {value!r}"


def one_of(*allowed: str) -> Check:
    def check_one_of(value: object) -> Problem:
        if isinstance(value, str) and value in allowed:
            return None
        shown = repr(value[:40]) if isinstance(value, str) and value else kind_of(value)
        return f"expected one of {', '.join(allowed)}, got {shown}"

    return check_one_of


def job_id(value: object) -> Problem:
    """A job id that can be compared, hashed and used in a filter."""
    if isinstance(value, ObjectId | Int64 | uuid.UUID | datetime) or (
            isinstance(value, str | Binary) and value):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return None
    return expected("an ObjectId, a string or a number", value)


def object_id(value: object) -> Problem:
    """A lock token or a session: an ObjectId."""
    return None if isinstance(value, ObjectId) else expected("an ObjectId", value)


def document(value: object) -> Problem:
    return None if isinstance(value, Mapping) else expected("an embedded document", value)


def list_of(check: Check) -> Check:
    def check_list(value: object) -> Problem:
        if not isinstance(value, list):
            return expected("an array", value)
        for i, item in enumerate(value):
            problem = check(item)
            if problem:
                return f".{i}{problem}" if problem.startswith(".") else f".{i}: {problem}"
        return None

    return check_list


def fields(spec: Spec) -> Check:
    """An embedded document whose fields follow ``spec``: name -> (required, check)."""

    def check_fields(value: object) -> Problem:
        if not isinstance(value, Mapping):
            return expected("an embedded document", value)
        problem = fields_problem(value, spec)
        return f".{problem}" if problem else None

    return check_fields


def fields_problem(doc: Raw, spec: Spec) -> Problem:
    """The first field of ``doc`` that does not follow ``spec``, as ``field: what is wrong``."""
    for field, (required, check) in spec.items():
        if field not in doc:
            if required:
                return f"{field}: missing"
            continue
        try:
            problem = check(doc[field])
        except Exception as exc:  # noqa: BLE001 - a check must never let data raise
            problem = f"cannot be checked ({type(exc).__name__})"
        if problem:
            # Nested checks (fields, list_of) answer with a path: ".class: missing".
            return f"{field}{problem}" if problem.startswith(".") else f"{field}: {problem}"
    return None
