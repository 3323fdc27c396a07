"""The limits document as stored (``{_id: "limits"}``), read as untrusted input; pure, no I/O.

Set by the CLI and the API, but also by hand (mongosh, a JSON import). Every stored limit is
read into a :class:`StoredLimit` with its state: *applied*, or *malformed* and why. Limits keep
their word when a hand edit is wrong (fail closed):

- a number is read as an integer when it is one in any BSON numeric type (int, Int64, a double
  such as ``2.0`` as a JSON import writes it, Decimal128 ``2``);
- a limit with an unknown field (``rates``, ``brust``), a name not written as the recruiter
  writes it (``a.b`` beside ``a%2Eb``), or a name stored twice, is malformed, like a wrong value;
- a malformed limit holds its group (or tenant) at the last good limit the reader saw for it
  (:func:`in_force`); if it saw none, nothing of that group (or tenant) starts until it is fixed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

from bson.decimal128 import Decimal128

from recruiter.domain.control import escape, unescape
from recruiter.domain.limits import Key, Limit, Limits, describe_key
from recruiter.domain.naming import name_problem
from recruiter.domain.pacing import Rate

FIELDS = ("max_running", "rate", "burst")
SECTIONS = ("groups", "tenants")


def limit_path(group: str, tenant: str | None) -> str:
    """Where a limit is kept in the ``limits`` document."""
    if tenant is None:
        return f"groups.{escape(group)}"
    return f"tenants.{escape(group)}.{escape(tenant)}"


def as_integer(value: object) -> int | None:
    """``value`` as an integer if it is one in any BSON numeric type; None otherwise (a bool is not)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else None
    if isinstance(value, Decimal128):
        value = value.to_decimal()
    if isinstance(value, Decimal):
        return int(value) if value.is_finite() and value == value.to_integral_value() else None
    return None


def limit_from(doc: object) -> tuple[Limit | None, str | None]:
    """A stored limit, or None and what is wrong with it (untrusted: mongosh edits, other versions)."""
    if not isinstance(doc, Mapping):
        return None, "expected an embedded document"
    unknown = [str(k) for k in doc if k not in FIELDS]
    if unknown:
        return None, (f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                      f"(a limit has {', '.join(FIELDS)})")
    raw_max, rate, raw_burst = doc.get("max_running"), doc.get("rate"), doc.get("burst", 0)
    max_running = None if raw_max is None else as_integer(raw_max)
    if raw_max is not None and max_running is None:
        return None, f"max_running: expected an integer, got {_shown(raw_max)}"
    if rate is not None and not isinstance(rate, str):
        return None, f"rate: expected a text such as 5/s, got {_shown(rate)}"
    burst = as_integer(raw_burst)
    if burst is None:
        return None, f"burst: expected an integer, got {_shown(raw_burst)}"
    if burst and rate is None:
        return None, "burst: needs a rate"
    try:
        return Limit(max_running, Rate.parse(rate, burst) if rate is not None else None), None
    except ValueError as exc:
        return None, str(exc)


