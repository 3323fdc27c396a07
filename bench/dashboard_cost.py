"""What each dashboard page costs the server, and what open tabs polling the overview cost.

``python -m bench.dashboard_cost [--queued 100000] [--archived 1000000] [--tenants 50] [--tabs 5] [--seconds 60]
[--groups 1000] [--group-tenants 10]``
fills a database as :mod:`bench.stats_cost` does (waiting jobs over 3 groups and the tenants,
archived jobs over the last two hours, a tenth failed), then requests every page of the dashboard
(:func:`recruiter.web.create_app`, in process, over HTTP) and prints, per page, the round trips,
the documents returned and the time taken. Then ``--tabs`` clients poll the live overview every
``--refresh`` for ``--seconds`` and it prints the reads the server received: the overview's figures
are read once per period whatever the number of tabs.

Then, in a second database, ``--groups`` groups of ``--group-tenants`` tenants each (a waiting job
and an archived one per pair, a tenth of them failed) and a @worker: group per ten groups: it prints
the bytes of one overview refresh (``/overview/live``) and of each view an operator pages through
(the next page, a name filter, a group's tenants, 200 groups a page) beside their round trips and
documents: what every open tab receives every ``--refresh``.

Uses the embedded server, or ``RECRUITER_TEST_MONGODB_URI``. A million archived documents take a
long while to insert into the embedded server: ``--archived 100000`` gives the shape in minutes.
"""

from __future__ import annotations

import random
import threading
import time
from datetime import datetime, timedelta
from typing import Any

import click
from bson import ObjectId
from pymongo import MongoClient
from starlette.testclient import TestClient

from bench.commands import Commands
from bench.jobs import Noop
from bench.server import running_server
from bench.stats_cost import _fill
from recruiter.admin.overview import MAX_PAGE_SIZE
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.domain.naming import WORKER_GROUP_PREFIX
from recruiter.store import ServerClock, ensure_indexes_sync
from recruiter.web import Settings, create_app

PAGES = ("/", "/overview/live", "/jobs", "/jobs?limit=100", "/jobs?state=queued&group=mail&limit=100",
         "/jobs?why=tried-too-many-times&limit=100", "/failures", "/failures?reason=tried-too-many-times",
         "/workers", "/schedules", "/switches", "/audit")


def _poll(client: TestClient, until: float, every_s: float, counts: list[int]) -> None:
    while time.monotonic() < until:
        client.get("/overview/live")
        counts.append(1)
        time.sleep(every_s)


@click.command()
@click.option("--queued", default=100_000, show_default=True)
@click.option("--archived", default=1_000_000, show_default=True)
@click.option("--tenants", default=50, show_default=True)
@click.option("--tabs", default=5, show_default=True, help="Clients polling the live overview at once.")
@click.option("--seconds", default=60.0, show_default=True, help="How long the tabs poll.")
@click.option("--refresh", default=2.0, show_default=True, help="The dashboard's --refresh, in seconds.")
@click.option("--groups", default=1_000, show_default=True, help="Groups of the many-groups database.")
@click.option("--group-tenants", default=10, show_default=True, help="Tenants of each of those groups.")
def main(queued: int, archived: int, tenants: int, tabs: int, seconds: float, refresh: float, groups: int,
         group_tenants: int) -> None:
    rnd = random.Random(1)
    with running_server() as server:
        commands = Commands()
        client: MongoClient[Any] = MongoClient(server.database_uri("bench_dashboard"), tz_aware=True,
                                               event_listeners=[commands])
        try:
            db = client.get_default_database()
            client.drop_database(db.name)
            ensure_indexes_sync(db)
            clock = ServerClock()
            clock.calibrate_sync(client)
            _fill(db, queued, archived, tenants, clock.now(), rnd)
            print(f"server: {server.description}; {db.scheduled.estimated_document_count()} queued, "
                  f"{db.archived.estimated_document_count()} archived")
            app = create_app(db, Settings(refresh_s=refresh))
            with TestClient(app) as web:
                print(f"{'page':<45} {'status':>6} {'round trips':>12} {'documents':>10} {'seconds':>8}")
                for page in PAGES:
                    app.state.dashboard.stats.invalidate()
                    commands.clear()
                    began = time.perf_counter()
                    status = web.get(page).status_code
                    took = time.perf_counter() - began
                    print(f"{page:<45} {status:>6} {len(commands.events):>12} {commands.documents:>10} "
                          f"{took:>8.2f}")
                _tabs(app, web, commands, tabs, seconds, refresh)
            client.drop_database(db.name)
            _many_groups(client, commands, groups, group_tenants, refresh)
        finally:
            client.close()


