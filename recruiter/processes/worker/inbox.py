"""How each slot hears of work: its inbox, filled by the process's poller or its change stream.

The poller (:mod:`recruiter.processes.worker.poller`) and the change stream's callbacks
(:meth:`Inboxes.delivered`, :meth:`Inboxes.swept`, :meth:`Inboxes.stream_opened`) run on the
event loop and only fill inboxes and wake their slots; each slot's loop empties its own inbox.
``idle`` is set while some slot waits for work: the poller reads, and the stream is read, only
then (:class:`recruiter.store.wakeup.RosterWatch`); ``expected`` tells the poller that a slot
just recorded an outcome.

Invariant: a job copy is delivered at most once per lock token (``last_token``),
and an event without a job (e.g. a cancel) drops a copy not started yet, so the
slot reads its entry instead of trusting it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

from recruiter.domain.lanes import is_ahead
from recruiter.domain.records import Raw


@dataclass
class Inbox:
    """One slot's: a job copy an event carried, or a reminder to read its entry."""

    wake: asyncio.Event = field(default_factory=asyncio.Event)
    delivered: Raw | None = None  # a job copy a change stream event carried
    delivered_ahead: object = False  # the entry's ``ahead`` that came with it (recruiter.domain.lanes)
    must_poll: bool = True  # read our entry before waiting again
    last_token: object = None  # lock token of the last job run, so a late event is not run twice
    waiting: bool = False  # waiting for an assignment

    def take(self) -> tuple[object, Raw | None, bool]:
        """The delivered copy, emptied from the inbox, its job id (None if that job ran already),
        and whether it was handed out ahead (:func:`recruiter.domain.lanes.is_ahead`)."""
        job, self.delivered = self.delivered, None
        if job is None or job.get("lock_token") == self.last_token:
            return None, job, False
        return job.get("_id"), job, is_ahead(self.delivered_ahead, job)

    def pending(self, streaming: bool) -> bool:
        """Whether there is something to do before waiting: a copy, or a read the stream asked for."""
        return self.delivered is not None or (streaming and self.must_poll)


class Inboxes:
    """The inboxes of a process's slots, by slot id, and whether any slot is idle."""

    def __init__(self, inboxes: Iterable[tuple[str, Inbox]]) -> None:
        self.by_id = dict(inboxes)
        self.idle = asyncio.Event()  # some slot is waiting for work
        self.expected = asyncio.Event()  # a slot just recorded an outcome: the poller reads fast (worker.poller)

    def delivered(self, slot_id: str, job: Raw | None, ahead: object = False) -> None:
        """A change stream event for ``slot_id``, with the job copy it carried, if any, and the
        entry's ``ahead``."""
        inbox = self.by_id.get(slot_id)
        if inbox is None:
            return
        if isinstance(job, dict) and job.get("lock_token") != inbox.last_token:
            inbox.delivered, inbox.delivered_ahead = job, ahead
        else:
            # No job (e.g. the assignment was cancelled): a copy delivered earlier and
            # not started yet is no longer to be trusted; read the entry instead.
            inbox.delivered = None
            inbox.must_poll = True
        inbox.wake.set()

    def stream_opened(self) -> None:
        """A stream (re)opened: every slot reads its entry once, for what came while none was open."""
        for inbox in self.by_id.values():
            inbox.must_poll = True
            inbox.wake.set()

    def swept(self, slot_ids: Iterable[str]) -> None:
        """The process's safety read found something for these slots: each one waiting reads its entry."""
        for slot_id in slot_ids:
            inbox = self.by_id.get(slot_id)
            if inbox is not None and inbox.waiting:
                inbox.must_poll = True
                inbox.wake.set()

    def expect(self) -> None:
        """A slot recorded an outcome: work is expected soon (the poller's pace is fast)."""
        self.expected.set()

    def wake_all(self) -> None:
        for inbox in self.by_id.values():
            inbox.wake.set()

    async def wait(self, inbox: Inbox, timeout_s: float) -> None:
        """Wait for ``inbox`` to be woken, at most ``timeout_s``. While streaming, a timeout asks
        for no read: the process's safety read (:meth:`swept`) asks the slots that need one."""
        inbox.waiting = True
        self.idle.set()
        try:
            await asyncio.wait_for(inbox.wake.wait(), timeout=timeout_s)
        except TimeoutError:
            pass
        finally:
            inbox.waiting = False
            if not any(i.waiting for i in self.by_id.values()):
                self.idle.clear()
