"""The field names and the nesting of a value, as MongoDB reads them: pure checks.

Invariant: nothing here raises or does I/O, and no check recurses deeper than
:data:`MAX_DEPTH` + 1 levels, whatever value it is given (a value from a job, or read back
from the database, is untrusted). What MongoDB refuses, and why, is
:mod:`recruiter.domain.storage_rules`, which uses these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

MAX_DEPTH = 100  # levels of nesting MongoDB stores (a top-level field is level 1)
MAX_SHOWN_PATH = 200  # characters of a path a reason shows


def children(value: object) -> Iterable[tuple[str, object]]:
    if isinstance(value, Mapping):
        return ((str(k), v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return ((str(i), v) for i, v in enumerate(value))
    return ()


def deepest(value: object, level: int) -> int:
    """The deepest level in ``value`` stored as an element at ``level`` (a top-level field is level 1).

    Stops counting past :data:`MAX_DEPTH` + 1, so no value makes it recurse without end."""
    if level > MAX_DEPTH:
        return level
    return max([level, *(deepest(child, level + 1) for _, child in children(value))])


def odd_name(value: object, path: str, depth: int = 0) -> str | None:
    """The path of the first field name in ``value`` that starts with ``$`` or holds a ``.``
    (``parameters.order.$where``); None if there is none.

    Array elements are not field names (their path part is the index); a key that is not a
    string is BSON's to refuse. Pure, never raises."""
    if depth > MAX_DEPTH:
        return None
    if isinstance(value, Mapping):
        for key, child in value.items():
            if isinstance(key, str) and (key.startswith("$") or "." in key):
                return f"{path}.{key}" if path else key
            found = odd_name(child, f"{path}.{key}" if path else str(key), depth + 1)
            if found:
                return found
    elif isinstance(value, list | tuple):
        for index, child in enumerate(value):
            found = odd_name(child, f"{path}.{index}", depth + 1)
            if found:
                return found
    return None


def odd_name_problem(value: object, path: str) -> str | None:
    """:func:`odd_name` as a one-line reason naming the path, for refusals and quarantine."""
    found = odd_name(value, path)
    if found is None:
        return None
    name = found.rsplit(".", 1)[-1] if found.count(".") else found
    why = "starts with '$'" if name.startswith("$") else "holds a '.'"
    if len(found) > MAX_SHOWN_PATH:  # a deep path: its start and its end
        head = found[:MAX_SHOWN_PATH // 2].rsplit(".", 1)[0]
        tail = found[-MAX_SHOWN_PATH // 2:].split(".", 1)[-1]
        found = f"{head}...{tail}"
    return (f"{found}: field name {why}; MongoDB cannot store it in an update "
            "(use names without a leading '$' or a '.')")


def has_dollar_name(value: object, depth: int = 0) -> bool:
    if depth > MAX_DEPTH:
        return False
    if isinstance(value, Mapping):
        return any(str(k).startswith("$") or has_dollar_name(v, depth + 1) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(has_dollar_name(v, depth + 1) for v in value)
    return False
