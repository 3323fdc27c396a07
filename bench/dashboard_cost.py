"""What each dashboard page costs the server, and what open tabs polling the overview cost.

``python -m bench.dashboard_cost [--queued 100000] [--archived 1000000] [--tenants 50] [--tabs 5] [--seconds 60]``
fills a database as :mod:`bench.stats_cost` does (waiting jobs over 3 groups and the tenants,
archived jobs over the last two hours, a tenth failed), then requests every page of the dashboard
(:func:`recruiter.web.create_app`, in process, over HTTP) and prints, per page, the round trips,
the documents returned and the time taken. Then ``--tabs`` clients poll the live overview every
``--refresh`` for ``--seconds`` and it prints the reads the server received: the overview's figures
are read once per period whatever the number of tabs.

Uses the embedded server, or ``RECRUITER_TEST_MONGODB_URI``. A million archived documents take a
long while to insert into the embedded server: ``--archived 100000`` gives the shape in minutes.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import click
from pymongo import MongoClient
from starlette.testclient import TestClient

from bench.commands import Commands
from bench.server import running_server
from bench.stats_cost import _fill
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
def main(queued: int, archived: int, tenants: int, tabs: int, seconds: float, refresh: float) -> None:
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
        finally:
            client.close()


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
