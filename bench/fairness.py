"""What one recruiter round costs the database, by backlog and number of tenants.

    .venv/bin/python -m bench.fairness [--target URI] [--backlogs 100,10000,100000] [--tenants 10,1000]

For each backlog and tenant count it fills a fresh database with that many
ready jobs (tenants take turns; a third are high priority, some are retrying,
some are not due yet), registers ``--workers`` free workers that take any
group, runs one round to settle the cursor, frees the workers, and counts what
the next round sends to the server with a PyMongo command listener: round
trips (commands) and documents read (documents in cursor replies). Without
``--target`` (or ``RECRUITER_TEST_MONGODB_URI``) it starts the embedded server.

The figures are bounded by the workers: once every tenant has more ready jobs
than a round takes, they stay the same however big the backlog.

Each row is measured twice on the same queue: without limits, then with flow control on
(``recruiter.domain.limits``: the group capped and rate-limited, one tenant held by a rate
of 1/m), side by side, so the cost of limits per round is printed beside today's: one more
round trip (the count of locked jobs in capped groups), none per job; the token state rides
in the cursor update. The measured
round is the second of a fresh recruiter, whose first one read the keys of the
queue (``recruiter/store/readahead.py``); the time column includes the setup.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import AsyncMongoClient, MongoClient

from bench.commands import Commands
from bench.jobs import Noop  # never run: the benchmark only assigns
from bench.server import running_server
from recruiter.domain.clock import ManualClock
from recruiter.domain.job import JobOptions, Priority, build_job_document
from recruiter.processes import logs
from recruiter.processes.recruiter import RecruiterConfig, RecruiterProcess
from recruiter.store.connection import parse_target, wait_until_reachable, with_database
from recruiter.store.indexes import ensure_indexes_sync
from recruiter.store.roster import FREED, freed_mark

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def jobs(backlog: int, tenants: int) -> list[dict[str, Any]]:
    docs = []
    for i in range(backlog):
        options = JobOptions(tenant=f"tenant-{i % tenants:05d}", priority=Priority.HIGH if i % 3 == 0 else Priority.LOW,
                             scheduled_at=NOW - timedelta(seconds=backlog - i) + timedelta(seconds=60 * (i % 10 == 9)))
        doc: dict[str, Any] = dict(build_job_document(Noop(), options, NOW - timedelta(days=1)))
        if i % 17 == 0:
            doc.update(status="retrying", attempts=1)
        docs.append(doc)
    return docs


def free_all(db: Any, workers: int) -> None:
    db.roster.delete_many({})
    # Each with the "freed" mark a worker's registration writes (recruiter.store.roster.FREED): the
    # leader, past its first round, reads the entries marked rather than the whole roster.
    db.roster.insert_many([{"_id": f"w{i:03d}", "work_on": ["*"], "available": True, "available_since": NOW,
                            FREED: freed_mark()} for i in range(workers)])
    db.heartbeats.delete_many({})  # alive for the whole run (recruiter.liveness)
    db.heartbeats.insert_many([{"_id": f"w{i:03d}", "last_seen_at": NOW, "fresh_until": NOW + timedelta(days=1)}
                               for i in range(workers)])


async def measure(uri: str, workers: int) -> tuple[int, int, int]:
    """(round trips, documents read, jobs assigned) of one steady round."""
    commands = Commands()
    client: AsyncMongoClient[Any] = AsyncMongoClient(uri, tz_aware=True, event_listeners=[commands])
    try:
        recruiter = RecruiterProcess(client.get_default_database(), ManualClock(NOW), RecruiterConfig(),
                                     owner="bench")
        assert await recruiter.lease.acquire()
        await recruiter.fenced_round()  # loads the cursor, settles the rings
        sync: MongoClient[Any] = MongoClient(uri)
        try:
            free_all(sync.get_default_database(), workers)
        finally:
            sync.close()
        commands.clear()
        report = await recruiter.fenced_round()  # as the leader runs it: fence write and commit included
        return len(commands.events), commands.documents, report.assigned
    finally:
        await client.close()


Row = tuple[int, int, int, int, int, int, int, int, float]
# backlog, tenants; round trips, documents, assigned without limits; the same with limits; seconds

LIMITS = {"_id": "limits", "groups": {"generic": {"max_running": 100_000, "rate": "100000/s", "burst": 1000}},
          "tenants": {"generic": {"tenant-00000": {"rate": "1/m"}}}}


def run(server_uri: str, backlogs: list[int], tenant_counts: list[int], workers: int) -> list[Row]:
    rows: list[Row] = []
    for tenants in tenant_counts:
        for backlog in backlogs:
            started = time.monotonic()
            figures: list[int] = []
            docs = jobs(backlog, tenants)
            for with_limits in (False, True):  # the same queue in two fresh databases
                figures += measure_once(server_uri, docs, workers, with_limits)
            row = (backlog, tenants, *figures, round(time.monotonic() - started, 1))
            rows.append(row)  # type: ignore[arg-type]
            print(f"{backlog:>9,} {tenants:>8,} {figures[0]:>12} {figures[1]:>10} {figures[2]:>9} "
                  f"{figures[3]:>12} {figures[4]:>10} {figures[5]:>9} {figures[3] - figures[0]:>+6} "
                  f"{row[-1]:>8}s", flush=True)
    return rows


def measure_once(server_uri: str, docs: list[dict[str, Any]], workers: int, with_limits: bool) -> tuple[int, int, int]:
    uri = with_database(server_uri, f"bench_{uuid.uuid4().hex[:12]}")
    client: MongoClient[Any] = MongoClient(uri)
    try:
        db = client.get_default_database()
        ensure_indexes_sync(db)
        for start in range(0, len(docs), 10_000):
            db.scheduled.insert_many([dict(d) for d in docs[start:start + 10_000]], ordered=False)
        if with_limits:
            db.metadata.insert_one(LIMITS)
        free_all(db, workers)
        figures = asyncio.run(measure(uri, workers))
        client.drop_database(db.name)
        return figures
    finally:
        client.close()


def numbers(text: str) -> list[int]:
    return [int(n) for n in text.split(",") if n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=os.environ.get("RECRUITER_TEST_MONGODB_URI"))
    parser.add_argument("--backlogs", type=numbers, default=[100, 10_000, 100_000])
    parser.add_argument("--tenants", type=numbers, default=[10, 1_000])
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()
    logs.configure("warning", "console")
    with ExitStack() as stack:
        # --target, or else a throwaway embedded server for this run.
        uri = args.target or stack.enter_context(running_server()).uri
        wait_until_reachable(parse_target(uri), timeout_s=30)
        print(f"one steady recruiter round as the leader runs it (fenced transaction), "
              f"{args.workers} free '*' workers, one group")
        print(f"{'':>18} {'--- without limits ---':>33} {'--- with limits ---':>33}")
        print(f"{'backlog':>9} {'tenants':>8} {'round trips':>12} {'documents':>10} {'assigned':>9} "
              f"{'round trips':>12} {'documents':>10} {'assigned':>9} {'extra':>6} {'time':>9}")
        run(uri, args.backlogs, args.tenants, args.workers)

if __name__ == "__main__":
    main()
