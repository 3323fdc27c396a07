"""Flow control for the operator: set, list and clear the limits of groups and tenants.

The limits live in ``metadata`` (``{_id: "limits"}``, :mod:`recruiter.domain.limits`); the
recruiter reads them with the pause switches in the first read of every round, so a change
is obeyed from the next round on. Listing also shows what each limit holds now: the jobs
assigned or running (counted from the locked jobs, one indexed read) and the tokens of its
rate (from the token state the rounds keep in the fairness cursor document).

Invariant: a limit names a valid group (and tenant) and is checked whole before anything is
written; a tenant no job has used yet is accepted with a warning (tenants appear over time).
Setting a limit changes the fields given and keeps the others (``replace``: the whole limit),
and says what it replaced; listing shows every stored limit, malformed ones with why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from recruiter.admin.switches import unused
from recruiter.domain.control import escape
from recruiter.domain.limits import Key, Limit, Limits, count_locked, describe_key
from recruiter.domain.naming import name_problem
from recruiter.domain.pacing import Rate, state_from
from recruiter.domain.stored_limits import StoredLimit, StoredLimits, limit_path, read_limits
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
    path: str = ""  # where it is stored

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
    limits: tuple[LimitView, ...]  # the well-formed limits, applied
    # What is wrong in the stored document, one line each: malformed limits (held by the
    # recruiter, at the last good limit it read or whole), sections or fields it cannot read.
    problems: tuple[str, ...] = ()
    malformed: tuple[StoredLimit, ...] = ()  # the malformed stored limits, each with why


@dataclass(frozen=True)
class LimitSet:
    view: LimitView
    unknown_tenant: bool = False  # no job has used the tenant yet: a warning, not an error
    replaced: Limit | None = None  # the well-formed limit it replaced
    replaced_malformed: str | None = None  # or why the stored one it replaced was malformed
    dropped: tuple[str, ...] = ()  # fields of the old limit the new one no longer has


def make_limit(rate: str | None = None, burst: int | None = None, max_running: int | None = None,
               *, old: Limit | None = None) -> Limit:
    """A limit from the operator's values, the fields not given taken from ``old`` (None: replace
    the whole limit); ValueError, one line, for a bad one."""
    if old is not None:
        if rate is None and old.rate is not None:
            rate = old.rate.text
            burst = old.rate.burst if burst is None else burst
        elif rate is not None and burst is None and old.rate is not None:
            burst = old.rate.burst
        max_running = old.max_running if max_running is None else max_running
    if burst and rate is None:
        raise ValueError("--burst needs --rate")
    return Limit(max_running, Rate.parse(rate, burst or 0) if rate is not None else None)


def dropped_fields(old: Limit | None, new: Limit) -> tuple[str, ...]:
    """The fields ``old`` had that ``new`` does not (a burst counts when it falls to 0)."""
    if old is None:
        return ()
    gone = []
    if old.max_running is not None and new.max_running is None:
        gone.append(f"max_running {old.max_running}")
    if old.rate is not None and new.rate is None:
        gone.append(f"rate {old.rate}")
    elif old.rate is not None and new.rate is not None and old.rate.burst and not new.rate.burst:
        gone.append(f"burst {old.rate.burst}")
    return tuple(gone)


def stored_limit(db: SyncDb, group: str, tenant: str | None) -> StoredLimit | None:
    """The limit stored for ``group`` (or ``tenant`` within it) as read, well-formed or not."""
    stored = read_limits(read_limits_document(SyncCollections.of(db).metadata))
    return next((e for e in stored.entries if e.key == (group, tenant) and e.path == limit_path(group, tenant)), None)


def _check(group: str, tenant: str | None) -> None:
    for kind, name in (("group", group), ("tenant", tenant)):
        if name is not None and (problem := name_problem(kind, name)):
            raise ValueError(problem)


def set_(db: SyncDb, group: str, tenant: str | None, limit: Limit, now: datetime) -> LimitSet:
    """Set the limit of ``group`` (or of ``tenant`` within it), replacing any it had; says what
    it replaced (:class:`LimitSet`)."""
    _check(group, tenant)
    never = bool(tenant is not None and unused(db, "tenant", [tenant]))
    metadata = SyncCollections.of(db).metadata
    stored = read_limits_document(metadata)
    before = stored_limit(db, group, tenant)
    if _shape_broken(stored, group, tenant):
        # A path through something that is not a document (a hand edit): MongoDB would refuse the
        # update, so the document is written whole, with the limits that were valid and this one.
        limits = read_limits(stored).limits
        declared: dict[str | tuple[str, str], Limit] = {_declared(k): v for k, v in limits.by_key.items()}
        declare(db, {**declared, _declared((group, tenant)): limit})
    else:
        set_limit(metadata, group, tenant, limit)
    view = next(v for v in listing(db, now).limits if v.key == (group, tenant))
    old = before.limit if before is not None else None
    return LimitSet(view, never, old, before.problem if before is not None else None, dropped_fields(old, limit))


def set_fields(db: SyncDb, group: str, tenant: str | None, *, rate: str | None, burst: int | None,
               max_running: int | None, replace: bool, now: datetime) -> LimitSet:
    """Set the fields given of the limit of ``group`` (or ``tenant`` within it), keeping the others
    unless ``replace`` (a malformed stored limit is replaced whole); ValueError, one line, for a bad one."""
    _check(group, tenant)
    if rate is None and max_running is None and not (burst is not None and not replace):
        raise ValueError("give a rate, max_running, or both")
    before = None if replace else stored_limit(db, group, tenant)
    limit = make_limit(rate, burst, max_running, old=before.limit if before is not None else None)
    return set_(db, group, tenant, limit, now)


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
    return read_limits(read_limits_document(SyncCollections.of(db).metadata)).limits


def listing(db: SyncDb, now: datetime) -> LimitListing:
    """Every limit, with what it holds now; malformed stored limits with why."""
    c = SyncCollections.of(db)
    stored: StoredLimits = read_limits(read_limits_document(c.metadata))
    limits = stored.limits
    paths = {e.key: e.path for e in stored.entries if e.limit is not None}
    groups = limits.capped_groups()
    running = count_locked(read_running_in_sync(c, groups), limits)
    state, _ = state_from(read_cursor_document(c.metadata), now)
    views = []
    for key, limit in sorted(limits.by_key.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        tokens = None if limit.rate is None else state.bucket(key, limit.rate, now).tokens
        views.append(LimitView(key[0], key[1], limit, running.get(key, 0), tokens, paths.get(key, "")))
    return LimitListing(tuple(views), tuple(stored.lines()),
                        tuple(e for e in stored.entries if e.problem is not None))
