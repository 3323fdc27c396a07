"""Two queues in one database, told apart by their collection prefix (issue 41, "its own names"):
real recruiter and worker processes of each prefix, in the same group, run only the jobs of their
own prefix, and each says at start, in one log line, that the database holds collections that are
not its own."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from recruiter import Recruiter
from tests.conftest import wait_for
from tests.processes.conftest import Processes
from tests.workables import Record

PREFIXES = {"a_": "worker-a", "b_": "worker-b"}


def shared_warnings(log: str) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return [e for e in events if e.get("event") == "database.shared"]


def test_processes_of_two_prefixes_on_one_database_run_only_the_jobs_of_their_own(
        processes: Processes, db: Any, db_uri: str) -> None:
    ids: dict[str, set[Any]] = {}
    for n, prefix in enumerate(PREFIXES):
        with Recruiter.connect(db_uri, prefix=prefix) as rec:
            ids[prefix] = set(rec.enqueue_many(Record(db_uri, n=100 * n + i).as_job_of(rec).in_group("g")
                                               for i in range(20)))
    started = []
    for prefix, worker_id in PREFIXES.items():
        started.append(processes.recruiter("--collection-prefix", prefix))
        started.append(processes.worker("--group", "g", "--id", worker_id, "--collection-prefix", prefix))

    for prefix in PREFIXES:
        wait_for(lambda p=prefix: db[f"{p}archived"].count_documents({}) == 20, timeout_s=90,  # type: ignore[misc]
                 message=f"the 20 jobs of {prefix} archived")

    ran_by = {d["job"]: d["worker"].split("~")[0] for d in db.ledger.find({"event": "start"})}  # slot: id~n
    assert Counter(Counter(d["job"] for d in db.ledger.find({"event": "start"})).values()) == {1: 40}
    for prefix, worker_id in PREFIXES.items():
        archived = list(db[f"{prefix}archived"].find())
        assert {d["_id"] for d in archived} == ids[prefix]
        assert {d["why"] for d in archived} == {"done"}
        assert {ran_by[str(i)] for i in ids[prefix]} == {worker_id}, "only the workers of its prefix ran them"
        assert db[f"{prefix}scheduled"].count_documents({}) == 0
        assert {d["_id"].split("~")[0] for d in db[f"{prefix}roster"].find()} == {worker_id}
    for name in ("scheduled", "archived", "roster", "metadata"):
        assert name not in db.list_collection_names(), f"no unprefixed {name}"

    # Each process warned once at start that the database is shared (the other queue's collections).
    for proc in started:
        warned = shared_warnings(proc.log())
        assert len(warned) == 1, proc.log()[-2000:]
        own = "a_" if "prefix 'a_'" in warned[0]["problem"] else "b_"
        assert f"prefix '{own}'" in warned[0]["problem"]
        assert f"{'b_' if own == 'a_' else 'a_'}archived" in warned[0]["problem"], "names the other queue's"