def _shown(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


State = Literal["applied", "malformed"]


@dataclass(frozen=True)
class StoredLimit:
    """One stored limit: where (``path``), the group and tenant it names, its state."""

    path: str
    key: Key
    limit: Limit | None  # None: malformed
    problem: str | None = None

    @property
    def state(self) -> State:
        return "applied" if self.problem is None else "malformed"

    def line(self) -> str:
        """The problem, in one line (for a malformed limit)."""
        return f"{self.path} ({describe_key(self.key)}): {self.problem}"


@dataclass(frozen=True)
class StoredLimits:
    """The limits document as read: every stored limit with its state, and what else is wrong."""

    entries: tuple[StoredLimit, ...] = ()
    problems: tuple[str, ...] = ()  # in the document itself (a section that is not a document, ...)
    # Sections (``groups``, ``tenants.<group>`` as a tenant key prefix) that could not be read:
    # every limit last seen there is held at what it was.
    unreadable: frozenset[str] = frozenset()

    @property
    def limits(self) -> Limits:
        """The well-formed limits, on their own (no fallback: see :func:`in_force`)."""
        malformed = self.malformed()
        return Limits({e.key: e.limit for e in self.entries if e.limit is not None and e.key not in malformed})

    def malformed(self) -> dict[Key, str]:
        """The keys whose stored limit is malformed, and why (a key stored twice is malformed whole)."""
        out: dict[Key, str] = {}
        for e in self.entries:
            if e.problem is not None:
                out.setdefault(e.key, e.problem)
        return out

    def lines(self) -> list[str]:
        """Every problem, one line each."""
        return [*self.problems, *(e.line() for e in self.entries if e.problem is not None)]


def read_limits(doc: object) -> StoredLimits:
    """Every limit in the stored document, each applied or malformed and why."""
    if doc is None:
        return StoredLimits()
    if not isinstance(doc, Mapping):
        return StoredLimits(problems=("document: expected an embedded document",), unreadable=frozenset(SECTIONS))
    problems: list[str] = []
    unreadable: set[str] = set()
    extra = [str(k) for k in doc if k not in (*SECTIONS, "_id")]
    if extra:
        problems.append(f"unknown field{'s' if len(extra) > 1 else ''} {', '.join(map(repr, extra))} "
                        "in the limits document (limits go in groups and tenants): not applied")
    entries = list(_entries(doc, problems, unreadable))
    return StoredLimits(tuple(_shadowed(entries)), tuple(problems), frozenset(unreadable))


def _entries(doc: Mapping[str, object], problems: list[str], unreadable: set[str]) -> Iterator[StoredLimit]:
    groups, tenants = doc.get("groups") or {}, doc.get("tenants") or {}
    if not isinstance(groups, Mapping):
        problems.append("groups: expected an embedded document; every group limit is held as last read")
        unreadable.add("groups")
        groups = {}
    if not isinstance(tenants, Mapping):
        problems.append("tenants: expected an embedded document; every tenant limit is held as last read")
        unreadable.add("tenants")
        tenants = {}
    for g, value in groups.items():
        group = unescape(str(g))
        yield _entry(f"groups.{g}", (group, None), value, _name_issue(str(g), group, "group"))
    for g, by_tenant in tenants.items():
        group = unescape(str(g))
        if not isinstance(by_tenant, Mapping):
            problems.append(f"tenants.{g}: expected an embedded document; the tenant limits of group "
                            f"{group} are held as last read")
            unreadable.add(f"tenants.{group}")
            continue
        for t, value in by_tenant.items():
            tenant = unescape(str(t))
            issue = _name_issue(str(g), group, "group") or _name_issue(str(t), tenant, "tenant", default_ok=True)
            yield _entry(f"tenants.{g}.{t}", (group, tenant), value, issue)


def _name_issue(stored: str, name: str, kind: str, *, default_ok: bool = False) -> str | None:
    if escape(name) != stored:
        return f"the {kind} {name!r} is written {escape(name)!r}, not {stored!r}: rename the field"
    if default_ok and name == "":
        return None
    return name_problem(kind, name)


def _entry(path: str, key: Key, value: object, name_issue: str | None) -> StoredLimit:
    limit, problem = limit_from(value)
    if name_issue is not None:
        return StoredLimit(path, key, None, name_issue)
    return StoredLimit(path, key, limit, problem)


def _shadowed(entries: list[StoredLimit]) -> Iterator[StoredLimit]:
    """Entries naming the same group (or tenant) twice are each malformed: which one holds?"""
    paths: dict[Key, list[str]] = {}
    for e in entries:
        paths.setdefault(e.key, []).append(e.path)
    for e in entries:
        twice = paths[e.key]
        if len(twice) > 1:
            yield StoredLimit(e.path, e.key, None, f"{describe_key(e.key)} is stored {len(twice)} times "
                              f"({', '.join(twice)}): each shadows the other; keep one")
        else:
            yield e


@dataclass
class LastGood:
    """What a reader (the leading recruiter) last saw well-formed of each limit: what a malformed
    one is held at."""

    limits: dict[Key, Limit] = field(default_factory=dict)

    def in_force(self, stored: StoredLimits) -> Limits:
        """The limits to obey: the well-formed ones; a malformed one at its last good limit, or
        held whole (nothing starts) if none was seen; those of a section that could not be read
        at what they were."""
        malformed = stored.malformed()
        good = dict(stored.limits.by_key)
        kept = {k: v for k, v in self.limits.items() if _unreadable(k, stored.unreadable)}
        held: set[Key] = set()
        for key in malformed:
            if key in self.limits:
                kept[key] = self.limits[key]
            else:
                held.add(key)
        self.limits = {**kept, **good}
        return Limits({**kept, **good}, frozenset(held))


def _unreadable(key: Key, sections: frozenset[str]) -> bool:
    group, tenant = key
    return ("groups" in sections) if tenant is None else ("tenants" in sections or f"tenants.{group}" in sections)


def in_force(stored: StoredLimits, last_good: Mapping[Key, Limit] | None = None) -> Limits:
    """The limits a reader with no memory (or ``last_good``) obeys: see :meth:`LastGood.in_force`."""
    return LastGood(dict(last_good or {})).in_force(stored)
