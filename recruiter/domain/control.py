"""The fairness cursor and the pause switches, both kept in ``metadata``.

``{_id: "fairness"}`` holds the selection cursor (:class:`recruiter.domain.selection.Cursor`)
so a new leader goes on where the last one stopped::

    {_id: "fairness", last_group: "billing",
     last_tenant: {"billing": "acme"},            # per group, the tenant served last
     counts: {"billing": {"acme": 2}}}            # per group and tenant, the position in the scheme

Group and tenant names become field names there, escaped (``%`` ``.`` ``$``) so
any name is a safe path; the default tenant is ``%``. The recruiter reads it
when it becomes leader and writes only what changed, with one update per round
at most (none while one tenant of one priority is served).

``{_id: "paused", groups: [...], tenants: [...]}`` holds the pause switches,
written by ``recruiter groups|tenants pause|resume`` and read by the recruiter
with the first candidate read of every round.

A name is "used" (:func:`unused`) when a worker's ``work_on`` names it (groups
only), or a job in ``scheduled`` or ``archived`` carries it; pausing a name that
is not used is most likely a typo, so the CLI asks for ``--force``. Each check is
one ``find_one`` served by an index (``candidates`` on ``scheduled``,
``by_group`` on ``archived``); the roster is small and read without one.

This module is pure: the reads and writes of both documents, and the check of
use, are in :mod:`recruiter.store.metadata`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypedDict, cast

from recruiter.domain.documents import WarnOnce, cursor_problem, names_problem
from recruiter.domain.selection import DEFAULT_TENANT, Cursor

CURSOR_ID = "fairness"
PAUSED_ID = "paused"
KINDS = {"group": "groups", "tenant": "tenants"}



@dataclass(frozen=True)
class Paused:
    """The pause switches as read: groups and tenants whose jobs are not handed out."""

    groups: frozenset[str] = frozenset()
    tenants: frozenset[str] = frozenset()


NOT_PAUSED = Paused()


class CursorDoc(TypedDict, total=False):
    """The fairness cursor document, once :func:`recruiter.domain.documents.cursor_problem` passed it."""

    last_group: str | None
    last_tenant: dict[str, str]
    counts: dict[str, dict[str, int]]


class Warns(Protocol):
    """Where a malformed switches document is reported (a structlog logger)."""

    def warning(self, event: str, **fields: object) -> object: ...


_ESCAPES = [("%", "%25"), (".", "%2E"), ("$", "%24")]


def escape(name: str) -> str:
    if name == DEFAULT_TENANT:
        return "%"
    for raw, escaped in _ESCAPES:
        name = name.replace(raw, escaped)
    return name


def unescape(key: str) -> str:
    if key == "%":
        return DEFAULT_TENANT
    for raw, escaped in reversed(_ESCAPES):
        key = key.replace(escaped, raw)
    return key


def read_cursor(doc: object) -> tuple[Cursor, str | None]:
    """The cursor stored in ``doc``, and None; or, for a malformed document, an empty
    cursor and what is wrong (the recruiter then replaces the stored document whole)."""
    problem = cursor_problem(doc)
    if problem is not None:
        return Cursor(), problem
    return cursor_from_document(cast(CursorDoc | None, doc)), None


def cursor_document(cursor: Cursor) -> dict[str, object]:
    """The whole cursor document for ``cursor`` (to replace a malformed one)."""
    counts: dict[str, dict[str, int]] = {}
    for (group, tenant), n in cursor.counts.items():
        counts.setdefault(escape(group), {})[escape(tenant)] = n
    return {"_id": CURSOR_ID, "last_group": cursor.last_group,
            "last_tenant": {escape(g): t for g, t in cursor.last_tenant.items()}, "counts": counts}


def cursor_from_document(doc: CursorDoc | None) -> Cursor:
    """The cursor of a well-formed document (:func:`read_cursor` checks it first)."""
    if not doc:
        return Cursor()
    return Cursor(
        doc.get("last_group"),
        {unescape(g): t for g, t in (doc.get("last_tenant") or {}).items()},
        {(unescape(g), unescape(t)): n for g, tenants in (doc.get("counts") or {}).items()
         for t, n in tenants.items() if n},
    )


def cursor_changes(old: Cursor, new: Cursor) -> dict[str, object] | None:
    """The update that turns the stored ``old`` cursor into ``new``; None if equal.

    Only changed paths are written, so the update is as small as the round."""
    sets: dict[str, object] = {}
    unsets: dict[str, str] = {}
    if new.last_group != old.last_group:
        sets["last_group"] = new.last_group
    for group, tenant in new.last_tenant.items():
        if old.last_tenant.get(group) != tenant:
            sets[f"last_tenant.{escape(group)}"] = tenant
    for key in old.counts.keys() | new.counts.keys():
        path = f"counts.{escape(key[0])}.{escape(key[1])}"
        if key not in new.counts:
            unsets[path] = ""
        elif old.counts.get(key) != new.counts[key]:
            sets[path] = new.counts[key]
    update: dict[str, object] = {}
    if sets:
        update["$set"] = sets
    if unsets:
        update["$unset"] = unsets
    return update or None


def paused_from_document(doc: object) -> Paused:
    """The switches in ``doc``; a malformed list is read as empty (see :func:`read_switches`)."""
    return read_switches(doc, None, None)


def read_switches(doc: object, warned: WarnOnce | None, log: Warns | None) -> Paused:
    """The switches in ``doc``. A list that is not a list of names is read as empty, with
    one warning (through ``log``, once per problem by ``warned``)."""
    if not isinstance(doc, dict):
        return Paused()
    lists: dict[str, frozenset[str]] = {}
    for kind in KINDS.values():
        problem = names_problem(doc.get(kind))
        if problem is None:
            lists[kind] = frozenset(doc.get(kind) or ())
            continue
        lists[kind] = frozenset()
        if log is not None and (warned is None or warned.first(PAUSED_ID, f"{kind}{problem}")):
            log.warning("paused.malformed", reason=f"{kind}{problem}" if problem.startswith(".") else
                        f"{kind}: {problem}", detail=f"no {kind} are paused until it is fixed")
    return Paused(lists["groups"], lists["tenants"])
