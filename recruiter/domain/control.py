"""The fairness cursor and the pause switches, both kept in ``metadata``.

``{_id: "fairness"}`` holds the selection cursor (:class:`recruiter.selection.Cursor`)
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
"""

from __future__ import annotations

from typing import Any

from bson.min_key import MinKey

from recruiter.domain.candidates import Paused
from recruiter.domain.documents import WarnOnce, cursor_problem, names_problem
from recruiter.domain.selection import DEFAULT_TENANT, Cursor

CURSOR_ID = "fairness"
PAUSED_ID = "paused"
KINDS = {"group": "groups", "tenant": "tenants"}

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


def read_cursor(doc: Any) -> tuple[Cursor, str | None]:
    """The cursor stored in ``doc``, and None; or, for a malformed document, an empty
    cursor and what is wrong (the recruiter then replaces the stored document whole)."""
    problem = cursor_problem(doc)
    if problem is not None:
        return Cursor(), problem
    return cursor_from_document(doc), None


def cursor_document(cursor: Cursor) -> dict[str, Any]:
    """The whole cursor document for ``cursor`` (to replace a malformed one)."""
    counts: dict[str, dict[str, int]] = {}
    for (group, tenant), n in cursor.counts.items():
        counts.setdefault(escape(group), {})[escape(tenant)] = n
    return {"_id": CURSOR_ID, "last_group": cursor.last_group,
            "last_tenant": {escape(g): t for g, t in cursor.last_tenant.items()}, "counts": counts}


def cursor_from_document(doc: dict[str, Any] | None) -> Cursor:
    """The cursor of a well-formed document (:func:`read_cursor` checks it first)."""
    if not doc:
        return Cursor()
    return Cursor(
        doc.get("last_group"),
        {unescape(g): t for g, t in (doc.get("last_tenant") or {}).items()},
        {(unescape(g), unescape(t)): n for g, tenants in (doc.get("counts") or {}).items()
         for t, n in tenants.items() if n},
    )


def cursor_changes(old: Cursor, new: Cursor) -> dict[str, Any] | None:
    """The update that turns the stored ``old`` cursor into ``new``; None if equal.

    Only changed paths are written, so the update is as small as the round."""
    sets: dict[str, Any] = {}
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
    update: dict[str, Any] = {}
    if sets:
        update["$set"] = sets
    if unsets:
        update["$unset"] = unsets
    return update or None


def paused_from_document(doc: Any) -> Paused:
    """The switches in ``doc``; a malformed list is read as empty (see :func:`read_switches`)."""
    return read_switches(doc, None, None)


def read_switches(doc: Any, warned: WarnOnce | None, log: Any) -> Paused:
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


def switch(metadata: Any, kind: str, names: list[str], pause: bool) -> Paused:
    """Pause or resume groups or tenants (``kind``: group | tenant); returns the switches now."""
    field = KINDS[kind]
    op = {"$addToSet": {field: {"$each": names}}} if pause else {"$pull": {field: {"$in": names}}}
    metadata.update_one({"_id": PAUSED_ID}, op, upsert=True)
    return read_paused(metadata)


def read_paused(metadata: Any) -> Paused:
    return paused_from_document(metadata.find_one({"_id": PAUSED_ID}))


def unused(db: Any, kind: str, names: list[str]) -> list[str]:
    """The ``names`` (of ``kind``: group | tenant) that no worker and no job, queued or archived, has used."""
    return [name for name in names if not _used(db, kind, name)]


def _used(db: Any, kind: str, name: str) -> bool:
    if kind == "group":
        if db.roster.find_one({"work_on": name}, {"_id": 1}) is not None:
            return True
        scheduled = {"locked": {"$in": [False, True]}, "group": name}
        archived: dict[str, Any] = {"group": name}
    else:
        # The group bound lets both indexes (group first, then tenant) serve a tenant alone.
        scheduled = {"locked": {"$in": [False, True]}, "group": {"$gte": MinKey()}, "tenant": name}
        archived = {"group": {"$gte": MinKey()}, "tenant": name}
    return (db.scheduled.find_one(scheduled, {"_id": 1}, hint="candidates") is not None
            or db.archived.find_one(archived, {"_id": 1}, hint="by_group") is not None)
