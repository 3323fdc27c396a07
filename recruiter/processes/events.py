"""The events seam: a :class:`Bus` that hands each event (:mod:`recruiter.domain.events`) to its subscribers.

A process emits an event once the write that makes it true has landed (inside a
transaction, :class:`recruiter.processes.logs.AfterCommit` holds it until the
commit). The logs are one subscriber (:func:`log_event`: the same log lines, names
and fields as before the seam existed); the round timings of the benchmarks are
another (:class:`recruiter.processes.round_stats.RoundStats`); users add theirs with
``--subscriber module:callable`` or :meth:`Bus.subscribe`.

Invariant: a subscriber never breaks the process. One that raises is logged
(``event.subscriber_failed``, with the traceback at debug level) and the other
subscribers, and the process, go on. Subscribers run in the process's event loop
thread, in the order they subscribed: one that needs to wait (a network call) hands
the event to a thread or a queue of its own.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from recruiter.domain.events import (
    Event,
    JobArchived,
    JobFinished,
    LeaseLost,
    LeaseWon,
    WorkerGone,
    WorkerRegistered,
)

log = structlog.get_logger("recruiter.events")

Subscriber = Callable[[Event], object]


class Bus:
    """Subscribers, called in order for each event emitted; a failing one is logged and skipped."""

    def __init__(self, subscribers: Iterable[Subscriber] = ()) -> None:
        self._subscribers: list[Subscriber] = list(subscribers)

    @classmethod
    def logging(cls, *more: Subscriber) -> Bus:
        """A bus whose first subscriber prints the log lines (:func:`log_event`), then ``more``."""
        return cls([log_event, *more])

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Add ``subscriber``; returns the function that removes it."""
        self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)

        return unsubscribe

    def emit(self, event: Event) -> None:
        for subscriber in tuple(self._subscribers):
            try:
                subscriber(event)
            except Exception as exc:  # noqa: BLE001 - a subscriber's failure is its own, never the process's
                _failed(subscriber, event, exc)


def _failed(subscriber: Subscriber, event: Event, exc: Exception) -> None:
    name = _name(subscriber)
    with contextlib.suppress(Exception):  # even a failing log of the failure stays here
        log.warning("event.subscriber_failed", subscriber=name, kind=type(event).__name__,
                    error=f"{type(exc).__name__}: {exc}"[:300])
        log.debug("event.subscriber_traceback", subscriber=name, exc_info=exc)


def _name(subscriber: Subscriber) -> str:
    module = getattr(subscriber, "__module__", None) or "?"
    qualname = getattr(subscriber, "__qualname__", None) or type(subscriber).__qualname__
    return f"{module}:{qualname}"


def load_subscriber(spec: str) -> Subscriber:
    """The callable ``module:qualname`` names (``--subscriber``); ValueError in one line if it cannot be."""
    module_name, sep, qualname = spec.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"{spec!r} is not MODULE:CALLABLE (e.g. myapp.reporting:on_event)")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is a bad argument
        raise ValueError(f"cannot import {module_name!r} for --subscriber: {type(exc).__name__}: {exc}") from None
    for part in qualname.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ValueError(f"{module_name!r} has no {qualname!r} (--subscriber {spec})")
    if not callable(target):
        raise ValueError(f"{spec} is not callable (--subscriber takes a function of one event)")
    subscriber: Subscriber = target
    return subscriber


# -- the log lines ------------------------------------------------------------------------------


def log_event(event: Event) -> None:
    """The log line of ``event``, as the processes printed it before the events seam (same names and fields).

    Events that had no log line (a job started, a round's timings) print none.
    """
    if isinstance(event, JobFinished):
        _log_finished(event)
    elif isinstance(event, JobArchived):
        _log_archived(event)
    elif isinstance(event, WorkerRegistered):
        log.info("worker.registered", worker_id=event.worker_id, groups=list(event.groups), pid=event.pid)
    elif isinstance(event, WorkerGone):
        _log_gone(event)
    elif isinstance(event, LeaseWon):
        log.info("leader.elected", role=event.role, epoch=event.epoch, owner=event.owner)
    elif isinstance(event, LeaseLost):
        log.warning("leader.lost", role=event.role, epoch=event.epoch)


def _log_finished(e: JobFinished) -> None:
    bound = log.bind(worker_id=e.worker_id, job_id=str(e.job_id), group=str(e.group)[:100], attempt=e.attempt)
    if e.outcome == "done":
        bound.info("job.done", duration_s=e.duration_s)
    elif e.outcome == "snoozed":  # recruiter.domain.snooze: not a failure, no attempt counted
        bound.info("job.snoozed", duration_s=e.duration_s, decision=e.decision)
    else:
        bound.info("job.failed", error=e.error, message=(e.message or "")[:200], outcome=e.outcome,
                   decision=e.decision)


def _log_gone(e: WorkerGone) -> None:
    if e.reason == "dead":
        log.warning("worker.dead", worker_id=e.worker_id, last_seen_at=e.last_seen, pid=e.pid, hostname=e.hostname)
    else:
        log.info("worker.deregistered", worker_id=e.worker_id)


def _log_archived(e: JobArchived) -> None:
    if e.by == "cleaner":
        log.warning("job.archived", job_id=str(e.job_id), why=e.why, reason=e.reason)
    else:
        log.info("job.archived", job_id=str(e.job_id), why=e.why, attempts=e.attempts, group=e.group)

