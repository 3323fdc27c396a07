"""What the recruiter's round does for look-ahead lanes (:mod:`recruiter.domain.lanes`).

It orders a round's free lanes (idle slots first), leaves out the lanes of busy
slots whose jobs are too short to top up, and leaves a lone outcome of such a
slot to the round that applies its next one. To judge "too short" it keeps how
long each slot's last job ran and a moving average of the round's own time.

Invariant: this only chooses among the free lanes a round read and delays an
outcome's apply by at most ``DEFER_LIMIT_S``; every write stays with the round
(:mod:`recruiter.processes.rounds`), conditional as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from recruiter.domain.batching import batch_size, steady_lanes
from recruiter.domain.lanes import depths, holding, lanes_of, run_seconds, runner_of, worth_topping_up
from recruiter.processes.round_plan import RoundPlan
from recruiter.store.layout import Document

# The most a hand-off is taken to last when deciding whether to top up a busy slot.
HANDOFF_CAP_S = 0.02
# The longest a round leaves the outcome of a slot that still holds a job for a later round.
DEFER_LIMIT_S = 0.5
# Slots remembered (their last run time) before starting afresh: only an optimisation.
MAX_REMEMBERED = 10_000


class LookAhead:
    """One leader's view of its slots' job lengths and of its own rounds."""

    def __init__(self) -> None:
        self.last_run_s: dict[object, float] = {}
        self.round_s = 0.0

    def round_took(self, seconds: float) -> None:
        """A committed round took ``seconds`` (a moving average is kept)."""
        self.round_s = seconds if not self.round_s else 0.8 * self.round_s + 0.2 * seconds

    @property
    def handoff_s(self) -> float:
        """About how long a job handed out now takes to reach its slot: the round's time, at most
        ``HANDOFF_CAP_S`` (a round slowed down by a loaded server is mostly its reads, made before
        the decision; and a held job that arrives late only costs its own ``started`` write)."""
        return min(self.round_s, HANDOFF_CAP_S)

    def note_run_times(self, outcomes: Iterable[Document]) -> None:
        """Remember how long each slot's last job ran, from the outcomes a round read."""
        if len(self.last_run_s) > MAX_REMEMBERED:
            self.last_run_s.clear()
        for e in outcomes:
            ran = run_seconds(e["outcome"])
            if ran is not None:
                self.last_run_s[runner_of(e)] = ran

    def worth_topping_up(self, entry: Document) -> bool:
        return worth_topping_up(self.last_run_s.get(runner_of(entry)), self.handoff_s)

    def batch_size(self, entry: Document) -> int:
        """How many jobs ``entry``'s slot may hold after this round (recruiter.domain.batching): its
        steady lanes, more while its jobs are short enough that they last less than a round."""
        return batch_size(self.last_run_s.get(runner_of(entry)), self.round_s, steady_lanes(entry), lanes_of(entry))

    def free_lanes(self, free: list[Document], entries: list[Document],
                   limit: int) -> list[tuple[Document, int]]:
        """The lanes of ``free`` that the round may give work, at most ``limit``, each with its
        depth, in the order they should be served: lanes of idle slots first, then those of busy
        slots whose jobs outlast a hand-off; a lane deeper than its slot's batch size is left out
        (recruiter.domain.batching). ``entries`` are all the round's entries that hold no job."""
        depth = depths(free, entries)
        idle = {runner_of(e) for e in free if depth[e["_id"]] == 0}
        kept = sorted((e for e in free if (runner_of(e) in idle or self.worth_topping_up(e))
                       and depth[e["_id"]] < self.batch_size(e)),
                      key=lambda e: depth[e["_id"]])[:limit]
        return [(e, depth[e["_id"]]) for e in kept]

    def defer_lone_outcomes(self, plan: RoundPlan, entries: list[Document]) -> None:
        """Leave a round's outcomes for a later round when applying them is all it would do and
        each comes from a slot of short jobs that still holds one: that slot records another
        outcome within about a hand-off, and one round then applies both and gives the slot
        work (recruiter.domain.lanes, invariant 2). Never for longer than ``DEFER_LIMIT_S``."""
        if (not plan.outcomes or plan.malformed or plan.stranded
                or (plan.selection is not None and plan.selection.assignments)):
            return
        busy = holding(entries)
        for e in plan.outcomes:
            since = e.get("available_since")
            if (runner_of(e) not in busy or e.get("stopping") or not isinstance(since, datetime)
                    or (plan.now - since).total_seconds() > DEFER_LIMIT_S or self.worth_topping_up(e)):
                return
        plan.outcomes, plan.outcome_jobs = [], {}
