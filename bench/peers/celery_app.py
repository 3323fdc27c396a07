"""The Celery application of the bench's Celery series (:mod:`bench.peers.celery_peer`).

One module for both sides: the bench imports it to send tasks, and its worker
process runs ``python -m celery -A bench.peers.celery_app worker ...``. The
broker is kombu's MongoDB transport at ``BENCH_CELERY_BROKER`` (a ``mongodb://``
URI with the database in its path), polled every 0.1 s (``polling_interval``).

In the worker process, when ``RECRUITER_COMMAND_STATS`` is set, one
:class:`recruiter.store.monitoring.CommandStats` is registered with PyMongo for
every client (kombu makes its own), so the worker's commands are counted in a
stats file of the shape the recruiter's processes write (:class:`bench.procs.Fleet`
reads it on ``SIGUSR2``). The tasks count their runs in memory, and a thread writes
``{"runs": n, "latency_ms": [...]}`` to ``BENCH_CELERY_RUNS`` every 20 ms, so the
bench counts runs without a request to the server.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

from celery import Celery
from pymongo import MongoClient, monitoring

from recruiter.store.monitoring import listeners

BROKER_ENVVAR = "BENCH_CELERY_BROKER"
RUNS_ENVVAR = "BENCH_CELERY_RUNS"
QUEUE = "bench"
POLLING_INTERVAL_S = 0.1
RUNS_WRITE_S = 0.02
RUNS_COLLECTION = "bench_runs"

app = Celery("bench", broker=os.environ.get(BROKER_ENVVAR, "mongodb://127.0.0.1:27017/bench_celery"))
app.conf.update(
    broker_transport_options={"polling_interval": POLLING_INTERVAL_S},
    broker_connection_retry_on_startup=True,
    task_default_queue=QUEUE,
    task_ignore_result=True,
    worker_hijack_root_logger=False,
)

_runs = 0
_latency_ms: list[float] = []
_lock = threading.Lock()


@app.task(name="noop")
def noop() -> None:
    global _runs
    with _lock:
        _runs += 1


@app.task(name="latency")
def latency(enqueued_at: float) -> None:
    """A no-op that records how long after its enqueue (``time.time()`` of the bench) it started."""
    global _runs
    started = time.time()
    with _lock:
        _runs += 1
        _latency_ms.append((started - enqueued_at) * 1000)


@functools.cache
def _runs_collection(uri: str) -> Any:
    client: MongoClient[Any] = MongoClient(uri, tz_aware=True)
    return client.get_default_database()[RUNS_COLLECTION]


@app.task(name="recorded_sleep", bind=True)
def recorded_sleep(self: Any, uri: str, seconds: float) -> None:
    """The SIGKILL test's task: records its run in ``bench_runs`` of ``uri``'s database when it starts
    and when it ends, sleeping between (as :class:`bench.peers.kill.RecordedSleep` does for the recruiter)."""
    runs = _runs_collection(uri)
    run_id = runs.insert_one({"job": self.request.id, "pid": os.getpid(), "started": datetime.now(UTC),
                              "finished": None}).inserted_id
    time.sleep(seconds)
    runs.update_one({"_id": run_id}, {"$set": {"finished": datetime.now(UTC)}})


def _write_runs(path: str) -> None:
    while True:
        with _lock:
            doc: dict[str, Any] = {"runs": _runs, "latency_ms": list(_latency_ms)}
        tmp = f"{path}.tmp"
        try:
            with open(tmp, "w") as out:
                json.dump(doc, out)
            os.replace(tmp, path)
        except OSError:  # the bench's directory went away: nobody to report to
            return
        time.sleep(RUNS_WRITE_S)


def _in_worker() -> bool:
    return "worker" in sys.argv


if _in_worker():
    for listener in listeners():  # RECRUITER_COMMAND_STATS: the worker's commands, counted
        monitoring.register(listener)
    if runs_path := os.environ.get(RUNS_ENVVAR):
        threading.Thread(target=_write_runs, args=(runs_path,), name="bench-runs", daemon=True).start()
