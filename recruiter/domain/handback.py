"""What a job hands back to its worker, made safe to store: results, messages, texts (pure).

Everything a job returns, raises, logs or says of its progress is untrusted input
to the worker. Two rules, applied once, where those values enter the worker:

- **A result is stored exactly, or not at all.** :func:`checked_result` keeps a
  value BSON can hold, as a reader will get it back (a BSON round trip, so no
  object of the job's reaches the outcome write), up to a size limit. Anything
  else is dropped with a :class:`Dropped` (reason and size), which the archived
  job shows as ``result_dropped`` and ``wait()`` raises as
  :class:`~recruiter.ResultDropped`: a set, an object, non-string keys, names
  MongoDB refuses inside an update (``$``-prefixed or dotted), a value that
  refers to itself or nests deeper than ``MAX_RESULT_DEPTH``, a lone surrogate
  (``'\\ud800'``, which UTF-8 cannot encode), or more bytes than the limit.
- **Text meant for people is made storable.** Error messages, traces, class
  names, log lines and progress messages keep every character UTF-8 can encode;
  a lone surrogate is written as its escape (``\\ud800``), so nothing of meaning
  is lost and the write cannot fail. :func:`storable_text` does it.

:func:`describe` turns any exception into ``(lineage, message, trace)`` without
ever raising, whatever its ``__str__``, ``__repr__``, class or traceback do.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from dataclasses import dataclass

import bson

from recruiter.domain.naming import exception_lineage

KiB = 1024
MiB = 1024 * KiB
# The default limit on a result's BSON size. The result rides in the outcome write to the
# worker's roster entry and then in the archived document, next to the job and its history:
# both must stay under MongoDB's 16 MiB document limit, so the enqueue check keeps this much
# room in every job (recruiter.domain.job.HISTORY_ALLOWANCE_BYTES). Each round reads every
# pending outcome, so results are kept small enough for a round to read hundreds at once.
DEFAULT_MAX_RESULT_BYTES = 1 * MiB
# The highest limit a worker accepts (worker start --max-result-size): above it a result
# belongs in object storage or GridFS, with a reference to it as the result.
MAX_RESULT_BYTES_CEILING = 8 * MiB
# MongoDB refuses documents nested deeper than 100 levels; a result sits two levels down
# in a roster entry (``outcome.result``), so it may nest this deep.
MAX_RESULT_DEPTH = 90
# Each value BSON stores takes at least this many bytes (type, a one-character name and its
# end, no payload): a walk that met more values than the limit allows stops early.
_MIN_ELEMENT_BYTES = 3
MAX_REASON_CHARS = 500
MAX_MESSAGE_CHARS = 2_000
MAX_TRACE_CHARS = 8_000


@dataclass(frozen=True)
class Dropped:
    """Why a result was not stored, and its size in BSON bytes when it could be measured."""

    reason: str
    size_bytes: int | None = None

    def document(self) -> dict[str, object]:
        """``result_dropped`` as stored: ``{reason, size_bytes}`` (size null when unknown)."""
        return {"reason": self.reason, "size_bytes": self.size_bytes}


@dataclass(frozen=True)
class CheckedResult:
    """A result already checked where the attempt ran (a child process): the value as stored,
    or why it was dropped. Plain data, so it crosses a pipe whatever the job returned."""

    value: object
    dropped: Dropped | None
    steps: list[dict[str, object]] | None = None  # the workflow steps the attempt added (domain.adding)


def storable_text(text: str) -> str:
    """``text`` as a plain ``str`` that UTF-8 can encode: lone surrogates escaped (``\\ud800``)."""
    text = str.__str__(text)  # a plain str, whatever a subclass overrides
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _walk_problem(value: object, max_elements: int) -> str | None:
    """What makes ``value`` unfit for storage that encoding alone would not say clearly (cycles,
    depth, names MongoDB refuses in updates), or ``too many values`` past ``max_elements``.
    Iterative: a deep value cannot exhaust the stack here."""
    stack: list[tuple[object, int, tuple[int, ...]]] = [(value, 1, ())]
    seen = 0
    while stack:
        item, depth, path = stack.pop()
        seen += 1
        if seen > max_elements:
            return "too many values"
        if not isinstance(item, Mapping | list | tuple):
            continue
        if id(item) in path:
            return "it refers to itself"
        if depth > MAX_RESULT_DEPTH:
            return f"it nests deeper than {MAX_RESULT_DEPTH} levels"
        inner = (*path, id(item))
        if isinstance(item, Mapping):
            for key in item:
                problem = _key_problem(key)
                if problem:
                    return problem
                stack.append((item[key], depth + 1, inner))
        else:
            stack.extend((v, depth + 1, inner) for v in item)
    return None


def _key_problem(key: object) -> str | None:
    if not isinstance(key, str):
        return f"a key is not a string ({type(key).__name__} {_short_repr(key)})"
    if key.startswith("$") or "." in key:
        return f"a key starts with '$' or holds a '.' ({_short_repr(key)}), which MongoDB refuses in an update"
    return None


def _short_repr(value: object) -> str:
    try:
        return storable_text(repr(value))[:60]
    except Exception:  # noqa: BLE001 - a hostile __repr__
        return "?"


def checked_result(value: object, max_bytes: int = DEFAULT_MAX_RESULT_BYTES) -> tuple[object, Dropped | None]:
    """``(value as stored, None)`` if ``value`` may be stored, else ``(None, why not)``.

    The value returned is ``value`` after a BSON round trip (tuples become lists, mappings
    dicts): what ``wait()`` will return. Never raises: whatever the job's objects do while
    they are read is a reason to drop them.
    """
    if value is None:
        return None, None
    try:
        problem = _walk_problem(value, max_bytes // _MIN_ELEMENT_BYTES)
        if problem == "too many values":
            return None, Dropped(f"the result holds more values than {max_bytes} bytes can store", None)
        if problem:
            return None, Dropped(f"the result cannot be stored: {problem}")
        encoded = bson.encode({"r": value})
    except UnicodeEncodeError:
        return None, Dropped("the result cannot be stored: a string holds a lone surrogate, which UTF-8 cannot "
                             "encode")
    except BaseException as exc:  # noqa: BLE001 - a set, an object, a huge int, a hostile mapping...
        return None, Dropped(f"the result cannot be stored: {_encoding_error(exc)}")
    if len(encoded) > max_bytes:
        return None, Dropped(f"the result is {len(encoded)} bytes of BSON, over the {max_bytes}-byte limit",
                             len(encoded))
    return bson.decode(encoded)["r"], None


def _encoding_error(exc: BaseException) -> str:
    text = safe_str(exc).removeprefix("Invalid document: ")
    return storable_text(f"{_class_label(exc)}: {text}")[:MAX_REASON_CHARS]


def safe_str(exc: BaseException) -> str:
    """``str(exc)`` as storable text; whatever ``__str__`` does (raise, return a non-string),
    a description instead."""
    try:
        text = str(exc)
        if isinstance(text, str):
            return storable_text(text)
    except BaseException:  # noqa: BLE001 - a hostile __str__ may raise anything
        pass
    return f"<{_class_label(exc)} whose str() failed>"


def _class_label(exc: BaseException) -> str:
    try:
        name = type(exc).__qualname__
        return storable_text(name) if isinstance(name, str) else "exception"
    except BaseException:  # noqa: BLE001
        return "exception"


def safe_trace(exc: BaseException) -> str:
    """The formatted traceback of ``exc``, its newest ``MAX_TRACE_CHARS``; a line saying it could
    not be formatted when formatting fails."""
    try:
        trace = "".join(traceback.format_exception(exc))
    except BaseException as inner:  # noqa: BLE001 - a hostile exception chain
        trace = f"the traceback could not be formatted ({type(inner).__name__})\n"
    return storable_text(trace[-MAX_TRACE_CHARS:])


def safe_lineage(exc: BaseException) -> tuple[str, ...]:
    """``module:Qualname`` of the class of ``exc`` and of its bases, most specific first; for a
    class whose names cannot be read (a ``__module__`` that is not a string...), the builtin
    exception classes it derives from."""
    try:
        return tuple(storable_text(name) for name in exception_lineage(type(exc)))
    except BaseException:  # noqa: BLE001 - a hostile class
        base = Exception if isinstance(exc, Exception) else BaseException
        return tuple(f"builtins:{c.__qualname__}" for c in base.__mro__ if issubclass(c, BaseException))


def describe(exc: BaseException) -> tuple[tuple[str, ...], str, str]:
    """``(lineage, message, trace)`` of ``exc``, storable and trimmed; never raises."""
    return safe_lineage(exc), safe_str(exc)[:MAX_MESSAGE_CHARS], safe_trace(exc)
