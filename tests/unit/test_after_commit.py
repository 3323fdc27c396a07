"""AfterCommit: events held until the block (a transaction) ends well, dropped if it raises."""

from __future__ import annotations

import pytest
import structlog
from structlog.testing import capture_logs

from recruiter.processes.logs import AfterCommit


def names(logs: list[dict[str, object]]) -> list[object]:
    return [e["event"] for e in logs]


def test_events_are_logged_in_order_once_the_block_ends_well() -> None:
    events = AfterCommit(structlog.get_logger("test"))
    with capture_logs() as logs:
        with events.held():
            events.info("first", n=1)
            events.warning("second")
            events.debug("third")
            assert logs == [], "nothing before the commit"
        assert [(e["event"], e["log_level"]) for e in logs] == [("first", "info"), ("second", "warning"),
                                                                 ("third", "debug")]
        assert logs[0]["n"] == 1


def test_events_are_dropped_when_the_block_raises_and_logged_at_once_outside_it() -> None:
    events = AfterCommit(structlog.get_logger("test"))
    with capture_logs() as logs:
        def aborted() -> None:
            with events.held():
                events.info("job.archived")
                raise RuntimeError("aborted")

        with pytest.raises(RuntimeError, match="aborted"):
            aborted()
        assert names(logs) == ["log.dropped"]
        events.info("unheld")
        assert names(logs) == ["log.dropped", "unheld"]
        with events.held(), pytest.raises(RuntimeError, match="reentrant"), events.held():
            pass
