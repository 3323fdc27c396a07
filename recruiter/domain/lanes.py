"""Look-ahead: a worker slot holds its next jobs while it runs the current one (pure, no I/O).

``worker start --prefetch N`` gives each slot N + 1 roster entries, its
*lanes*: lane 0 has the slot's id (``W`` or ``W-0``), lane k the id ``W~k``.
Each lane is an ordinary roster entry (one assignment, one outcome, one
heartbeat document), so the recruiter's round, the cleaner, cancel and every
fence treat it as they treat any worker. The slot (its *runner*) runs its lanes'
jobs one at a time, in the order they came; when it records the outcome of one
it starts the next at once, with no round between them.

The round gives each free lane a *depth*: how many jobs its runner holds
before that lane's job would start (:func:`depths`). Lanes of idle runners
have depth 0, and the selection gives a job to a lane of depth 0 before any
deeper one (:class:`recruiter.domain.selection.FreeWorker`). An assignment of
depth above 0 is *ahead*: the recruiter writes ``ahead: <the job's lock token>``
in the entry with it (``ahead: false`` otherwise). A token, not ``true``, so
that each assignment changes the field and a change stream event always
carries it.

Invariants:

1. A worker starts an ahead job only after a write that sets ``started`` (the
   job's lock token) in that lane's entry, fenced by the entry's session and
   assignment; that write rides in the same command as the outcome of the job
   before it, so it costs no round trip of its own. So an ahead job whose entry
   has no ``started`` for its lock token provably never started
   (:func:`held_ahead`): when its worker dies, is stopped or the job is
   cancelled, it goes back with its attempt given back and no crash, and it
   does not count as an unproven return (even ``at_most_once``).
2. A busy slot is topped up (a job handed to it ahead) only while its jobs last
   longer than a hand-off takes (:func:`worth_topping_up`): a job that ends
   before the next one could reach its slot leaves the slot idle anyway, and
   the held job then costs a write of its own. A slot of such short jobs is
   given work when it is idle, up to N + 1 jobs at once, which it runs back to
   back.
3. Fairness within the look-ahead: lanes of depth 0 (idle slots) get exactly
   what the selection would give them without look-ahead; within each group the
   tenants, priorities and FIFO order are served as without it. What deeper
   lanes add is more turns in the same round, for the groups they take. A job
   taken ahead starts after at most N jobs of its slot end (``--prefetch N``;
   each bounded by its own timeout, if any); the slot runs a job handed to it
   at depth 0 before the ones it holds ahead.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime

from recruiter.domain.records import Raw

LANE_SEPARATOR = "~"
MAX_PREFETCH = 16


def lane_ids(slot_id: str, prefetch: int) -> list[str]:
    """The roster entry ids of one slot's lanes: the slot's own id, then ``<slot id>~k``."""
    return [slot_id, *(f"{slot_id}{LANE_SEPARATOR}{k}" for k in range(1, prefetch + 1))]


def slot_of(entry_id: str) -> str:
    """The slot a roster entry id belongs to: the id without its lane (``W-0~1`` -> ``W-0``).
    Worker ids cannot contain the separator, so this is exact."""
    return entry_id.split(LANE_SEPARATOR, 1)[0]


def runner_of(entry: Mapping[str, object]) -> object:
    """The slot that runs ``entry``'s jobs (an entry of an older worker is its own runner)."""
    runner = entry.get("runner")
    return runner if isinstance(runner, str) and runner else entry.get("_id")


def lane_of(entry: Mapping[str, object]) -> int:
    """Which lane of its slot ``entry`` is (0 for an entry of an older worker)."""
    lane = entry.get("lane")
    return lane if isinstance(lane, int) and not isinstance(lane, bool) and lane >= 0 else 0


def lanes_of(entry: Mapping[str, object]) -> int:
    """How many lanes ``entry``'s runner has (1 for an entry of an older worker)."""
    lanes = entry.get("lanes")
    return lanes if isinstance(lanes, int) and not isinstance(lanes, bool) and 1 <= lanes <= MAX_PREFETCH + 1 else 1


