"""The worker's configuration, and the exit statuses it ends with.

Invariant: a :class:`WorkerConfig` that exists is valid (checked once, when it is
built), and its durations carry their unit in their names; the process reads it
and never changes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from recruiter.domain.batching import MAX_BATCH
from recruiter.domain.handback import DEFAULT_MAX_RESULT_BYTES, MAX_RESULT_BYTES_CEILING, MiB
from recruiter.domain.lanes import LANE_SEPARATOR, MAX_PREFETCH, lane_ids
from recruiter.domain.naming import ANY_GROUP, module_problem, name_problem
from recruiter.store.roster import new_worker_id
from recruiter.store.wakeup import Wake

# Exit status of a worker that stopped because it went over --memory-limit: its
# supervisor starts a fresh one (EX_TEMPFAIL: "try again").
EXIT_MEMORY = 75
# Exit status of a worker that found itself declared dead or replaced while a job it
# could not stop (a thread) was still running: it ends the process to stop that job.
EXIT_FENCED = 70
# A job given back while it still runs in a thread is due again only this much later.
THREAD_EXIT_MARGIN_S = 2.0
# A worker whose heartbeat is this many of its intervals old is taken for dead
# when a new process starts with its id.
MISSED_BEATS_FOR_RESTART = 3

ISOLATIONS = ("thread", "process")


@dataclass(frozen=True)
class WorkerConfig:
    groups: tuple[str, ...] = (ANY_GROUP,)
    concurrency: int = 1
    worker_id: str | None = None
    heartbeat_interval_s: float = 5.0
    poll_from_s: float = 0.02
    poll_to_s: float = 0.5
    max_crashes: int = 3
    deregister_wait_s: float = 10.0
    grace_period_s: float = 30.0
    memory_limit_bytes: int | None = None
    wake: Wake = Wake.AUTO
    # With a change stream, the process still reads all its entries (one read) this often, in
    # case an event was missed; the stream's own wait (``stream_await_s``) bounds idle cost.
    safety_poll_s: float = 30.0
    stream_await_s: float = 2.0
    # Module prefixes jobs may name (see recruiter.naming.AllowedModules); None allows any
    # module, for code that builds a WorkerProcess itself. The CLI always sets it.
    allowed_modules: tuple[str, ...] | None = None
    # ``worker start --burst``: stop (exit status 0) once nothing is left for this worker: no
    # job locked by its slots, and no unlocked job of its groups due now (later ones are ignored).
    burst: bool = False
    # ``worker start --prefetch N``: each slot holds up to N more jobs, in N look-ahead lanes
    # (recruiter.domain.lanes), while it runs one. 0: one job at a time, handed out when free.
    prefetch: int = 0
    # ``worker start --batch B``: a slot whose jobs are short may hold up to B more jobs, taken in
    # one assignment (recruiter.domain.batching); its lanes are max(prefetch, batch) + 1. 0: off.
    batch: int = 0
    # ``worker start --give-back-for``: a job this worker cannot import (or may not) is given
    # back for another worker until it has been refused this long (recruiter.domain.refusals).
    give_back_for_s: float = 3600.0
    # ``worker start --isolation``: "thread" runs a job without a timeout in a thread of the
    # worker (cheap, but a cancel cannot stop it); "process" runs every job in a child process,
    # killed on cancel, timeout or forced stop (recruiter.processes.worker.child).
    isolation: str = "thread"
    # ``worker start --max-result-size``: the largest result (BSON bytes) kept; a bigger one is
    # archived as ``result_dropped`` (recruiter.domain.handback).
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES

    def __post_init__(self) -> None:
        # The checks run in this order, so that the first problem is the one reported.
        for problem in (self._identity_problem(), self._timing_problem(), self._limits_problem()):
            if problem:
                raise ValueError(problem)

    def _identity_problem(self) -> str | None:
        if not self.groups:
            return "a worker needs at least one group"
        for g in self.groups:
            problem = None if g == ANY_GROUP else name_problem("group", g)
            if problem:
                return problem
        if self.concurrency < 1:
            return "concurrency must be at least 1"
        if not self.give_back_for_s > 0:
            return "give-back-for must be positive"
        if self.isolation not in ISOLATIONS:
            return f"isolation must be one of {', '.join(ISOLATIONS)}, got {self.isolation!r}"
        if not 0 <= self.prefetch <= MAX_PREFETCH:
            return f"prefetch must be between 0 and {MAX_PREFETCH}"
        if not 0 <= self.batch <= MAX_BATCH:
            return f"batch must be between 0 and {MAX_BATCH}"
        if self.worker_id is not None and (
            not self.worker_id or "." in self.worker_id or LANE_SEPARATOR in self.worker_id
            or self.worker_id.startswith("$")
        ):
            return (f"invalid worker id {self.worker_id!r}: it cannot be empty, contain '.' or "
                    f"'{LANE_SEPARATOR}' or start with '$'")
        return None

    def _timing_problem(self) -> str | None:
        if self.heartbeat_interval_s <= 0:
            return "heartbeat interval must be positive"
        if not 0 < self.poll_from_s <= self.poll_to_s:
            return "poll-from must be positive and not above poll-to"
        if self.max_crashes < 1:
            return "max crashes must be at least 1"
        if self.grace_period_s < 0:
            return "grace period cannot be negative"
        return None

    def _limits_problem(self) -> str | None:
        if self.memory_limit_bytes is not None and self.memory_limit_bytes <= 0:
            return "memory limit must be positive"
        if not 0 < self.max_result_bytes <= MAX_RESULT_BYTES_CEILING:
            return f"max result size must be from 1 byte to {MAX_RESULT_BYTES_CEILING // MiB} MiB"
        for prefix in self.allowed_modules or ():
            problem = module_problem(prefix)
            if problem:
                return f"invalid allowed module: {problem}"
        return None

    def lanes(self, slot_ids: list[str]) -> list[tuple[str, int, str]]:
        """Every roster entry the process registers: (slot id, lane, entry id)."""
        return [(slot, k, lane) for slot in slot_ids for k, lane in enumerate(lane_ids(slot, self.ahead))]

    @property
    def ahead(self) -> int:
        """The look-ahead lanes of each slot: its --prefetch ones, and the batch lanes above them."""
        return max(self.prefetch, self.batch)

    def slot_ids(self) -> list[str]:
        base = self.worker_id or new_worker_id()
        if self.concurrency == 1:
            return [base]
        return [f"{base}-{i}" for i in range(self.concurrency)]
