"""Chains and fan-in: jobs linked by ``.after`` before they are written, enqueued as one unit.

``rec.enqueue_many(chain(rec, Fetch(), Transform(), Report()))`` runs each job once the one
before it is done; ``rec.enqueue_many(fan_in(rec, [Part(1), Part(2)], Total()))`` runs the
parts in parallel and ``Total`` once they all have ended (the last handle is its). Each
returns builders (:class:`~recruiter.domain.builder.JobBuilder`) with their ids given and
their ``after`` set; ``enqueue_many`` writes them all or nothing, in one transaction, the
same for a :class:`~recruiter.Recruiter` and an :class:`~recruiter.AsyncRecruiter`. A job
that waited reads the ids of those it waited for in ``ctx.after``, and their results
through their handles (``rec.job(id).result()``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from bson import ObjectId

from recruiter.domain.builder import Enqueuer, JobBuilder, as_builder
from recruiter.domain.dependencies import DependencyRefused, checked_if_failed
from recruiter.domain.dependency_policy import PolicyRefused, checked_policy
from recruiter.domain.job import JobRefused
from recruiter.domain.workable import Workable

Item = JobBuilder[Any] | Workable


def _with_id(builder: JobBuilder[Any]) -> JobBuilder[Any]:
    return replace(builder, options=replace(builder.options, job_id=ObjectId()))


def _after(builder: JobBuilder[Any], ids: Iterable[ObjectId], if_failed: str,
           on: Mapping[str, str] | None) -> JobBuilder[Any]:
    own = builder.options.after
    new = [i for i in ids if i not in own]
    return builder.after(*new, if_failed=if_failed, on=on) if new else builder


def _linked(recruiter: Enqueuer[Any], items: Iterable[Item]) -> list[JobBuilder[Any]]:
    return [_with_id(as_builder(item, recruiter)) for item in items]


def _id(builder: JobBuilder[Any]) -> ObjectId:
    assert builder.options.job_id is not None
    return builder.options.job_id


def chain(recruiter: Enqueuer[Any], *items: Item, if_failed: str = "cancel",
          on: Mapping[str, str] | None = None) -> list[JobBuilder[Any]]:
    """``items`` each waiting for the one before it (``if_failed``, ``on``: see :meth:`JobBuilder.after`)."""
    _check(if_failed, on)
    built = _linked(recruiter, items)
    if not built:
        raise JobRefused("a chain needs at least one job")
    return [built[0]] + [_after(b, [_id(built[k])], if_failed, on) for k, b in enumerate(built[1:])]


def fan_in(recruiter: Enqueuer[Any], items: Iterable[Item], final: Item,
           if_failed: str = "cancel", on: Mapping[str, str] | None = None) -> list[JobBuilder[Any]]:
    """``items`` (run in parallel), then ``final`` waiting for them all: the last builder is ``final``'s."""
    _check(if_failed, on)
    built = _linked(recruiter, items)
    if not built:
        raise JobRefused("a fan-in needs at least one job to wait for")
    last = _with_id(as_builder(final, recruiter))
    return [*built, _after(last, [_id(b) for b in built], if_failed, on)]


def _check(if_failed: str, on: Mapping[str, str] | None) -> None:
    try:
        checked_policy(checked_if_failed(if_failed), on)
    except (DependencyRefused, PolicyRefused) as exc:
        raise JobRefused(str(exc)) from None
