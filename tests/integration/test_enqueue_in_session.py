"""``enqueue(session=...)``: the refusals, one line each and nothing written (the runs are in
tests/processes/test_placement_processes.py)."""

from __future__ import annotations

from typing import Any

import pytest

from recruiter import JobRefused, Recruiter
from tests.workables import Record


def test_a_unique_job_is_refused_in_the_callers_session(db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec, rec.client.start_session() as s, s.start_transaction():
        for attempt in (lambda: Record(db_uri, 1).as_job_of(rec).unique("k-1").enqueue(session=s),
                        lambda: rec.enqueue_many([Record(db_uri, 2), Record(db_uri, 3).as_job_of(rec).unique("k-3")],
                                                 session=s)):
            with pytest.raises(JobRefused, match="unique key cannot be enqueued in your session") as refused:
                attempt()
            assert "\n" not in str(refused.value)
    assert db.scheduled.count_documents({}) == 0


def test_a_session_that_is_not_one_is_refused(db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        with pytest.raises(JobRefused, match="session must be a pymongo client session, got str"):
            rec.enqueue(Record(db_uri, 1), session="s")  # type: ignore[arg-type]
        session = rec.client.start_session()
        session.end_session()
        with pytest.raises(JobRefused, match="session has ended"):
            rec.enqueue(Record(db_uri, 1), session=session)
    assert db.scheduled.count_documents({}) == 0