def depths(free: Sequence[Mapping[str, object]], unheld: Iterable[Mapping[str, object]]) -> dict[object, int]:
    """The depth of each ``free`` lane, by ``_id``.

    ``unheld`` are every entry of the round that holds no job to run (available,
    or holding an outcome: its job is done), ``free`` those of them that may be
    given work. A runner holds ``lanes - unheld`` jobs (a lane the round does not
    see, e.g. one still registering, counts as holding one: the safe side); its
    k-th free lane in lane order (from 0) has depth ``held + k``. Lane order is
    also the order in which one assignment's events reach the worker (the
    server updates entries in ``_id`` order, and ``W`` < ``W~1`` < ``W~2``).
    """
    unheld_by_runner = Counter(runner_of(e) for e in unheld)
    by_runner: dict[object, list[Mapping[str, object]]] = {}
    for e in free:
        by_runner.setdefault(runner_of(e), []).append(e)
    out: dict[object, int] = {}
    for runner, lanes in by_runner.items():
        held = max(0, lanes_of(lanes[0]) - max(unheld_by_runner[runner], len(lanes)))
        for k, e in enumerate(sorted(lanes, key=lane_of)):
            out[e["_id"]] = held + k
    return out


def serving_order(now: datetime) -> Callable[[Mapping[str, object]], tuple[bool, datetime, str]]:
    """Sort key of the free entries a round may serve: the entries holding an outcome first, then
    the longest available, then by ``_id``. A round writes to an entry holding an outcome either
    way: the assignment that reaches it also clears its outcome, where one that goes elsewhere
    leaves it a write of its own (with no-op jobs at capacity, about one per job). Which
    free worker runs a job changes neither when it starts (the depth comes first) nor the order
    of the jobs."""
    def key(entry: Mapping[str, object]) -> tuple[bool, datetime, str]:
        since = entry.get("available_since")
        return not entry.get("outcome"), since if isinstance(since, datetime) else now, str(entry["_id"])
    return key


def is_ahead(ahead: object, job: Mapping[str, object] | None) -> bool:
    """Whether an entry's ``ahead`` value says its job (``job``: the copy, or a reference) was
    handed out ahead: it names that job's lock token."""
    token = job.get("lock_token") if isinstance(job, Mapping) else None
    return token is not None and ahead == token


def holding(unheld: Iterable[Mapping[str, object]]) -> set[object]:
    """The runners that hold a job, given every entry of the round that holds none: those
    with fewer such entries than lanes."""
    seen = Counter(runner_of(e) for e in unheld)
    lanes = {runner_of(e): lanes_of(e) for e in unheld}
    return {r for r, n in seen.items() if n < lanes[r]}


def held_ahead(job: Raw, entry: Raw | None) -> bool:
    """Whether ``job`` was handed to ``entry`` ahead and provably never started (invariant 1):
    the entry still holds it, its ``ahead`` names this lock token, and it has no ``started``
    for that token."""
    if entry is None:
        return False
    assigned = entry.get("assigned_to")
    if not isinstance(assigned, Mapping) or assigned.get(entry.get("_id")) != job.get("_id"):
        return False
    return needs_mark(entry, job)


def needs_mark(entry: Mapping[str, object], job: object) -> bool:
    """Whether the job in a worker's own ``entry`` (``job``: its copy or reference) was handed out
    ahead and is not marked started yet: the worker writes the mark before starting it."""
    if not isinstance(job, Mapping) or not is_ahead(entry.get("ahead"), job):
        return False
    return entry.get("started") != job.get("lock_token")


def run_seconds(outcome: Mapping[str, object]) -> float | None:
    """How long the attempt an ``outcome`` reports ran, by its execution's dates (None if not known)."""
    execution = outcome.get("execution")
    if not isinstance(execution, Mapping):
        return None
    started, ended = execution.get("started_at"), execution.get("ended_at")
    if not isinstance(started, datetime) or not isinstance(ended, datetime):
        return None
    return max(0.0, (ended - started).total_seconds())


def worth_topping_up(last_run_s: float | None, handoff_s: float) -> bool:
    """Whether to hand a job ahead to a busy slot whose last job ran ``last_run_s`` (None: not
    known yet), when a hand-off (a round, then its event) takes about ``handoff_s``: only if its
    jobs outlast a hand-off, so that the held job reaches the slot before it is idle
    (invariant 2)."""
    return last_run_s is None or last_run_s >= handoff_s
