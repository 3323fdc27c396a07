"""Enqueue takes jobs of any size whose lock and archived copy still fit in a document,
and refuses bigger ones in one line (issue 9: big jobs never stop the queue)."""

from __future__ import annotations

from datetime import UTC, datetime

import bson
import pytest

from recruiter.job import MAX_JOB_BYTES, JobOptions, JobRefused, build_job_document
from tests.workables import Carry

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def payload_for(total_bytes: int, ledger_uri: str = "mongodb://x/y") -> str:
    """A payload that makes the whole document of ``Carry(ledger_uri, payload)`` ``total_bytes`` long."""
    base = len(bson.encode(build_job_document(Carry(ledger_uri, ""), JobOptions(), NOW)))
    return "x" * (total_bytes - base)


def test_a_job_at_the_limit_is_taken() -> None:
    doc = build_job_document(Carry("mongodb://x/y", payload_for(MAX_JOB_BYTES)), JobOptions(), NOW)
    assert len(bson.encode(doc)) == MAX_JOB_BYTES


@pytest.mark.parametrize("total", [MAX_JOB_BYTES + 1, 16 * 1024 * 1024 - 600, 20 * 1024 * 1024])
def test_a_job_over_the_limit_is_refused_in_one_line(total: int) -> None:
    with pytest.raises(JobRefused) as refused:
        build_job_document(Carry("mongodb://x/y", payload_for(total)), JobOptions(), NOW)
    message = str(refused.value)
    assert f"would be {total} bytes, over the {MAX_JOB_BYTES} byte limit" in message
    assert "tests.workables:Carry" in message and "\n" not in message
