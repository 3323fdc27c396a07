"""Big jobs start as fast as small ones: a job too big to copy into its assignment
wakes its worker all the same (issue 9, part 4).

The worker waits on its change stream; its safety poll is 30 s, so a job that
started only by that poll would miss the 5 s bound below by far.
"""

from __future__ import annotations

from typing import Any

import pytest

from recruiter import Recruiter
from tests.conftest import wait_for
from tests.processes.conftest import Processes
from tests.workables import Carry

PROMPT_S = 5.0
KIB = 1024


@pytest.mark.parametrize("size", [KIB, 100 * KIB, 1024 * KIB], ids=["1KiB", "100KiB", "1MiB"])
def test_a_job_of_any_size_starts_at_once(processes: Processes, db: Any, db_uri: str, size: int) -> None:
    processes.recruiter()
    processes.worker("--id", "w1", "--wake", "change-stream")
    wait_for(lambda: db.roster.find_one({"_id": "w1", "available": True}), message="the worker to register")
    with Recruiter.connect(db_uri) as rec:
        # A first small job: the worker's stream is open and it is idle again when the big one comes.
        first = rec.enqueue(Carry(db_uri, "x"))
        wait_for(lambda: db.archived.find_one({"_id": first}), message="the first job")
        wait_for(lambda: db.roster.find_one({"_id": "w1", "available": True}), message="the worker to be free")
        job_id = rec.enqueue(Carry(db_uri, "x" * size))
    (start,) = wait_for(lambda: list(db.ledger.find({"job": str(job_id), "event": "start"})), timeout_s=PROMPT_S,
                        message=f"a {size}-byte job to start")
    assert start["size"] == size
    doc = wait_for(lambda: db.archived.find_one({"_id": job_id}), message=f"the {size}-byte job to be archived")
    assert doc["why"] == "done"
    assert doc["result"] == size
    assert (doc["last_execution"]["started_at"] - doc["scheduled_at"]).total_seconds() < PROMPT_S
