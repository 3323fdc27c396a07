"""Short jobs in batches: how many lanes of a slot one round fills (pure, no I/O).

``worker start --batch B`` gives each slot ``max(P, B) + 1`` lanes
(:mod:`recruiter.domain.lanes`; ``P`` is ``--prefetch``) and records ``prefetch: P``
in each of its roster entries (:data:`FIELD`). Lanes ``0..P`` are *steady*: the
round fills them as it fills any look-ahead lane. The lanes above ``P`` are *batch
lanes*: the round fills them only while the slot's jobs are short, so that the slot
holds about a round's worth of work (:func:`batch_size`): no-op jobs go out up to
``B + 1`` in one assignment and are run back to back, their outcomes written in one
command each (with the next job's ``started`` mark) or gathered with other slots'
(:mod:`recruiter.processes.worker.completer`), and applied by one round.

Invariants:

1. A batch lane is an ordinary look-ahead lane: its job is handed out *ahead* (depth
   above 0), started only after its ``started`` mark is written, given back unstarted
   (its attempt not counted) on a stop, a cancel or the worker's death; a rate-limited
   job is never handed to it (the selection gives none ahead). Fencing and the crash
   rules are those of every lane.
2. Sizing only leaves lanes out: a round fills at most what it would fill without it,
   never a lane it would not. An entry that records no ``prefetch`` (an older worker),
   or one that cannot be read, has every lane steady: it is served exactly as before.
3. A slot whose jobs have no measured run time yet (:func:`batch_size` gets None), or
   whose jobs run about a round or longer, gets its steady lanes only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from recruiter.domain.lanes import MAX_PREFETCH, lanes_of

# The field of a roster entry recording its worker's --prefetch (the steady lanes, besides lane 0).
FIELD = "prefetch"
# ``worker start --batch``: the most jobs a slot takes ahead for short jobs (within one process's lanes).
MAX_BATCH = MAX_PREFETCH
# The least round a batch is sized for: a round is rarely shorter than this, however quick the server.
MIN_ROUND_S = 0.005
# A batch lasts about this many rounds: the slot runs it while its last outcome wakes the leader, the
# leader's round hands out the next batch and the worker reads it (about a round, and a read).
ROUNDS_HELD = 2


def steady_lanes(entry: Mapping[str, object]) -> int:
    """How many lanes of ``entry``'s slot are always filled (lane 0 and the --prefetch lanes): its
    recorded ``prefetch`` + 1, or all its lanes when it records none or an unreadable one (invariant 2)."""
    lanes = lanes_of(entry)
    prefetch = entry.get(FIELD)
    if isinstance(prefetch, int) and not isinstance(prefetch, bool) and 0 <= prefetch < lanes:
        return prefetch + 1
    return lanes


def batch_size(run_s: float | None, round_s: float, steady: int, lanes: int) -> int:
    """How many lanes of a slot a round fills: enough jobs of ``run_s`` each (the slot's measured
    run time; None: not measured yet) to last about ``ROUNDS_HELD`` rounds of ``round_s`` (at least
    ``MIN_ROUND_S``), at least the ``steady`` lanes, at most all its ``lanes``."""
    steady = max(1, min(steady, lanes))
    if run_s is None or not math.isfinite(run_s) or run_s < 0:
        return steady
    round_s = max(round_s if math.isfinite(round_s) else 0.0, MIN_ROUND_S)
    if run_s == 0:
        return lanes
    return max(steady, min(lanes, math.floor(ROUNDS_HELD * round_s / run_s)))


# An outcome is written quietly (it wakes no leader) only after a job this short: the leader would
# leave it for a later round anyway (recruiter.domain.lanes, invariant 2; processes.lookahead.HANDOFF_CAP_S).
QUIET_BELOW_S = 0.02
# The field a quiet outcome write sets (to the job's lock token): the leader's doorbell lets it pass.
QUIET = "quiet"


def quiet_outcome(batching: bool, next_held: bool, ran_s: float | None) -> bool:
    """Whether a worker writes an outcome *quietly*, so that it wakes no leader: only a worker
    taking batches (``batching``), when the slot goes on at once with a job it holds (``next_held``)
    after a job that ran less than ``QUIET_BELOW_S``. The next outcome of the slot that is not
    quiet (its batch's last) wakes the leader, whose round then applies them all; a quiet one is
    applied all the same by any round, woken or not (the leader's wait between rounds is bounded)."""
    return batching and next_held and ran_s is not None and 0 <= ran_s < QUIET_BELOW_S
