"""A large fan-in's dependencies in documents of their own: one *edge* per (dependent, upstream) (pure).

A job that waits for more than :data:`INLINE_MAX` jobs is not stored with their ids in its own
document (each release write would rewrite them, and the multikey ``dependents`` index would hold
them all: seconds per write at 10 000 on the embedded server). Its ``after`` holds counters, and
each job it waits for is an edge in the ``dependency_edges`` collection::

    edge:  {_id, dependent: D, upstream: U, policy: {failed: "skip", ...}}   # policy: only when
                                                                             # not the dependent's if_failed
    list:  {_id: D, manifest_of: D, ids: [U, ...]}   # every id it waits for, written once
    after: {ids: [D], pending: [D],     # its own id: the guard (0.2.0 never decides it)
            failed: [], if_failed, due_at, held: true,
            policy: {...},              # when every dependency has the same one, not its if_failed
            edges: 10000,               # how many it waited for
            left: 9998,                 # edges not counted yet (an upper bound: see below)
            failed_count: 1,            # how many ended otherwise than done (at least)
            severity: -1|0|1|2,         # the most severe fate so far (-1: none failed; run, skip, cancel)
            by: U, by_why: "crashed"}   # the upstream that decided it, and how it ended

An upstream's end, by whoever archives it, for each of its edges, in this order: fold its fate
into the dependent (a write conditional on ``severity`` being lower: idempotent), delete the edge,
and only if that delete deleted it, ``$inc`` the dependent's ``left`` by -1 (one write per
dependent for all the edges of a batch). The delete is what counts an edge once. The dependent is
decided when **no edge of it is left** (read by the ``edges_by_dependent`` index), checked by
whoever brings ``left`` to 0 and by the leader's sweep: ``left`` is never below the edges left
(it is decremented only after a delete), so a crash between a delete and its ``$inc`` only leaves
the decision to the sweep. The fold comes before the delete, so a crash never loses a failure.
Two upstreams ending together in two transactions each write the dependent (the ``$inc``): the
server makes one of them wait or retry, so one sees the other's delete.

The dependent's ``after.ids`` (``ctx.after``, its dependency results) are written once, as it is
decided: read from its list, which is then deleted with what is left of its edges; released, it is
stored as a 0.2.0 process would have released it.

Skew: a 0.2.0 process reads ``ids: [D], pending: [D]``: a job waiting for itself, which is queued,
so it never releases nor cancels it (:mod:`recruiter.domain.dependency_policy`'s guard).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bson import ObjectId

from recruiter.domain.dependency_policy import FATES, OUTCOMES, Policy, outcome_of

# Most dependencies stored inline (``after.ids``); a job that waits for more is stored with edges.
INLINE_MAX = 100
# The field of the one document beside the edges that lists every id the dependent waits for
# (``{_id: D, manifest_of: D, ids: [...]}``): written once with it, never updated, moved into the
# dependent's ``after.ids`` once when it is decided (``ctx.after``, its results, its history).
MANIFEST = "manifest_of"
SEVERITY = {"run": 0, "skip": 1, "cancel": 2}
FATE_OF_SEVERITY = {v: k for k, v in SEVERITY.items()}
NONE_FAILED = -1


@dataclass(frozen=True)
class Edge:
    """One stored edge, as checked."""

    id: object
    dependent: ObjectId
    upstream: ObjectId
    policy: Policy | None  # None: the dependent's if_failed


@dataclass(frozen=True)
class Counted:
    """The counters of a dependent stored with edges (``after``, see the module)."""

    edges: int
    left: int
    failed_count: int
    severity: int
    by: ObjectId | None
    by_why: str | None


@dataclass(frozen=True)
class Fold:
    """What a batch of ended edges does to one dependent: how many, how many failed, the most
    severe fate among them and the upstream (and its why) that brought it."""

    count: int = 0
    failed: int = 0
    severity: int = NONE_FAILED
    by: ObjectId | None = None
    by_why: str | None = None

    def plus(self, upstream: ObjectId, why: object, policy: Policy) -> Fold:
        outcome = outcome_of(why)
        if outcome is None:
            return Fold(self.count + 1, self.failed, self.severity, self.by, self.by_why)
        severity = SEVERITY[dict(policy)[outcome]]
        better = severity > self.severity
        return Fold(self.count + 1, self.failed + 1, severity if better else self.severity,
                    upstream if better else self.by, (why if isinstance(why, str) else "?") if better else self.by_why)


def is_counted(raw: object) -> bool:
    """Whether a stored ``after`` is in the edges form."""
    return isinstance(raw, Mapping) and "edges" in raw


def parse_edge(raw: object) -> Edge | str:
    """A stored edge (untrusted input), or the reason it is malformed."""
    if not isinstance(raw, Mapping):
        return "edge: not a document"
    dependent, upstream = raw.get("dependent"), raw.get("upstream")
    if not isinstance(dependent, ObjectId):
        return "edge.dependent: not a job id"
    if not isinstance(upstream, ObjectId):
        return "edge.upstream: not a job id"
    policy = raw.get("policy")
    if policy is None:
        return Edge(raw.get("_id"), dependent, upstream, None)
    if not (isinstance(policy, Mapping) and set(policy) == set(OUTCOMES) and all(policy[o] in FATES for o in OUTCOMES)):
        return f"edge.policy: does not give one of {', '.join(FATES)} for every outcome"
    return Edge(raw.get("_id"), dependent, upstream, tuple((o, str(policy[o])) for o in OUTCOMES))


def _count(raw: Mapping[str, Any], name: str, low: int, high: int) -> int | str:
    value = raw.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return f"after.{name}: not a whole number from {low} to {high}"
    return value


def parse_counted(raw: Mapping[str, Any]) -> Counted | str:
    """The counters of a stored ``after`` in the edges form (untrusted), or the reason they are malformed."""
    edges = _count(raw, "edges", 1, 10**9)
    if isinstance(edges, str):
        return edges
    left, failed = _count(raw, "left", 0, edges), _count(raw, "failed_count", 0, 10**9)
    severity = _count(raw, "severity", NONE_FAILED, max(SEVERITY.values()))
    for value in (left, failed, severity):
        if isinstance(value, str):
            return value
    assert isinstance(left, int)
    assert isinstance(failed, int)
    assert isinstance(severity, int)
    by, by_why = raw.get("by"), raw.get("by_why")
    if severity != NONE_FAILED and not (isinstance(by, ObjectId) and isinstance(by_why, str)):
        return "after.by: not the job id (and by_why its why) that decided its fate"
    return Counted(edges, left, failed, severity, by if isinstance(by, ObjectId) else None,
                   by_why if isinstance(by_why, str) else None)


def counted_form(doc: Mapping[str, Any], ended: Mapping[object, object]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ``after`` in the edges form of ``doc`` (held, its ``after`` inline as the producer built
    and settled it), and its edges (one per dependency not ended yet); ``ended``: id -> why of its
    dependencies archived already, counted at once."""
    after, job_id = doc["after"], doc["_id"]
    ids: list[ObjectId] = list(after["ids"])
    if_failed, on = after["if_failed"], after.get("on")
    policies = {i: tuple((o, str(g["policy"][o])) for o in OUTCOMES) for g in on or [] for i in g["ids"]}
    default = default_policy_of(if_failed)
    fold = Fold()
    for i in ids:
        if i in ended:
            fold = fold.plus(i, ended[i], policies.get(i, default))
    edges = [{"_id": ObjectId(), "dependent": job_id, "upstream": i,
              **({"policy": dict(policies[i])} if i in policies and policies[i] != default else {})}
             for i in ids if i not in ended]
    counted: dict[str, Any] = {
        "ids": [job_id], "pending": [job_id], "failed": [], "if_failed": if_failed, "due_at": after["due_at"],
        "held": True, "edges": len(ids), "left": len(edges), "failed_count": fold.failed, "severity": fold.severity}
    if fold.by is not None:
        counted.update(by=fold.by, by_why=fold.by_why)
    shared = {policies.get(i, default) for i in ids}
    if len(shared) == 1 and shared != {default}:  # one policy for all (a workflow step's): kept for its retry
        counted["policy"] = dict(shared.pop())
    return counted, [{"_id": job_id, MANIFEST: job_id, "ids": ids}, *edges]


