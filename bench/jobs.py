"""The job bodies both designs run: the same Workable classes, imported by name."""

from __future__ import annotations

import time

from recruiter import Workable

SLEEP_S = 0.1
GROUP = "bench"


class Noop(Workable):
    """Does nothing: what is left is the queue's own cost."""

    group = GROUP

    def execute(self) -> None:
        return None


class Sleep100(Workable):
    """Sleeps 100 ms, like a job waiting on a remote service."""

    group = GROUP

    def execute(self) -> None:
        time.sleep(SLEEP_S)


JOB_KINDS: dict[str, type[Workable]] = {"noop": Noop, "sleep100": Sleep100}


class Payload(Workable):
    """Carries a parameter of a chosen size and does nothing with it: a big job's queue cost."""

    group = GROUP

    def __init__(self, payload: str) -> None:
        self.payload = payload

    def execute(self) -> None:
        return None
