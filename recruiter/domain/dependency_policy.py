"""What an upstream's end means for the job that waits for it: per dependency, per outcome (pure).

Every dependency has a **policy**: for each way an upstream can end other than ``done``
(an :data:`OUTCOMES` entry), a **fate** (a :data:`FATES` entry) for the dependent:

- ``"cancel"``: the dependent is archived, ``why: "upstream-failed"``, naming the upstream;
- ``"skip"``: the dependent is archived, ``why: "skipped"``, naming the upstream (an expected
  branch not taken, not a failure);
- ``"run"``: the upstream counts as if it were done, the dependent runs.

Once every dependency has ended, the dependent's fate is the most severe of its failed
dependencies' fates (``cancel`` over ``skip`` over ``run``); all done: it runs. A skipped
job is an upstream like any other for its own dependents: its outcome is ``skipped``,
which their policies address (``"cancel"`` unless they say otherwise), so a skip never
silently turns into a run further down.

Stored form (``after.on``, only when some dependency's policy is not the uniform
``if_failed`` of the first slice)::

    on: [{ids: [a], policy: {failed: "skip", cancelled: "cancel", unrunnable: "cancel",
                             quarantined: "cancel", gone: "cancel", skipped: "cancel"}}]

Skew (0.2.0 reads ``after`` without ``on``, deciding by ``if_failed`` alone): a job whose
policies 0.2.0 could decide otherwise is stored **guarded**: its own id stays in
``after.pending``. A 0.2.0 leader only pulls ids it found archived or gone, and the job
itself is queued, so it never releases nor archives a guarded job; a 0.3.0 leader reads
the pending list without the job's own id (:func:`recruiter.domain.dependencies.parse_after`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bson import ObjectId

OUTCOMES = ("failed", "cancelled", "unrunnable", "quarantined", "gone", "skipped")
FATES = ("cancel", "skip", "run")  # most severe first
SKIPPED = "skipped"  # the why of a job skipped because of an upstream
_SEVERITY = {"run": 0, "skip": 1, "cancel": 2}

# The whys of archived jobs, by outcome (any other why but done is "failed").
_BY_WHY = {
    "cancelled": "cancelled", "halted": "cancelled", "running-on": "cancelled", "upstream-failed": "cancelled",
    "unrunnable": "unrunnable", "not-allowed": "unrunnable", "cannot-import": "unrunnable",
    "malformed": "quarantined", "gone": "gone", "deleted": "gone", SKIPPED: "skipped",
}

Policy = tuple[tuple[str, str], ...]  # (outcome, fate) for every outcome, in OUTCOMES' order


class PolicyRefused(ValueError):
    """A policy that cannot be stored; one line."""


def outcome_of(why: object) -> str | None:
    """The outcome an archived job's ``why`` stands for; None for ``done``."""
    if why == "done":
        return None
    return _BY_WHY.get(why, "failed") if isinstance(why, str) else "failed"


def uniform(fate: str) -> Policy:
    return tuple((o, fate) for o in OUTCOMES)


CANCEL_ALL, RUN_ALL = uniform("cancel"), uniform("run")


def checked_policy(if_failed: str, on: Mapping[str, str] | None) -> Policy:
    """The whole policy of ``.after(..., if_failed=, on=)``: ``on`` overrides ``if_failed``
    (``"cancel"`` or ``"run"``) per outcome."""
    base = {"cancel": "cancel", "run": "run"}[if_failed]
    if on is None:
        return uniform(base)
    if not isinstance(on, Mapping):
        raise PolicyRefused(f"on needs a mapping of outcome to fate, got {type(on).__name__}")
    for outcome, fate in on.items():
        if outcome not in OUTCOMES:
            raise PolicyRefused(f"on: {outcome!r:.40} is not an outcome; one of {', '.join(OUTCOMES)}")
        if fate not in FATES:
            raise PolicyRefused(f"on[{outcome!r}]: {fate!r:.40} is not one of {', '.join(FATES)}")
    return tuple((o, str(on.get(o, base))) for o in OUTCOMES)


def stored_on(policies: Sequence[tuple[ObjectId, Policy]]) -> tuple[str, list[dict[str, Any]] | None]:
    """``(if_failed, on)`` to store for these per-dependency policies: a uniform policy is the
    first slice's ``if_failed`` alone (``on`` None); any other is grouped in ``on``."""
    distinct = {p for _, p in policies}
    if distinct <= {CANCEL_ALL}:
        return "cancel", None
    if distinct == {RUN_ALL}:
        return "run", None
    groups: dict[Policy, list[ObjectId]] = {}
    for job_id, policy in policies:
        groups.setdefault(policy, []).append(job_id)
    return "cancel", [{"ids": ids, "policy": dict(p)} for p, ids in groups.items()]


def parse_on(raw: object) -> dict[ObjectId, Policy] | str:
    """A stored ``after.on`` (untrusted): dependency id -> policy, or the reason it is malformed."""
    if not isinstance(raw, list):
        return "after.on: not a list"
    out: dict[ObjectId, Policy] = {}
    for group in raw:
        ids = group.get("ids") if isinstance(group, Mapping) else None
        policy = group.get("policy") if isinstance(group, Mapping) else None
        if not (isinstance(ids, list) and all(isinstance(i, ObjectId) for i in ids)):
            return "after.on: a group's ids are not a list of job ids"
        if not (isinstance(policy, Mapping) and set(policy) == set(OUTCOMES)
                and all(policy[o] in FATES for o in OUTCOMES)):
            return f"after.on: a group's policy does not give one of {', '.join(FATES)} for every outcome"
        for i in ids:
            out[i] = tuple((o, str(policy[o])) for o in OUTCOMES)
    return out


def fate_of(failed: Iterable[tuple[ObjectId, str]], policy_of: Mapping[ObjectId, Policy],
            default: Policy) -> tuple[str, ObjectId | None, str | None]:
    """The dependent's fate once nothing is pending: ``(fate, upstream, its why)``, the upstream
    being the first failed one whose fate decided (None when it runs because all were done)."""
    fate, by, why_of = "run", None, None
    for job_id, why in failed:
        outcome = outcome_of(why)
        if outcome is None:
            continue
        this = dict(policy_of.get(job_id, default))[outcome]
        if _SEVERITY[this] > _SEVERITY[fate] or (by is None and this == fate == "run"):
            fate, by, why_of = this, job_id, why
    return fate, by, why_of


def guarded(policies: Iterable[Policy]) -> bool:
    """Whether a 0.2.0 leader, deciding by ``if_failed`` alone, could decide this job otherwise
    (run it where these policies would not, or not run it where they would)."""
    distinct = set(policies)
    return not (distinct <= {CANCEL_ALL} or distinct == {RUN_ALL})