def shared_policy(raw: object) -> Policy | None:
    """The one policy every dependency of a dependent stored with edges had, when it was stored
    (``after.policy``: not its ``if_failed``); None if none was, or it is malformed."""
    policy = raw.get("policy") if isinstance(raw, Mapping) and is_counted(raw) else None
    if not (isinstance(policy, Mapping) and set(policy) == set(OUTCOMES) and all(policy[o] in FATES for o in OUTCOMES)):
        return None
    return tuple((o, str(policy[o])) for o in OUTCOMES)


def parse_manifest(raw: object, job_id: object) -> list[ObjectId] | str:
    """The stored list of every job ``job_id`` waits for (untrusted), or the reason it is malformed."""
    if raw is None:
        return f"its list of dependencies ({MANIFEST} {job_id}): missing"
    ids = raw.get("ids") if isinstance(raw, Mapping) else None
    if not (isinstance(ids, list) and ids and all(isinstance(i, ObjectId) for i in ids)):
        return f"its list of dependencies ({MANIFEST} {job_id}): ids not a list of job ids"
    return ids


# The key a view's read adds to a held dependent's ``after`` (never stored): the upstreams of the
# first FRONT_SHOWN edges it has left, read from them (recruiter.store.edges.with_front).
FRONT = "front"
FRONT_SHOWN = 100


def front_of(raw: Mapping[str, Any] | object) -> tuple[ObjectId, ...] | None:
    """The front a view's read added to ``after`` (None: not read)."""
    front = raw.get(FRONT) if isinstance(raw, Mapping) else None
    return tuple(i for i in front if isinstance(i, ObjectId)) if isinstance(front, list) else None


def counted_line(counted: Counted, front: Sequence[object] | None) -> str:
    """What a dependent stored with edges waits for, in one line; ``front``: the first upstreams of
    its edges left, as read (None: not read, the count is then its ``left``, an upper bound)."""
    if front is None:
        return f"waiting for at most {counted.left} of {counted.edges} jobs (their ids are in its dependency edges)"
    if not front:
        return "its dependencies have all ended; the leader releases it at its next look"
    shown = ", ".join(str(i) for i in front[:5]) + (" …" if counted.left > len(front[:5]) else "")
    return f"waiting for {counted.left} of {counted.edges} jobs: {shown}"


def default_policy_of(if_failed: str) -> Policy:
    """The policy of an edge stored without one: its dependent's ``if_failed`` for every outcome."""
    return tuple((o, if_failed) for o in OUTCOMES)
