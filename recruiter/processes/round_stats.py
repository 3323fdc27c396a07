"""Where a recruiter round's time goes, for the benchmarks (``RECRUITER_ROUND_STATS=<path>``).

When the variable is set, the recruiter process times each round by phase
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
signal handler is made; each hook (:func:`begin`, :func:`mark`, :func:`end`)
is one global lookup and a return. A hook never raises into the round, and a
round that fails between :func:`begin` and :func:`end` is counted as
``unfinished`` with none of its phases in the totals.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

from recruiter.store.monitoring import write_periodically

ROUND_STATS_ENVVAR = "RECRUITER_ROUND_STATS"
WRITE_INTERVAL_S = 1.0
PHASES = ("read_roster", "read_jobs", "read_beats", "read_candidates", "plan",
          "fence", "apply", "cursor", "lock", "assign", "clear", "commit")


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
    _current: dict[str, float] | None = None
    _began: float = 0.0
    _last: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def begin(self) -> None:
        now = time.perf_counter()
        if self._current is not None:
            self.unfinished += 1
        self._current, self._began, self._last = {}, now, now

    def mark(self, phase: str) -> None:
        """The time since the last mark (or :meth:`begin`) goes to ``phase``."""
        if self._current is None:
            return  # a round driven without begin (tests' unfenced rounds)
        now = time.perf_counter()
        self._current[phase] = self._current.get(phase, 0.0) + now - self._last
        self._last = now

    def end(self, assigned: int, applied: int, *, idle: bool) -> None:
        current, self._current = self._current, None
        if current is None:
            return
        took = time.perf_counter() - self._began
        with self._lock:
            if idle:
                self.idle_rounds += 1
                self.idle_seconds += took
                for phase, seconds in current.items():
                    self.idle_phases[phase] = self.idle_phases.get(phase, 0.0) + seconds
                return
            self.rounds += 1
            self.assigned += assigned
            self.applied += applied
            self.max_round_s = max(self.max_round_s, took)
            for phase, seconds in current.items():
                self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    def snapshot(self) -> dict[str, object]:
        with self._lock:
            return {"pid": os.getpid(), "written_at": time.time(), "rounds": self.rounds,
                    "idle_rounds": self.idle_rounds, "unfinished": self.unfinished, "assigned": self.assigned,
                    "applied": self.applied, "seconds": dict(self.seconds), "idle_seconds": self.idle_seconds,
                    "idle_phases": dict(self.idle_phases),
                    "max_round_s": self.max_round_s}


def _from_environment() -> RoundStats | None:
    path = os.environ.get(ROUND_STATS_ENVVAR)
    if not path:
        return None
    return recording(path)


def recording(path: str) -> RoundStats:
    """Start recording to ``path`` (a writer thread, a ``SIGUSR2`` flush, a last write at exit)."""
    global _stats
    stats = RoundStats()
    write_periodically(stats.snapshot, path, "round-stats")
    _stats = stats
    return stats


_stats: RoundStats | None = None
_stats = _from_environment()


def begin() -> None:
    """A round starts (its reads come next)."""
    if _stats is not None:
        _stats.begin()


def mark(phase: str) -> None:
    """The round's time since the previous mark was spent in ``phase``."""
    if _stats is not None:
        _stats.mark(phase)


def end(assigned: int = 0, applied: int = 0, *, idle: bool = False) -> None:
    """The round is over (committed, or found nothing to write when ``idle``)."""
    if _stats is not None:
        _stats.end(assigned, applied, idle=idle)
