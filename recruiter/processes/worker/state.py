"""A worker slot and the state of the job it runs.

Three sources act on a running job: the slot's own loop (it records the
outcome), the heartbeat thread through the event loop (the job was taken
away: halt it), and a forced stop (interrupt it). Each of them moves the job's
:class:`JobState` through :meth:`Running.move`, and :data:`MOVES` is the one
place that says which moves are allowed; a move it does not list is refused
and changes nothing.

Invariant: a job's state only moves along :data:`MOVES`. ``HALTED`` and
``RECORDING`` are final: a halted job's outcome is never recorded, and a
job whose outcome write is under way is neither halted nor interrupted.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from datetime import datetime

from recruiter.domain.adding import WorkflowSteps
from recruiter.domain.events import JobFinished
from recruiter.domain.records import ProgressDoc
from recruiter.processes.worker.capture import LogBuffer
from recruiter.processes.worker.child import ChildAttempt
from recruiter.processes.worker.inbox import Inbox
from recruiter.store.roster import Session, new_session


class JobState(enum.Enum):
    RUNNING = "running"  # the attempt runs; its outcome will be recorded
    INTERRUPTED = "interrupted"  # forced stop: given back without counting the attempt
    HALTED = "halted"  # taken away (cancelled, or the worker lost its entry): nothing may be recorded
    RECORDING = "recording"  # the outcome write is under way: nothing stops it now


MOVES: dict[JobState, frozenset[JobState]] = {
    JobState.RUNNING: frozenset({JobState.INTERRUPTED, JobState.HALTED, JobState.RECORDING}),
    # An interrupted job may still be taken away (then its given-back outcome is discarded too).
    JobState.INTERRUPTED: frozenset({JobState.HALTED, JobState.RECORDING}),
    JobState.HALTED: frozenset(),
    JobState.RECORDING: frozenset(),
}


@dataclass(frozen=True)
class Said:
    """What a running job last said of its progress (``ctx.progress``), and when."""

    value: float | None
    message: str | None
    at: datetime

    def document(self) -> ProgressDoc:
        return {"value": self.value, "message": self.message, "at": self.at}


@dataclass
class Running:
    """The job a slot runs: its attempt's handles and its :class:`JobState`, what it logged so
    far and what it last said of its progress (replaced whole by the job's thread: the
    heartbeat thread reads it without a lock)."""

    job_id: object  # an ObjectId, as assigned
    started_at: datetime
    token: object = None  # the lock token of the attempt
    task: asyncio.Future[object] | None = None
    child: ChildAttempt | None = None
    in_thread: bool = False
    state: JobState = JobState.RUNNING
    logs: LogBuffer = field(default_factory=LogBuffer)
    progress: Said | None = None
    finished: JobFinished | None = None  # the attempt's event, emitted once its outcome is recorded
    steps: WorkflowSteps | None = None  # the job's ctx.workflow: the steps it adds (recruiter.domain.adding)

    def move(self, to: JobState) -> bool:
        """Move to ``to`` if :data:`MOVES` allows it; whether it moved."""
        if to not in MOVES[self.state]:
            return False
        self.state = to
        return True

    @property
    def reported(self) -> bool:
        """Whether heartbeats show this job as the slot's (neither halted nor being recorded)."""
        return self.state in (JobState.RUNNING, JobState.INTERRUPTED)

    def interrupt(self) -> None:
        """Stop the attempt: kill its child process and cancel its task (a thread runs on)."""
        if self.child is not None:
            self.child.kill()
        if self.task is not None:
            self.task.cancel()


class SlotPhase(enum.Enum):
    ACTIVE = "active"  # registered, taking work
    REPLACED = "replaced"  # a process restarted with our id took the roster entry over: the slot stops
    LEAVING = "leaving"  # deleting its own roster entry (a clean stop): a missing entry is expected
    LEFT = "left"  # its roster entry is gone by its own hand: no more heartbeats


@dataclass
class Turn:
    """A lane's job waiting for its runner (:class:`Runner`), then running."""

    lane: Slot
    job_id: object
    token: object  # the job's lock token
    ahead: bool  # handed out ahead: its ``started`` mark is written before it starts
    marked: bool = False  # that mark is known to be written
    go: asyncio.Event = field(default_factory=asyncio.Event)  # set when the runner is this turn's


@dataclass
class Runner:
    """One slot of the process: it runs the jobs of its lanes (its roster entries,
    :mod:`recruiter.domain.lanes`) one at a time, in the order they came.

    The turn at the head of ``queue`` holds the runner; when it leaves, the next one
    goes at once (no round trip in between).
    """

    id: str  # the slot's id, which lane 0 has
    lanes: int = 1
    queue: list[Turn] = field(default_factory=list)

    def enter(self, turn: Turn) -> None:
        """Queue ``turn``: after the others, except that a job not handed out ahead goes
        before the ahead ones still waiting (it was handed to this slot as idle)."""
        at = len(self.queue)
        if not turn.ahead:
            at = next((i for i, t in enumerate(self.queue) if t.ahead and not t.go.is_set()), at)
        self.queue.insert(at, turn)
        if self.queue[0] is turn:
            turn.go.set()

    def leave(self, turn: Turn) -> None:
        if turn in self.queue:
            self.queue.remove(turn)
        if self.queue:
            self.queue[0].go.set()

    def after(self, turn: Turn) -> Turn | None:
        """The turn that goes when ``turn`` leaves, if one waits."""
        waiting = [t for t in self.queue if t is not turn]
        return waiting[0] if waiting else None


@dataclass
class Slot:
    """One roster entry of the process: a slot's lane (lane 0 has the slot's id)."""

    id: str
    session: Session = field(default_factory=new_session)
    running: Running | None = None
    phase: SlotPhase = SlotPhase.ACTIVE
    inbox: Inbox = field(default_factory=Inbox)
    runner: Runner | None = None  # None: its own runner (a slot without look-ahead)
    lane: int = 0

    @property
    def runner_id(self) -> str:
        return self.runner.id if self.runner is not None else self.id

    @property
    def lanes(self) -> int:
        return self.runner.lanes if self.runner is not None else 1

    @property
    def replaced(self) -> bool:
        return self.phase is SlotPhase.REPLACED


@dataclass
class Shutdown:
    """The process's stop, as its slots read it: requested (graceful), then perhaps forced."""

    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    forced: bool = False
    requested_at: float | None = None  # event loop time of the stop request, for the grace period
