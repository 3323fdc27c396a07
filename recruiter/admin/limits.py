"""Flow control for the operator: set, list and clear the limits of groups and tenants.

The limits live in ``metadata`` (``{_id: "limits"}``, :mod:`recruiter.domain.limits`); the
recruiter reads them with the pause switches in the first read of every round, so a change
is obeyed from the next round on. Listing also shows what each limit holds now: the jobs
assigned or running (counted from the locked jobs, one indexed read) and the tokens of its
rate (from the token state the rounds keep in the fairness cursor document).

Invariant: a limit names a valid group (and tenant) and is checked whole before anything is
written; a tenant no job has used yet is accepted with a warning (tenants appear over time).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from recruiter.admin.switches import unused
from recruiter.domain.control import escape
from recruiter.domain.limits import (
    Key,
    Limit,
    Limits,
    Rate,
    count_locked,
    describe_key,
    limit_path,
    read_limits,
    state_from,
)
from recruiter.domain.naming import name_problem
from recruiter.store import (
    SyncCollections,
    SyncDb,
    clear_limit,
    read_cursor_document,
    read_limits_document,
    read_running_in_sync,
    replace_limits,
    set_limit,
)


@dataclass(frozen=True)
class LimitView:
    """One limit and what it holds now: ``running`` (assigned or running), ``tokens`` (None: no rate)."""

    group: str
    tenant: str | None
    limit: Limit
    running: int
    tokens: float | None

    @property
    def key(self) -> Key:
        return (self.group, self.tenant)

    @property
    def held(self) -> bool:
        """Whether the limit allows no more job right now."""
        capped = self.limit.max_running is not None and self.running >= self.limit.max_running
        return capped or (self.tokens is not None and self.tokens < 1)

    def describe(self) -> str:
        return f"{describe_key(self.key)}: {self.limit}"


@dataclass(frozen=True)
class LimitListing:
    limits: tuple[LimitView, ...]
    problems: tuple[str, ...] = ()  # stored limits that are malformed, left out (not applied)


@dataclass(frozen=True)
class LimitSet:
    view: LimitView
    unknown_tenant: bool = False  # no job has used the tenant yet: a warning, not an error


def make_limit(rate: str | None = None, burst: int = 0, max_running: int | None = None) -> Limit:
    """A limit from the operator's values; ValueError, one line, for a bad one."""
    if burst and rate is None:
        raise ValueError("--burst needs --rate")
    return Limit(max_running, Rate.parse(rate, burst) if rate is not None else None)


def _check(group: str, tenant: str | None) -> None:
    for kind, name in (("group", group), ("tenant", tenant)):
        if name is not None and (problem := name_problem(kind, name)):
            raise ValueError(problem)


def set_(db: SyncDb, group: str, tenant: str | None, limit: Limit, now: datetime) -> LimitSet:
    """Set the limit of ``group`` (or of ``tenant`` within it), replacing any it had."""
    _check(group, tenant)
    never = bool(tenant is not None and unused(db, "tenant", [tenant]))
    metadata = SyncCollections.of(db).metadata
    stored = read_limits_document(metadata)
    if _shape_broken(stored, group, tenant):
        # A path through something that is not a document (a hand edit): MongoDB would refuse the
        # update, so the document is written whole, with the limits that were valid and this one.
        limits, _ = read_limits(stored)
        declared: dict[str | tuple[str, str], Limit] = {_declared(k): v for k, v in limits.by_key.items()}
        declare(db, {**declared, _declared((group, tenant)): limit})
    else:
        set_limit(metadata, group, tenant, limit)
    view = next(v for v in listing(db, now).limits if v.key == (group, tenant))
    return LimitSet(view, never)


def _declared(key: Key) -> str | tuple[str, str]:
    group, tenant = key
    return group if tenant is None else (group, tenant)


def _shape_broken(doc: object, group: str, tenant: str | None) -> bool:
    """Whether setting (group, tenant) in ``doc`` would go through a field that is not a document."""
    if doc is None:
        return False
    if not isinstance(doc, Mapping):
        return True
    section = doc.get("groups" if tenant is None else "tenants")
    if section is None:
        return False
    if not isinstance(section, Mapping):
        return True
    if tenant is None:
        return False
    by_tenant = section.get(escape(group))
    return by_tenant is not None and not isinstance(by_tenant, Mapping)


def clear(db: SyncDb, group: str, tenant: str | None) -> bool:
    """Remove one limit; whether there was one (nothing is written otherwise)."""
    _check(group, tenant)
    return clear_limit(SyncCollections.of(db).metadata, group, tenant)


def declare(db: SyncDb, limits: Mapping[str | tuple[str, str], Limit]) -> Limits:
    """Set exactly these limits (keys: a group, or (group, tenant)), clearing any other: limits
    kept in code, versioned with a deployment. Checked whole before anything is written."""
    doc: dict[str, dict[str, object]] = {"groups": {}, "tenants": {}}
    for key, limit in limits.items():
        group, tenant = (key, None) if isinstance(key, str) else key
        _check(group, tenant)
        if not isinstance(limit, Limit):
            raise ValueError(f"the limit of {describe_key((group, tenant))} must be a recruiter.Limit")
        section, _, rest = limit_path(group, tenant).partition(".")
        holder = doc[section]
        if tenant is not None:
            g, _, t = rest.partition(".")
            holder = holder.setdefault(g, {})  # type: ignore[assignment]
            rest = t
        holder[rest] = limit.document()
    replace_limits(SyncCollections.of(db).metadata, doc)
    return read_limits(read_limits_document(SyncCollections.of(db).metadata))[0]


def listing(db: SyncDb, now: datetime) -> LimitListing:
    """Every limit, with what it holds now; malformed stored limits as problems."""
    c = SyncCollections.of(db)
    limits, problems = read_limits(read_limits_document(c.metadata))
    groups = limits.capped_groups()
    running = count_locked(read_running_in_sync(c, groups), limits)
    state, _ = state_from(read_cursor_document(c.metadata), now)
    views = []
    for key, limit in sorted(limits.by_key.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        tokens = None if limit.rate is None else state.bucket(key, limit.rate, now).tokens
        views.append(LimitView(key[0], key[1], limit, running.get(key, 0), tokens))
    return LimitListing(tuple(views), tuple(problems))
