"""What a round read and chose, as values: the plan its writes carry out, and what they did.

:class:`RoundPlan` is filled by the round's reads (:mod:`recruiter.processes.planning`), then
handed to its writes (:meth:`recruiter.processes.rounds.RoundWrites.carry_out`), which note in it
what they did (the jobs handed out, the workers offered, the jobs taken back or quarantined) and
count it in its :class:`RoundReport`.

Invariant: these are plain values, read from no collection and written to none: everything a
round's writes need is in its plan, and what the leader learns of a round it reads from the plan
only once the round's transaction has committed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from bson import ObjectId

from recruiter.domain.documents import Malformed
from recruiter.domain.liveness import Rescue, Stranded
from recruiter.domain.records import Query
from recruiter.domain.selection import Assignment, Selection
from recruiter.domain.start_gate import Gate
from recruiter.store.layout import Document


@dataclass
class RoundReport:
    applied: int = 0
    assigned: int = 0
    free_workers: int = 0
    taken_back: int = 0

    @property
    def busy(self) -> bool:
        return bool(self.applied or self.assigned or self.taken_back)


@dataclass(frozen=True)
class CursorWrite:
    """What a round writes of the fairness cursor: the whole document (``replace``, to replace
    one that was malformed) or the update of what moved."""

    document: Query
    replace: bool


@dataclass
class RoundPlan:
    """What a round read, and chose, before it writes anything; then what its writes did."""

    now: datetime
    # Woken by enqueues alone: reads no roster (but a due check) and answers from known jobs.
    quiet: bool = False
    report: RoundReport = field(default_factory=RoundReport)
    outcomes: list[Document] = field(default_factory=list)  # roster entries holding one
    outcome_jobs: dict[object, Document] = field(default_factory=dict)
    selection: Selection | None = None
    cursor_write: CursorWrite | None = None
    # The candidate documents read, whole: locking one turns it into the copy its worker receives.
    documents: dict[object, Document] = field(default_factory=dict)
    malformed: list[Malformed] = field(default_factory=list)  # jobs to quarantine (recruiter.quarantine)
    stranded: list[Stranded] = field(default_factory=list)
    # Free lanes of busy slots (depth > 0, recruiter.domain.lanes): their jobs are handed out ahead.
    ahead: set[str] = field(default_factory=set)
    # Jobs handed out under a rate limit, and when each starts: their copies say so (recruiter.domain.pacing).
    paced: dict[object, datetime] = field(default_factory=dict)
    # ... and the start gates each takes a token from (recruiter.domain.start_gate).
    gates: dict[object, list[Gate]] = field(default_factory=dict)
    # The ``freed`` marks of the entries read (recruiter.store.roster.FREED): removed by the round.
    freed: list[tuple[object, object]] = field(default_factory=list)
    # Filled by the writes, read once the round has committed.
    handed_out: dict[object, Document] = field(default_factory=dict)  # job id -> the copy its worker got
    # The workers the assignment was sent to (whose jobs it locked): given work, or found no longer
    # available. A worker whose job it could not lock is neither, and is still free.
    offered: set[str] = field(default_factory=set)
    quarantined: list[Malformed] = field(default_factory=list)  # those whose archived copy the round wrote
    taken_back: list[tuple[Stranded, Rescue]] = field(default_factory=list)

    @property
    def idle(self) -> bool:
        """Nothing to write: no outcome, no malformed or stranded job, and no job for a free worker
        (nor a cursor that moved)."""
        return (not self.outcomes and not self.malformed and not self.stranded
                and (self.selection is None or not self.selection.assignments))


@dataclass(frozen=True)
class Locked:
    """A job locked for a worker this round: the assignment, its token, the locked document."""

    assignment: Assignment
    token: ObjectId
    job: Document
