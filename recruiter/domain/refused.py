"""A job workers gave back unrun, as every view tells it: :func:`refused_of`.

A worker that cannot import a job's classes, or may not (``--allow-module``),
gives the job back (:mod:`recruiter.domain.refusals`) and the round appends the
refusal to the job's ``refusals``. Without a reading of them the job looks like
an ordinary retry (``retrying``, attempts 0, no execution). :func:`refused_of`
reads them into one :class:`Refused`: the workers that refused it, why (the
newest refusal's reason and kind), until when it is kept from them
(``refusals_until``), and what to do (the refusing worker's ``fix``, else one
made from the kind). The job list, ``jobs show``, ``jobs explain``, the
dashboard's job page and Failures, and ``rec.admin`` all show this one value.

Invariant: pure and total. ``refusals`` is untrusted (anyone may write to
``scheduled``): a field of the wrong type is shown as malformed, with what was
found, every text is cut to its bound, at most :data:`MAX_KEPT` entries are
read, and nothing here raises on data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from recruiter.domain.naming import UnknownClass, split_qualified
from recruiter.domain.refusals import (
    CANNOT_IMPORT,
    KINDS,
    MAX_CLASS_CHARS,
    MAX_FIX_CHARS,
    MAX_KEPT,
    MAX_REASON_CHARS,
    NOT_ALLOWED,
    fix_for,
)

MAX_WORKER_CHARS = 100
SHOWN_WORKERS = 5  # workers named in a line; the rest are counted
MALFORMED = "malformed"
_LABELS = {NOT_ALLOWED: "module not allowed", CANNOT_IMPORT: "cannot import", MALFORMED: "malformed refusal"}


@dataclass(frozen=True)
class Refused:
    """What the refusals of a job say (see the module doc)."""

    workers: tuple[str, ...]  # the workers that refused it, newest first, each once
    count: int  # refusals kept (the newest MAX_KEPT)
    reason: str  # the newest refusal's reason (or what is malformed about it)
    kind: str | None  # NOT_ALLOWED, CANNOT_IMPORT, MALFORMED, or None: not said
    name: str | None  # the class refused, when said
    fix: str  # what the operator can do
    at: datetime | None  # the newest refusal
    until: datetime | None  # kept from the workers that refused it until then
    current: bool  # the job waits because of it: given back and not run since

    @property
    def label(self) -> str:
        """``module not allowed``, ``cannot import``, ``malformed refusal`` or ``refused``."""
        return _LABELS.get(self.kind or "", "refused")

    def by(self) -> str:
        """``worker a`` / ``workers a, b and 3 more``."""
        shown = list(self.workers[:SHOWN_WORKERS])
        more = len(self.workers) - len(shown)
        names = ", ".join(shown) + (f" and {more} more" if more else "")
        return f"worker{'s' if len(self.workers) > 1 else ''} {names or '?'}"

    def short(self) -> str:
        """For a list: ``refused by worker w: module not allowed (jobs:Send)``."""
        return f"refused by {self.by()}: {self.label}" + (f" ({self.name[:80]})" if self.name else "")

    def describe(self) -> str:
        """The whole story in one line: by whom, why, until when, what to do."""
        until = ""
        if self.until is not None:
            until = (f"; kept from them until {_time(self.until)} (a refusal after that archives it unrunnable)"
                     if self.current else f"; kept from them until {_time(self.until)}")
        return f"refused by {self.by()}: {self.reason}{until}; to fix: {self.fix}"


def _time(value: datetime) -> str:
    return f"{value.strftime('%Y-%m-%d %H:%M:%S')} UTC"


def _text(value: object, limit: int) -> str | None:
    return value[:limit] if isinstance(value, str) and value else None


def _type(value: object) -> str:
    return type(value).__name__


def _kind(entry: Mapping[str, object], reason: str) -> str | None:
    kind = entry.get("kind")
    if kind in KINDS:
        return str(kind)
    if reason.startswith("class not allowed"):  # a worker of a version that stored no kind
        return NOT_ALLOWED
    return CANNOT_IMPORT if reason.startswith("cannot import") else None


def _module(name: str | None) -> str | None:
    try:
        return split_qualified(name)[0] if name else None
    except UnknownClass:
        return None


def _newest(entry: object) -> tuple[str, str | None, str | None, str | None, datetime | None]:
    """``(reason, kind, class, fix, at)`` of the newest refusal; a malformed one says what it is."""
    if not isinstance(entry, Mapping):
        return f"malformed refusal: expected a document, found {_type(entry)}", MALFORMED, None, None, None
    raw = entry.get("reason")
    at = entry.get("at")
    at = at if isinstance(at, datetime) else None
    if not isinstance(raw, str):
        return f"malformed refusal: reason is {_type(raw)}, not text", MALFORMED, None, None, at
    reason = raw[:MAX_REASON_CHARS] or "(no reason given)"
    return (reason, _kind(entry, reason), _text(entry.get("class"), MAX_CLASS_CHARS),
            _text(entry.get("fix"), MAX_FIX_CHARS), at)


def _workers(entries: Sequence[object]) -> tuple[str, ...]:
    names: dict[str, None] = {}
    for entry in reversed(entries):
        worker = entry.get("worker") if isinstance(entry, Mapping) else None
        names.setdefault(worker[:MAX_WORKER_CHARS] if isinstance(worker, str) else "?", None)
    return tuple(names)


def _current(doc: Mapping[str, object], at: datetime | None, archived: bool) -> bool:
    """Given back and waiting since: unlocked, retrying, no execution ended after the refusal."""
    if archived or doc.get("locked") is not False or doc.get("status") != "retrying":
        return False
    last = doc.get("last_execution")
    ended = last.get("ended_at") if isinstance(last, Mapping) else None
    return not (isinstance(ended, datetime) and (at is None or ended > at))


def refused_of(doc: Mapping[str, object], archived: bool = False) -> Refused | None:
    """The refusals of job document ``doc`` (``archived``: read from ``archived``); None if none."""
    stored = doc.get("refusals")
    if stored is None or (isinstance(stored, list) and not stored):
        return None
    until = doc.get("refusals_until")
    until = until if isinstance(until, datetime) else None
    if not isinstance(stored, list):
        return Refused((), 0, f"malformed refusals: expected a list, found {_type(stored)}", MALFORMED, None,
                       fix_for(None, None), None, until, False)
    entries = stored[-MAX_KEPT:]
    reason, kind, name, fix, at = _newest(entries[-1])
    if fix is None:
        module = _module(name)
        fix = fix_for(kind, module) if kind != MALFORMED else fix_for(None, None)
    return Refused(_workers(entries), len(entries), reason, kind, name, fix, at, until,
                   _current(doc, at, archived))


def refused_json(refused: Refused | None) -> dict[str, object] | None:
    """A :class:`Refused` as JSON (``jobs show --json``, ``jobs list --json``)."""
    if refused is None:
        return None
    return {"workers": list(refused.workers), "count": refused.count, "kind": refused.kind,
            "class": refused.name, "reason": refused.reason, "fix": refused.fix,
            "at": refused.at.isoformat() if refused.at else None,
            "until": refused.until.isoformat() if refused.until else None, "current": refused.current}
