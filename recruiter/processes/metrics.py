"""Prometheus metrics of a process (``--metrics-port``): its events as counters, histograms and gauges,
and, on the leading recruiter, the cluster's queue depth and workers read at scrape time.

Each process has a registry of its own (:class:`ProcessMetrics`), never prometheus_client's
global one, served on ``/metrics`` by prometheus_client's HTTP server in a thread of its own.
The names, types and labels are listed in docs/operations/metrics.md.

- :class:`EventMetrics` is a subscriber of the process's :class:`recruiter.processes.events.Bus`:
  it counts what the events say (a job started, finished, archived, a workflow's step among them;
  a round committed; a lease won or lost), in the event loop's thread.
- :class:`ClusterCollector` (the recruiter only) reads :func:`recruiter.admin.stats.queue` and the
  workflows running (:func:`recruiter.admin.workflow_view.running_by_name`) when Prometheus
  scrapes, in the HTTP server's thread, through a small synchronous client of its own
  (:class:`QueueReader`; the process's own client is asyncio's). It answers only while the
  process leads, and keeps a read for :data:`CLUSTER_CACHE_S`, so that however often it is
  scraped it reads the database at most once in that time.

Invariants: a metric never breaks the process. A value an event carries that is not a finite
non-negative number is not observed; a label value that is not a string is ``""``; a failed
cluster read is logged, counted (``recruiter_cluster_read_errors_total``) and serves no cluster
gauges until the next read.

prometheus_client is imported only where metrics are kept (``--metrics-port``): every command
imports this module, and the library would add tens of milliseconds to each one's start.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import structlog

from recruiter.admin.stats import Queue, queue
from recruiter.admin.workflow_view import running_by_name
from recruiter.domain.events import (
    Event,
    JobArchived,
    JobFinished,
    JobStarted,
    LeaseLost,
    LeaseWon,
    RoundAbandoned,
    RoundCommitted,
    RoundIdle,
    WorkerGone,
)
from recruiter.processes.metric_labels import DEFAULT_CAP, LABEL_LIMIT, TenantLabels, WorkflowLabels
from recruiter.store import ServerClock, SyncClient, Target, first_line, sync_client, sync_db, within

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

log = structlog.get_logger("recruiter.metrics")

ROLES = ("recruiter", "worker", "cleaner")
CLUSTER_CACHE_S = 5.0  # a cluster read serves every scrape for this long
CLUSTER_READ_TIMEOUT_S = 5.0  # a cluster read's server calls end within this (the scrape gets no gauges)
RECALIBRATE_S = 60.0  # the cluster reader's server clock, as the process's own (recruiter.processes.runtime)
# Job times: from a few ms to an hour.
JOB_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
                 1800.0, 3600.0, math.inf)
ROUND_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, math.inf)
ROUND_SIZE_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, math.inf)
DEPTH_STATES = ("ready", "delayed", "retrying", "assigned", "running", "paused")
WORKER_STATES = ("idle", "busy", "stopping", "zombies")


@dataclass(frozen=True)
class MetricsConfig:
    """``--metrics-port``, ``--metrics-host``, ``--metrics-tenant-labels`` of one process's ``role``."""

    role: str
    port: int
    host: str = "127.0.0.1"
    tenant_labels: bool = False
    tenant_labels_max: int = DEFAULT_CAP  # tenants labelled by name; the others are "_other" (metric_labels)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"metrics: role {self.role!r} is not one of {', '.join(ROLES)}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--metrics-port {self.port} is not a port (1 to 65535, or 0 for any free one)")
        TenantLabels(self.tenant_labels_max)  # refuses a cap below 1


def _label(value: object) -> str:
    return value[:LABEL_LIMIT] if isinstance(value, str) else ""


