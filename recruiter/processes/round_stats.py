"""Where a recruiter round's time goes, for the benchmarks (``RECRUITER_ROUND_STATS=<path>``).

The recruiter times every round by phase (:class:`RoundTimer`, always on) and
emits the phases in its round events (:mod:`recruiter.domain.events`). When the
variable is set, the process's edge subscribes a :class:`RoundStats` to them,
which sums the phases
(:data:`PHASES`: the reads, ``read_roster`` (the entries that are free or hold an
outcome), ``read_jobs`` (the jobs outcomes name that this leader did not hand out),
``read_beats`` (the free entries' heartbeats, and the stranded jobs of silent ones),
``read_candidates`` (the jobs chosen from, :mod:`recruiter.store.readahead`) and
``plan``, the choosing between them; ``fence``, the lease's renewal when due,
the transaction's start and its fence write; then in the transaction ``apply``,
stranded jobs taken back and outcomes applied; ``cursor``; ``lock``; ``assign``;
``clear``, the outcomes no assignment cleared; ``commit``) and writes the totals as JSON to
``<path>``: every second (atomically, through a rename), on ``SIGUSR2`` (as
:mod:`recruiter.store.monitoring` does) and at exit.

Invariant: with the variable unset nothing is recorded and no thread, file or
signal handler is made; nothing is decided at import. A round that fails before
it commits is counted as ``unfinished`` (:class:`~recruiter.domain.events.RoundAbandoned`)
with none of its phases in the totals.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from recruiter.domain.events import Event, RoundAbandoned, RoundCommitted, RoundIdle
from recruiter.store.monitoring import write_periodically

ROUND_STATS_ENVVAR = "RECRUITER_ROUND_STATS"
WRITE_INTERVAL_S = 1.0
PHASES = ("read_roster", "read_jobs", "read_beats", "read_candidates", "plan",
          "fence", "apply", "cursor", "lock", "assign", "clear", "commit")


class RoundTimer:
    """The clock of one recruiter's rounds: :meth:`begin`, a :meth:`mark` after each phase, :meth:`finish`.

    Always on (a ``perf_counter`` per mark); the phases reach the subscribers in the
    round events (:class:`~recruiter.domain.events.RoundCommitted`, ``RoundIdle``).
    A mark outside a round (tests drive unfenced rounds) is ignored."""

    def __init__(self) -> None:
        self._current: dict[str, float] | None = None
        self._began = 0.0
        self._last = 0.0

    @property
    def running(self) -> bool:
        return self._current is not None

    def begin(self) -> None:
        now = time.perf_counter()
        self._current, self._began, self._last = {}, now, now

    def mark(self, phase: str) -> None:
        """The time since the last mark (or :meth:`begin`) goes to ``phase``."""
        if self._current is None:
            return
        now = time.perf_counter()
        self._current[phase] = self._current.get(phase, 0.0) + now - self._last
        self._last = now

    def finish(self) -> tuple[dict[str, float], float]:
        """The round's phases and its whole time; the timer is idle again."""
        current, self._current = self._current or {}, None
        return current, time.perf_counter() - self._began

    def abandon(self) -> None:
        self._current = None


@dataclass
class RoundStats:
    """Totals over the rounds of one process; safe to snapshot from another thread."""

    rounds: int = 0  # rounds that committed writes
    idle_rounds: int = 0  # rounds whose reads found nothing to write
    unfinished: int = 0  # rounds begun that raised (a conflict, a lost lease): not in the totals
    assigned: int = 0
    applied: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    idle_seconds: float = 0.0  # the reads of idle rounds
    idle_phases: dict[str, float] = field(default_factory=dict)  # those seconds by phase
    max_round_s: float = 0.0
    _timer: RoundTimer = field(default_factory=RoundTimer)  # begin/mark/end, for a round timed here
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, event: Event) -> None:
        """The subscriber: the round events add to the totals."""
        if isinstance(event, RoundCommitted):
            self.add(event.phases, event.duration_s, event.assigned, event.applied, idle=False)
        elif isinstance(event, RoundIdle):
            self.add(event.phases, event.duration_s, 0, 0, idle=True)
        elif isinstance(event, RoundAbandoned):
            with self._lock:
                self.unfinished += 1

    def begin(self) -> None:
        if self._timer.running:
            with self._lock:
                self.unfinished += 1
        self._timer.begin()

    def mark(self, phase: str) -> None:
        """The time since the last mark (or :meth:`begin`) goes to ``phase``."""
        self._timer.mark(phase)

    def end(self, assigned: int, applied: int, *, idle: bool) -> None:
        if not self._timer.running:
            return
        phases, took = self._timer.finish()
        self.add(phases, took, assigned, applied, idle=idle)

    def add(self, phases: Mapping[str, float], took: float, assigned: int, applied: int, *, idle: bool) -> None:
        """A finished round: committed, or (``idle``) whose reads found nothing to write."""
        with self._lock:
            if idle:
                self.idle_rounds += 1
                self.idle_seconds += took
                for phase, seconds in phases.items():
                    self.idle_phases[phase] = self.idle_phases.get(phase, 0.0) + seconds
                return
            self.rounds += 1
            self.assigned += assigned
            self.applied += applied
            self.max_round_s = max(self.max_round_s, took)
            for phase, seconds in phases.items():
                self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    def snapshot(self) -> dict[str, object]:
        with self._lock:
            return {"pid": os.getpid(), "written_at": time.time(), "rounds": self.rounds,
                    "idle_rounds": self.idle_rounds, "unfinished": self.unfinished, "assigned": self.assigned,
                    "applied": self.applied, "seconds": dict(self.seconds), "idle_seconds": self.idle_seconds,
                    "idle_phases": dict(self.idle_phases),
                    "max_round_s": self.max_round_s}


def recording(path: str) -> RoundStats:
    """A subscriber recording to ``path`` (a writer thread, a ``SIGUSR2`` flush, a last write at exit).

    Made at the process's edge (:class:`recruiter.processes.runtime.Instruments`), in the main thread."""
    stats = RoundStats()
    write_periodically(stats.snapshot, path, "round-stats")
    return stats


def from_environment() -> RoundStats | None:
    """The subscriber ``RECRUITER_ROUND_STATS=<path>`` asks for, or None."""
    path = os.environ.get(ROUND_STATS_ENVVAR)
    return recording(path) if path else None
