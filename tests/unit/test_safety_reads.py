"""A worker process's safety read: which waiting slots must read their own entry (issue 26)."""

from __future__ import annotations

import asyncio

from bson import ObjectId

from recruiter.processes.worker.inbox import Inbox, Inboxes
from recruiter.processes.worker.slots import needs_read
from recruiter.processes.worker.state import Slot


def test_a_slot_reads_its_entry_only_when_the_safety_read_shows_something_for_it() -> None:
    slot = Slot("w-1")
    mine = {"_id": "w-1", "available": True, "session": slot.session}
    assert needs_read(mine, slot) is False  # free and ours: nothing to do
    assert needs_read(None, slot) is True  # gone (the cleaner removed it): register again
    assert needs_read({**mine, "session": ObjectId()}, slot) is True  # taken over by a restart
    assert needs_read({**mine, "stop_requested": True}, slot) is True
    assert needs_read({**mine, "available": False}, slot) is True  # work no event brought
    assert needs_read({**mine, "available": "yes"}, slot) is True  # malformed: read it, as a poll would
    assert needs_read({"_id": "w-1", "session": slot.session}, slot) is True


def test_only_waiting_slots_are_woken_by_the_safety_read() -> None:
    async def main() -> None:
        waiting, busy = Inbox(must_poll=False, waiting=True), Inbox(must_poll=False, waiting=False)
        inboxes = Inboxes([("a", waiting), ("b", busy)])
        inboxes.swept(["a", "b", "unknown"])
        assert waiting.must_poll
        assert waiting.wake.is_set()
        assert not busy.must_poll
        assert not busy.wake.is_set()

    asyncio.run(main())


def test_a_timeout_while_streaming_asks_for_no_read() -> None:
    async def main() -> None:
        inbox = Inbox(must_poll=False)
        await Inboxes([("a", inbox)]).wait(inbox, 0.01)
        assert inbox.must_poll is False
        assert inbox.waiting is False

    asyncio.run(main())