def _seconds(value: object) -> float | None:
    """A time an event carries, if it is one (a finite number, at least zero)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


class EventMetrics:
    """The bus subscriber of one process: the metrics its ``role``'s events feed, on ``registry``.

    A worker counts the jobs it started and finished and their wait and run times (by group,
    and by tenant too with ``tenant_labels``); a recruiter and a cleaner the jobs they archived,
    whether they lead and their lease's epoch; a recruiter its rounds; a cleaner the dead workers
    it removed.
    """

    def __init__(self, registry: CollectorRegistry, role: str, *, tenant_labels: bool = False,
                 tenant_labels_max: int = DEFAULT_CAP) -> None:
        self.role = role
        self.leading = False  # read by the cluster collector in the HTTP server's thread
        self.tenant_labels = tenant_labels
        self.tenants = TenantLabels(tenant_labels_max)
        self._handlers: dict[type, Callable[[Any], None]] = {}
        if role == "worker":
            self._worker_metrics(registry)
        else:
            self._leader_metrics(registry)
        if role == "recruiter":
            self._round_metrics(registry)
        if role == "cleaner":
            from prometheus_client import Counter

            self.dead = Counter("recruiter_workers_dead", "Worker roster entries the cleaner removed as dead.",
                                registry=registry)
            self._handlers[WorkerGone] = self._gone

    def __call__(self, event: Event) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    # -- the worker ------------------------------------------------------------------------------

    def _worker_metrics(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Counter, Histogram

        labels = ["group", "tenant"] if self.tenant_labels else ["group"]
        self.started = Counter("recruiter_jobs_started", "Attempts this worker process started.", labels,
                               registry=registry)
        self.finished = Counter("recruiter_jobs_finished", "Attempts this worker process finished, by outcome "
                                "(done, failed, timed-out, snoozed).", [*labels, "outcome"], registry=registry)
        self.run_s = Histogram("recruiter_job_run_seconds", "How long an attempt ran, from its start to its "
                               "outcome.", labels, buckets=JOB_BUCKETS_S, registry=registry)
        self.wait_s = Histogram("recruiter_job_wait_seconds", "How long a job waited to start, from the time it "
                                "was due.", labels, buckets=JOB_BUCKETS_S, registry=registry)
        self._handlers[JobStarted] = self._started
        self._handlers[JobFinished] = self._finished

    def _job_labels(self, e: JobStarted | JobFinished) -> list[str]:
        return [_label(e.group), self.tenants.label(_label(e.tenant))] if self.tenant_labels else [_label(e.group)]

    def _started(self, e: JobStarted) -> None:
        labels = self._job_labels(e)
        self.started.labels(*labels).inc()
        wait = _seconds(e.wait_s)
        if wait is not None:
            self.wait_s.labels(*labels).observe(wait)

    def _finished(self, e: JobFinished) -> None:
        labels = self._job_labels(e)
        self.finished.labels(*labels, _label(e.outcome)).inc()
        run = _seconds(e.duration_s)
        if run is not None:
            self.run_s.labels(*labels).observe(run)

    # -- the leaders (recruiter, cleaner) --------------------------------------------------------

    def _leader_metrics(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Counter, Gauge

        self.archived = Counter("recruiter_jobs_archived", "Jobs this process archived, by reason (why).",
                                ["group", "why"], registry=registry)
        self.steps = Counter("recruiter_workflow_steps_archived", "Workflow steps this process archived, by "
                             "workflow name (capped: later ones are _other) and reason (why).", ["workflow", "why"],
                             registry=registry)
        self.workflows = WorkflowLabels()
        self.leader = Gauge("recruiter_leader", "1 while this process holds its role's lease (leads), 0 on "
                            "standby.", ["role"], registry=registry)
        self.epoch = Gauge("recruiter_lease_epoch", "The epoch (fencing token) of the lease this process last "
                           "won.", ["role"], registry=registry)
        self.leader.labels(self.role).set(0)
        self._handlers[JobArchived] = self._archived
        self._handlers[LeaseWon] = self._won
        self._handlers[LeaseLost] = self._lost

    def _archived(self, e: JobArchived) -> None:
        self.archived.labels(_label(e.group), _label(e.why)).inc()
        if e.workflow is not None:
            self.steps.labels(self.workflows.of(e.workflow), _label(e.why)).inc()

    def _won(self, e: LeaseWon) -> None:
        self.leader.labels(_label(e.role)).set(1)
        if isinstance(e.epoch, int) and not isinstance(e.epoch, bool):
            self.epoch.labels(_label(e.role)).set(e.epoch)
        self.leading = True

    def _lost(self, e: LeaseLost) -> None:
        self.leading = False
        self.leader.labels(_label(e.role)).set(0)

    def _gone(self, e: WorkerGone) -> None:
        if e.reason == "dead":
            self.dead.inc()

    # -- the recruiter's rounds ------------------------------------------------------------------

    def _round_metrics(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Counter, Histogram

        self.round_s = Histogram("recruiter_round_duration_seconds", "How long a committed round took, from its "
                                 "first read to its commit.", buckets=ROUND_BUCKETS_S, registry=registry)
        self.round_size = Histogram("recruiter_round_assigned_jobs", "Jobs assigned by a committed round.",
                                    buckets=ROUND_SIZE_BUCKETS, registry=registry)
        self.idle = Counter("recruiter_rounds_idle", "Rounds that found nothing to write.", registry=registry)
        self.abandoned = Counter("recruiter_rounds_abandoned", "Rounds that failed before committing (a "
                                 "conflict, a lost lease): nothing of them was written.", registry=registry)
        self._handlers[RoundCommitted] = self._round
        self._handlers[RoundIdle] = lambda e: self.idle.inc()
        self._handlers[RoundAbandoned] = lambda e: self.abandoned.inc()

    def _round(self, e: RoundCommitted) -> None:
        took = _seconds(e.duration_s)
        if took is not None:
            self.round_s.observe(took)
        assigned = _seconds(e.assigned)
        if assigned is not None:
            self.round_size.observe(assigned)


# -- the cluster gauges (the leading recruiter) ----------------------------------------------------


class QueueReader:
    """Reads :func:`recruiter.admin.stats.queue` through a synchronous client of its own, opened at the
    first read (the HTTP server's thread may not use the process's asyncio client)."""

    def __init__(self, target: Target, *, timeout_s: float = CLUSTER_READ_TIMEOUT_S) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self._client: SyncClient | None = None
        self._clock = ServerClock()
        self._calibrated_at: float | None = None  # time.monotonic() of the last calibration
        self.workflows = WorkflowLabels()  # the workflow names labelled, for the life of the process

    def __call__(self) -> Queue:
        if self._client is None:
            self._client = sync_client(self.target, app_name="recruiter-metrics",
                                       server_selection_timeout_s=self.timeout_s)
        with within(self.timeout_s):
            if self._calibrated_at is None or time.monotonic() - self._calibrated_at >= RECALIBRATE_S:
                self._clock.calibrate_sync(self._client)
                self._calibrated_at = time.monotonic()
            db = sync_db(self._client, self.target)
            return replace(queue(db, self._clock.now()), workflows=self.workflows.summed(running_by_name(db)))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


@dataclass(frozen=True)
class _Read:
    at: float  # time.monotonic() when it ended
    queue: Queue | None  # None: it failed
    took_s: float


class ClusterCollector:
    """The cluster gauges, read at scrape time while ``leading()``; a read serves for ``cache_s``."""

    def __init__(self, read: Callable[[], Queue], leading: Callable[[], bool], *,
                 cache_s: float = CLUSTER_CACHE_S, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self._leading = leading
        self._cache_s = cache_s
        self._monotonic = monotonic
        self._lock = threading.Lock()  # one read at a time: concurrent scrapes wait for it and share it
        self._last: _Read | None = None
        self.errors = 0

    def describe(self) -> Iterable[Metric]:
        return []  # nothing to read when registered

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        if not self._leading():
            return
        last = self._fresh()
        errors = CounterMetricFamily("recruiter_cluster_read_errors", "Cluster reads (queue depth, workers) that "
                                     "failed; the scrapes they served had no cluster gauges.", value=self.errors)
        yield errors
        took = GaugeMetricFamily("recruiter_cluster_read_seconds", "How long the last cluster read took.",
                                 value=last.took_s)
        yield took
        if last.queue is not None:
            yield from _queue_metrics(last.queue)

    def _fresh(self) -> _Read:
        with self._lock:
            last = self._last
            if last is None or self._monotonic() - last.at >= self._cache_s:
                last = self._last = self._read_now()
            return last

    def _read_now(self) -> _Read:
        began = self._monotonic()
        try:
            q: Queue | None = self._read()
        except Exception as exc:  # noqa: BLE001 - a failed read serves no gauges, never breaks the scrape
            self.errors += 1
            with contextlib.suppress(Exception):
                log.warning("metrics.cluster_read_failed", error=first_line(exc))
            q = None
        ended = self._monotonic()
        return _Read(ended, q, max(0.0, ended - began))


def _queue_metrics(q: Queue) -> Iterator[Metric]:
    from prometheus_client.core import GaugeMetricFamily

    depth = GaugeMetricFamily("recruiter_queue_jobs", "Jobs in the queue by group and state (ready, delayed, "
                              "retrying, assigned, running; paused: those of the ready ones held by a pause).",
                              labels=["group", "state"])
    oldest = GaugeMetricFamily("recruiter_queue_oldest_ready_seconds", "How long the oldest ready job of the group "
                               "has been due (0 when none is ready).", labels=["group"])
    for group, d in q.depth.items():
        for state in DEPTH_STATES:
            depth.add_metric([_label(group), state], getattr(d, state))
        oldest.add_metric([_label(group)], d.oldest_ready_s or 0.0)
    workers = GaugeMetricFamily("recruiter_workers", "Worker slots by state (idle, busy, stopping, zombies: "
                                "heartbeat late).", labels=["state"])
    for state in WORKER_STATES:
        workers.add_metric([state], getattr(q.workers, state))
    running = GaugeMetricFamily("recruiter_workflows_running", "Workflows with a job not ended, by name (capped: "
                                "later ones are _other).", labels=["workflow"])
    for name, n in sorted((q.workflows or {}).items()):
        running.add_metric([name], n)
    return iter((depth, oldest, workers, running))


# -- the process's registry and its server ---------------------------------------------------------


class ProcessMetrics:
    """One process's registry (the process and platform collectors, its :class:`EventMetrics`) and, while
    :meth:`serving`, its ``/metrics`` server."""

    def __init__(self, config: MetricsConfig) -> None:
        from prometheus_client import CollectorRegistry
        from prometheus_client.platform_collector import PlatformCollector
        from prometheus_client.process_collector import ProcessCollector

        self.config = config
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.events = EventMetrics(self.registry, config.role, tenant_labels=config.tenant_labels,
                                   tenant_labels_max=config.tenant_labels_max)

    @contextlib.contextmanager
    def serving(self, target: Target) -> Iterator[None]:
        """Serve ``/metrics`` (a port already in use: ValueError, one line) until the block ends; the
        recruiter's cluster gauges read ``target``."""
        reader: QueueReader | None = None
        if self.config.role == "recruiter":
            reader = QueueReader(target)
            self.registry.register(ClusterCollector(reader, lambda: self.events.leading))
        from prometheus_client import start_http_server

        try:
            server, thread = start_http_server(self.config.port, addr=self.config.host, registry=self.registry)
        except OSError as exc:
            raise ValueError(f"--metrics-port: cannot serve metrics on {self.config.host}:{self.config.port}: "
                             f"{exc.strerror or exc}") from None
        port = server.server_address[1]  # the one the system chose for --metrics-port 0
        log.info("metrics.serving", url=f"http://{self.config.host}:{port}/metrics")
        try:
            yield
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)
            if reader is not None:
                reader.close()
