"""Whether a producer's waits use a change stream, and what they were told about it."""

from __future__ import annotations

from dataclasses import dataclass, field

import structlog

from recruiter.store.connection import first_line
from recruiter.store.following import StreamsRefused

log = structlog.get_logger("recruiter.producer")


@dataclass
class Streams:
    """Whether waits use a change stream: wanted (the producer's ``change_streams``
    option) and not refused by the server. Counts the streams it opened."""

    wanted: bool = True
    refused: str | None = None  # why the server refused, once it has
    opened: int = 0
    _failing: bool = field(default=False, repr=False)

    @property
    def usable(self) -> bool:
        return self.wanted and self.refused is None

    def refuse(self, exc: StreamsRefused) -> None:
        """The server refused to open the stream: for good (remembered: waits poll from now on,
        logged once) or for now (the stream is tried again)."""
        if exc.for_good:
            if self.refused is None:
                self.refused = str(exc)
                log.info("wait.polling", reason=self.refused)
        else:
            self.died(exc)

    def died(self, exc: BaseException) -> None:
        """The stream failed (or could not open, for now): waits poll until it reopens; logged
        once per spell of failures."""
        if not self._failing:
            self._failing = True
            log.warning("wait.stream_failed", error=first_line(exc), then="polling until the stream reopens")

    def recovered(self) -> None:
        self._failing = False
