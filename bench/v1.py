"""The seed's v1 design, the baseline: every worker contends for jobs with ``findAndModify``.

``python -m bench.v1 worker --target URI --group G`` runs one worker: it claims
the oldest ready job of its group with one ``find_one_and_update`` (sorted by
``scheduled_at``, backed by an index it creates), runs it, and archives it
itself: an insert into ``archived``, then a delete from ``scheduled``. When
nothing is ready it backs off exactly like the product's worker
(``--poll-from`` doubling to ``--poll-to``), so idle costs compare fairly.

It reads the same job documents the product's producer writes and runs the
same Workable classes. Times come from the server's clock, as in the product.
It keeps no roster and has no cleaner: that is the v1 design.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import traceback
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from pymongo import ASCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError, PyMongoError

from recruiter.domain.durations import parse_duration
from recruiter.domain.workable import workable_from_document
from recruiter.store import monitoring
from recruiter.store.clock import ServerClock
from recruiter.store.connection import first_line, parse_target, sync_client
from recruiter.store.layout import SyncCollections

CLAIM_INDEX = [("group", ASCENDING), ("locked", ASCENDING), ("scheduled_at", ASCENDING)]


class V1Worker:
    def __init__(self, db: Any, clock: ServerClock, group: str, poll_from_s: float, poll_to_s: float) -> None:
        self.c = SyncCollections.of(db)
        self.clock = clock
        self.group = group
        self.poll_from_s = poll_from_s
        self.poll_to_s = poll_to_s
        self.worker_id = f"v1-{socket.gethostname()}-{os.getpid()}"
        self.stopping = threading.Event()

    def prepare(self) -> None:
        # Equality on group and locked, range and sort on scheduled_at: the claim
        # walks the index in order and stops at the first match. (The product's
        # candidates_by_group has the equality fields the other way round.)
        self.c.scheduled.create_index(CLAIM_INDEX, name="v1_claim")

    def claim(self) -> dict[str, Any] | None:
        now = self.clock.now()
        job: dict[str, Any] | None = self.c.scheduled.find_one_and_update(
            {"locked": False, "group": self.group, "scheduled_at": {"$lte": now}},
            {"$set": {"locked": True, "locked_by": self.worker_id, "locked_at": now,
                      "last_execution": {"started_at": now}},
             "$inc": {"attempts": 1}},
            sort=[("scheduled_at", ASCENDING)],
            return_document=ReturnDocument.AFTER,
        )
        return job

    def run_job(self, job: dict[str, Any]) -> None:
        started_at: datetime = job["last_execution"]["started_at"]
        execution: dict[str, Any] = {"scheduled_at": job.get("scheduled_at"), "started_at": started_at,
                                     "worker": self.worker_id, "pid": os.getpid(), "hostname": socket.gethostname()}
        why = "done"
        try:
            workable = workable_from_document(job["workable"])
            getattr(workable, job["workable"].get("method") or "execute")()
        except Exception as exc:  # noqa: BLE001 - a failed job is archived, as DoNotDoItAgain would
            why = "not-scheduled-by-retry-policy"
            execution.update({"class": type(exc).__name__, "message": first_line(exc),
                              "trace": traceback.format_exc()})
        now = self.clock.now()
        execution["ended_at"] = now
        archived = {**job, "locked": False, "done": why == "done", "why": why, "archived_at": now,
                    "last_execution": execution}
        # A retried insert may find its first try already done: the delete is what is left.
        with contextlib.suppress(DuplicateKeyError):
            self.c.archived.insert_one(archived)
        self.c.scheduled.delete_one({"_id": job["_id"]})

    def run(self) -> None:
        backoff = self.poll_from_s
        while not self.stopping.is_set():
            try:
                job = self.claim()
            except PyMongoError as exc:
                print(f"v1: claim failed: {first_line(exc)}", file=sys.stderr)
                job = None
            if job is not None:
                self.run_job(job)
                backoff = self.poll_from_s
                continue
            self.stopping.wait(backoff)
            backoff = min(backoff * 2, self.poll_to_s)


@click.group()
def main() -> None:
    """The v1 baseline of the benchmarks."""


@main.command("worker")
@click.option("--target", required=True, help="MongoDB URI with the database.")
@click.option("--group", default="generic", show_default=True)
@click.option("--poll-from", default="20ms", show_default=True)
@click.option("--poll-to", default="500ms", show_default=True)
@click.option("--ready-file", type=click.Path(path_type=Path), default=None,
              help="Created once the worker is connected and its index exists.")
def worker(target: str, group: str, poll_from: str, poll_to: str, ready_file: Path | None) -> None:
    """Run one v1 worker until SIGTERM (it finishes the job in hand)."""
    parsed = parse_target(target)
    client = sync_client(parsed, app_name="bench-v1-worker", event_listeners=monitoring.listeners())
    try:
        clock = ServerClock()
        clock.calibrate_sync(client)
        w = V1Worker(client[parsed.database], clock, group, parse_duration(poll_from).total_seconds(),
                     parse_duration(poll_to).total_seconds())
        w.prepare()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda _signum, _frame: w.stopping.set())
        if ready_file is not None:
            ready_file.touch()
        w.run()
    finally:
        client.close()


if __name__ == "__main__":
    main()