def _fill_groups(db: Any, groups: int, tenants: int, now: datetime) -> None:
    template = dict(build_job_document(Noop(), JobOptions(), now))
    waiting, archived = [], []
    for g in range(groups):
        for t in range(tenants):
            key = {"group": f"g{g:05d}", "tenant": f"t{t:03d}"}
            waiting.append({**template, "_id": ObjectId(), **key, "scheduled_at": now - timedelta(seconds=g)})
            ended = now - timedelta(seconds=30)
            archived.append({"_id": ObjectId(), **key, "why": "tried-too-many-times" if g % 10 == 0 else "done",
                             "archived_at": ended, "last_execution": {"scheduled_at": ended - timedelta(seconds=2),
                                                                      "started_at": ended - timedelta(seconds=1),
                                                                      "ended_at": ended}})
        if g % 10 == 0:
            waiting.append({**template, "_id": ObjectId(), "group": f"{WORKER_GROUP_PREFIX}w{g}", "scheduled_at": now})
    for docs, into in ((waiting, db.scheduled), (archived, db.archived)):
        for start in range(0, len(docs), 1000):
            into.insert_many(docs[start:start + 1000])


def _many_groups(client: MongoClient[Any], commands: Commands, groups: int, tenants: int, refresh: float) -> None:
    db = client.get_database("bench_dashboard_groups")
    client.drop_database(db.name)
    ensure_indexes_sync(db)
    clock = ServerClock()
    clock.calibrate_sync(client)
    _fill_groups(db, groups, tenants, clock.now())
    app = create_app(db, Settings(refresh_s=refresh))
    pages = ("/overview/live", "/", "/overview/live?page=2", "/overview/live?q=g0001",
             "/overview/live?tenants=g00001", f"/overview/live?size={MAX_PAGE_SIZE}", "/overview/live?workers=1")
    print(f"\n{groups} groups x {tenants} tenants ({groups * tenants} pairs), a @worker: group per ten groups:")
    print(f"{'view':<45} {'status':>6} {'bytes':>9} {'round trips':>12} {'documents':>10} {'seconds':>8}")
    with TestClient(app, base_url="http://127.0.0.1") as web:
        for page in pages:
            app.state.dashboard.stats.invalidate()
            commands.clear()
            began = time.perf_counter()
            response = web.get(page)
            took = time.perf_counter() - began
            print(f"{page:<45} {response.status_code:>6} {len(response.content):>9} {len(commands.events):>12} "
                  f"{commands.documents:>10} {took:>8.2f}")
    client.drop_database(db.name)


def _tabs(app: Any, web: TestClient, commands: Commands, tabs: int, seconds: float, refresh: float) -> None:
    app.state.dashboard.stats.invalidate()
    loads_before = app.state.dashboard.stats.loads
    commands.clear()
    requests: list[int] = []
    until = time.monotonic() + seconds
    threads = [threading.Thread(target=_poll, args=(web, until, refresh, requests)) for _ in range(tabs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    loads = app.state.dashboard.stats.loads - loads_before
    print(f"{tabs} tabs polling /overview/live every {refresh:g}s for {seconds:g}s: {len(requests)} requests, "
          f"{loads} reads of the figures ({loads / seconds * 60:.1f} per minute), {len(commands.events)} round "
          f"trips, {commands.documents} documents returned")


if __name__ == "__main__":
    main()
