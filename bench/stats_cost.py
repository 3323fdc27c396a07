"""What ``recruiter stats`` costs the server as the backlog and the history grow.

``python -m bench.stats_cost [--queued 100000] [--archived 1000000] [--tenants 50] [--steps 4]``
fills a database in steps (waiting jobs over 3 groups and the tenants, archived jobs spread over
the last two hours, a tenth of them in the last hour's...) and after each step reads the stats
once, printing side by side the round trips, the documents returned and the time taken. The
figures that must not grow with the backlog are the round trips and the depth rows; the
documents returned grow with the jobs archived in the last hour, up to the sample bound
(:data:`recruiter.admin.stats.SAMPLE_LIMIT` per slice of the windows).

Uses the embedded server, or ``RECRUITER_TEST_MONGODB_URI``. Filling a million documents into the
embedded server takes a long while: ``--archived 100000`` gives the shape in minutes.
"""

from __future__ import annotations

import random
import time
from datetime import datetime, timedelta
from typing import Any

import click
from bson import ObjectId
from pymongo import MongoClient

from bench.commands import Commands
from bench.jobs import Noop
from bench.server import running_server
from recruiter.admin.stats import stats
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.store import ServerClock, ensure_indexes_sync

GROUPS = ("billing", "mail", "reports")
BATCH = 10_000


def _fill(db: Any, queued: int, archived: int, tenants: int, now: datetime, rnd: random.Random) -> None:
    template = dict(build_job_document(Noop(), JobOptions(), now))
    for start in range(0, queued, BATCH):
        db.scheduled.insert_many([
            {**template, "_id": ObjectId(), "group": rnd.choice(GROUPS), "tenant": f"t{rnd.randrange(tenants)}",
             "scheduled_at": now + timedelta(seconds=rnd.uniform(-3600, 600))}
            for _ in range(min(BATCH, queued - start))])
    for start in range(0, archived, BATCH):
        docs = []
        for _ in range(min(BATCH, archived - start)):
            # A tenth of the history in the last hour, the rest over the hour before.
            at = now - timedelta(seconds=rnd.uniform(0, 3600) if rnd.random() < 0.1 else rnd.uniform(3600, 7200))
            due = at - timedelta(seconds=rnd.uniform(0.1, 10))
            docs.append({"_id": ObjectId(), "group": rnd.choice(GROUPS), "tenant": f"t{rnd.randrange(tenants)}",
                         "why": "done" if rnd.random() < 0.9 else "tried-too-many-times", "archived_at": at,
                         "last_execution": {"scheduled_at": due, "started_at": due + (at - due) / 2,
                                            "ended_at": at}})
        db.archived.insert_many(docs)


@click.command()
@click.option("--queued", default=100_000, show_default=True, help="Waiting jobs at the last step.")
@click.option("--archived", default=1_000_000, show_default=True, help="Archived jobs at the last step.")
@click.option("--tenants", default=50, show_default=True)
@click.option("--steps", default=4, show_default=True, help="Fills in this many equal steps, reading after each.")
def main(queued: int, archived: int, tenants: int, steps: int) -> None:
    rnd = random.Random(1)
    with running_server() as server:
        commands = Commands()
        client: MongoClient[Any] = MongoClient(server.database_uri("bench_stats"), tz_aware=True,
                                               event_listeners=[commands])
        try:
            db = client.get_default_database()
            client.drop_database(db.name)
            ensure_indexes_sync(db)
            clock = ServerClock()
            clock.calibrate_sync(client)
            print(f"server: {server.description}")
            print(f"{'queued':>9} {'archived':>10} {'last hour':>10} {'round trips':>12} {'documents':>10} "
                  f"{'seconds':>8}")
            for _ in range(steps):
                _fill(db, queued // steps, archived // steps, tenants, clock.now(), rnd)
                commands.clear()
                began = time.perf_counter()
                stats(db, clock.now())
                took = time.perf_counter() - began
                trips, docs = len(commands.events), commands.documents
                recent = db.archived.count_documents({"archived_at": {"$gte": clock.now() - timedelta(hours=1)}})
                print(f"{db.scheduled.estimated_document_count():>9} {db.archived.estimated_document_count():>10} "
                      f"{recent:>10} {trips:>12} {docs:>10} {took:>8.2f}")
        finally:
            client.close()


if __name__ == "__main__":
    main()
