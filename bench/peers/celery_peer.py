"""Celery on kombu's MongoDB transport as a series of ``bin/bench``, on a fresh embedded server.

One Celery worker process (``--pool solo``, concurrency 1: one slot, like a recruiter
worker at ``--concurrency 1``), its broker kombu's MongoDB transport polled every
0.1 s (:mod:`bench.peers.celery_app`), on a fresh database. Phases, in order, on the
same worker: enqueue-to-start latency with the worker idle, the idle worker's requests
per second and its resident memory; then no-op tasks over a steady window with a
short queue, then with a long one (:data:`LONG_QUEUE` queued: kombu fetches with ``find_one_and_delete`` sorted
by priority, and the embedded server sorts the whole queue for each fetch). The
bench fills the queue with copies of a message Celery published, one
``insert_many`` per batch (:meth:`CeleryRun.enqueue`). The worker's commands are counted in the stats
file of the recruiter's processes (:class:`bench.procs.Fleet`); its runs are
counted in a file it writes (no request to the server); the bench's enqueuer is
not counted, as for Agenda.

Delivery guarantee (:data:`GUARANTEE`): kombu's MongoDB transport deletes a message
when it fetches it (``find_one_and_delete``), before the task runs. Without
``acks_late`` a worker killed mid-task loses it, and the messages it prefetched
(``worker_prefetch_multiplier`` 4 per slot by default). With ``acks_late`` the
worker only keeps the unacknowledged messages in memory and puts them back when it
shuts down cleanly (kombu's ``restore_unacked_once`` at exit): the transport has no
visibility timeout (``restore_visible`` does nothing), so a SIGKILL, an OOM kill
or a lost machine loses them all the same. At most once on a crash either way.

Where Celery cannot be imported (it is in the ``bench`` and ``dev`` extras, not the
core dependencies), the series is skipped with one line (:func:`missing`).
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from bench import steady
from bench.peers import kill as killing
from bench.procs import Fleet
from bench.scenario import Sizes, backlog_bounds, window_figures
from bench.server import running_server
from bench.stats import percentiles

LONG_QUEUE = 2000
LONG_QUEUE_QUICK = 500  # a smoke test: on a busy machine a fetch from 2 000 took 0.6 s, too few in a window
PREFETCH = 4  # Celery's worker_prefetch_multiplier (default 4) x concurrency 1: messages one worker holds
START_WAIT_S = 60.0
LATENCY_WAIT_S = 20.0
GUARANTEE = ("at most once on a crash: a message is deleted when fetched; acks_late only restores unacked "
             "messages on a clean shutdown (no visibility timeout on this transport)")
WORKER_ARGS = ["-m", "celery", "-A", "bench.peers.celery_app", "worker", "--pool", "solo", "--concurrency", "1",
               "--queues", "bench", "--without-gossip", "--without-mingle", "--without-heartbeat",
               "--loglevel", "WARNING"]


def missing() -> str | None:
    """Why the Celery series cannot run here (Celery or kombu's MongoDB transport not importable), or None."""
    try:
        import celery  # noqa: F401
        import kombu.transport.mongodb  # noqa: F401
    except ImportError as exc:
        return f"celery cannot be imported ({exc}); install the extra: pip install -e '.[bench]'"
    return None


def versions() -> dict[str, str]:
    out = {}
    for package in ("celery", "kombu", "pymongo"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "?"
    return out


def copies(template: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """``count`` copies of a message kombu stored (``template``), each with its own task id and delivery tag."""
    payload = json.loads(template["payload"])
    task_id, tag = payload["headers"]["id"], payload["properties"]["delivery_tag"]
    out = []
    for _ in range(count):
        new_id, new_tag = str(uuid.uuid4()), str(uuid.uuid4())
        out.append({"payload": template["payload"].replace(task_id, new_id).replace(tag, new_tag),
                    "queue": template["queue"], "priority": template["priority"]})
    return out


@dataclass
class CeleryRun:
    """One Celery worker on a fresh database, and the bench's sender."""

    fleet: Fleet
    runs_path: Path
    messages: Any  # kombu's messages collection, on the bench's own (uncounted) client
    template: dict[str, Any]  # a no-op task's message as kombu stored it
    publish: Callable[[str, tuple[Any, ...]], None]  # one task through Celery (send_task)

    def _runs(self) -> dict[str, Any]:
        try:
            return json.loads(self.runs_path.read_text())  # type: ignore[no-any-return]
        except (OSError, ValueError):
            return {"runs": 0, "latency_ms": []}

    def runs(self) -> int:
        return int(self._runs()["runs"])

    def enqueue(self, count: int) -> None:
        """``count`` no-op tasks in one ``insert_many``: copies of a message Celery published (Celery has
        no batch publish on this transport; the recruiter's bench enqueues with one insert per batch too)."""
        self.messages.insert_many(copies(self.template, count), ordered=False)

    def wait(self, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            self.fleet.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"celery: timed out after {timeout_s:.0f}s waiting for {what}")
            time.sleep(0.02)

    def throughput(self, queued: int | None, sizes: Sizes) -> dict[str, Any]:
        """No-op tasks per second over a steady window, the queue kept short or about ``queued`` long."""
        low, high = backlog_bounds("noop", 1, 1 + PREFETCH) if queued is None else (queued, queued + 50)
        feed = steady.Feed(enqueue=self.enqueue, archived=self.runs, flush=self.fleet.flush,
                           check=self.fleet.check_alive, what="celery noop")
        return window_figures(steady.measure(feed, steady.Plan(low, high, sizes.warm_up_s, sizes.window_s),
                                             drain=False))

    def latency(self, sizes: Sizes) -> dict[str, Any]:
        """Enqueue-to-start of one task at a time with the worker idle (both ends on this machine's clock)."""
        lo, hi = sizes.latency_gap_s
        for i in range(sizes.latency_samples):
            time.sleep(random.uniform(lo, hi))
            self.publish("latency", (time.time(),))

            def started(done: int = i + 1) -> bool:
                return len(self._runs()["latency_ms"]) >= done

            self.wait(started, LATENCY_WAIT_S, "a latency task")
        values = [float(v) for v in self._runs()["latency_ms"]]
        return {**percentiles(values), "values_ms": values}

    def idle(self, sizes: Sizes) -> dict[str, Any]:
        a, b, seconds = self.fleet.idle_window(sizes.idle_settle_s, sizes.idle_window_s)
        return {"seconds": seconds,
                "worker_requests_per_s": (b["worker"]["round_trips"] - a["worker"]["round_trips"]) / seconds}

    def memory(self) -> dict[str, Any]:
        rss = self.fleet.procs[0].rss_kib()
        return {"worker_rss_kib": rss, "worker_rss_kib_mean": rss}


@contextmanager
def celery_run(uri: str, work_dir: Path) -> Iterator[CeleryRun]:
    """A Celery worker on ``uri`` (a fresh database), and a sender of tasks on its own connection."""
    from bench.peers import celery_app  # Celery is imported only where it runs (missing() said it can)

    client: MongoClient[Any] = MongoClient(uri)
    db = client.get_default_database()
    client.drop_database(db.name)
    work_dir.mkdir()
    runs_path = work_dir / "celery-runs.json"
    fleet = Fleet(uri, work_dir)
    connection = celery_app.app.connection_for_write(uri)
    try:
        producer = connection.Producer()

        def publish(name: str, args: tuple[Any, ...]) -> None:
            celery_app.app.send_task(name, args=args, producer=producer)

        publish("noop", ())  # its message is the template of the batches; the worker runs it first
        template = db["messages"].find_one({"queue": celery_app.QUEUE})
        if template is None:
            raise RuntimeError("celery: the message Celery published is not in the messages collection")
        fleet.start("worker", WORKER_ARGS, {celery_app.BROKER_ENVVAR: uri, celery_app.RUNS_ENVVAR: str(runs_path)})
        run = CeleryRun(fleet, runs_path, db["messages"], template, publish)
        run.wait(lambda: run.runs() >= 1 and fleet.procs[0].stats_path.exists(), START_WAIT_S,
                 "the worker's first task")
        yield run
    finally:
        fleet.stop()
        connection.release()
        client.drop_database(db.name)
        client.close()


def series(sizes: Sizes, work_dir: Path, say: Callable[[str], None], long_queue: int = LONG_QUEUE) -> dict[str, Any]:
    """Celery's series on a fresh embedded server (or the external one): ``{"settings", "versions",
    "guarantee", "results": {"1": figures}}``; ``noop`` with a short queue, ``noop_long`` with a long one."""
    say(f"bench: celery (kombu's MongoDB transport, one solo worker), short queue and {long_queue} queued...")
    settings = {"pool": "solo", "concurrency": 1, "polling_interval_s": 0.1, "prefetch_multiplier": PREFETCH,
                "acks_late": False, "long_queue": long_queue, "worker_args": WORKER_ARGS[2:]}
    point: dict[str, Any] = {"workers": 1}
    with running_server() as server:
        uri = server.database_uri(f"bench_celery_{os.getpid()}")
        try:
            with celery_run(uri, work_dir / "celery") as run:
                point["latency"] = run.latency(sizes)  # idle first: an empty queue
                point["idle"] = run.idle(sizes)
                point["memory"] = run.memory()
                point["noop"] = run.throughput(None, sizes)
                point["noop_long"] = run.throughput(long_queue, sizes)
        except (RuntimeError, PyMongoError, OSError) as exc:  # a phase that failed: the series goes on
            for kind in ("latency", "noop", "noop_long"):
                point.setdefault(kind, {"error": str(exc)[:500]})
    for kind in ("noop", "noop_long", "latency"):
        if "error" in point.get(kind, {}):
            say(f"bench: celery {kind} failed: {point[kind]['error']}")
    return {"settings": settings, "versions": versions(), "guarantee": GUARANTEE, "results": {"1": point}}


def _both_consuming(fleet: Fleet, runs_paths: list[Path], publish: Callable[[str, tuple[Any, ...]], object]) -> None:
    """Send no-op tasks, one per 0.1 s, until each worker has run one: both are polling the queue."""
    deadline = time.monotonic() + START_WAIT_S

    def ran(path: Path) -> bool:
        try:
            return int(json.loads(path.read_text())["runs"]) >= 1
        except (OSError, ValueError, KeyError):
            return False

    while not all(ran(p) for p in runs_paths):
        fleet.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"celery kill test: the workers did not both run a task in {START_WAIT_S:.0f}s")
        publish("noop", ())
        time.sleep(0.1)


def kill(jobs: int, work_dir: Path) -> dict[str, Any]:
    """The SIGKILL test of :mod:`bench.peers.kill` for Celery, on a fresh server: two solo workers,
    ``jobs`` tasks of :data:`bench.peers.kill.JOB_S` s, worker 0 SIGKILLed mid-task; then a wait
    until the queue is empty and no run is unfinished but the victim's, and the runs counted."""
    from bench.peers import celery_app

    with running_server() as server:
        uri = server.database_uri(f"bench_kill_celery_{os.getpid()}")
        client: MongoClient[Any] = MongoClient(uri, tz_aware=True)
        db = client.get_default_database()
        client.drop_database(db.name)
        work_dir.mkdir()
        fleet = Fleet(uri, work_dir)
        connection = celery_app.app.connection_for_write(uri)
        try:
            producer = connection.Producer()

            def publish(name: str, args: tuple[Any, ...]) -> str:
                return str(celery_app.app.send_task(name, args=args, producer=producer).id)

            paths = [work_dir / f"celery-runs-{i}.json" for i in range(2)]
            workers = [fleet.start("worker", WORKER_ARGS, {celery_app.BROKER_ENVVAR: uri,
                                                           celery_app.RUNS_ENVVAR: str(path)}) for path in paths]
            _both_consuming(fleet, paths, publish)
            job_ids = [publish("recorded_sleep", (uri, killing.JOB_S)) for _ in range(jobs)]
            runs = db[celery_app.RUNS_COLLECTION]
            check = killing._survivors_alive(fleet, workers[0])
            killed_at = killing._kill_mid_job(runs, workers[0], check)
            deadline = time.monotonic() + 60 + jobs * killing.JOB_S
            while db["messages"].count_documents({"queue": celery_app.QUEUE}) or runs.count_documents(
                    {"pid": workers[1].pid, "finished": None}):
                check()
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            finished_at = time.monotonic()
            time.sleep(2 * killing.JOB_S)  # a late run would show here
            out = killing.count_runs(runs, job_ids)
            out["all_finished"] = out["lost"] == 0
            out["recovered_s"] = finished_at - killed_at if out["lost"] == 0 else None
            out["settings"] = {"acks_late": False, "prefetch_multiplier": PREFETCH}
            return out
        finally:
            fleet.stop()
            connection.release()
            client.drop_database(db.name)
            client.close()
