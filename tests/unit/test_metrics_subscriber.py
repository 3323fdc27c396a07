"""The metrics subscriber and the cluster collector, each on a private registry (recruiter.processes.metrics)."""

from __future__ import annotations

import math
import socket
import urllib.request
from datetime import UTC, datetime

import pytest
from bson import ObjectId
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from structlog.testing import capture_logs

from recruiter.admin.stats import Depth, Queue, WorkerFigures
from recruiter.domain.events import (
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
from recruiter.domain.workflow import workflow_name
from recruiter.processes.events import Bus
from recruiter.processes.metric_labels import WorkflowLabels
from recruiter.processes.metrics import ClusterCollector, EventMetrics, MetricsConfig, ProcessMetrics
from recruiter.store import parse_target

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def started(group: object = "g", tenant: str | None = None, wait_s: object = 0.2) -> JobStarted:
    return JobStarted("w", 1, group, tenant, "C", 1, NOW, wait_s)  # type: ignore[arg-type]


def finished(outcome: str = "done", group: object = "g", tenant: str | None = None,
             duration_s: float = 0.3) -> JobFinished:
    return JobFinished("w", 1, group, tenant, "C", 1, outcome, duration_s)  # type: ignore[arg-type]


def test_a_worker_counts_its_attempts_by_group_and_outcome_and_observes_their_times() -> None:
    registry = CollectorRegistry()
    bus = Bus([EventMetrics(registry, "worker")])
    for event in (started(), started(wait_s=None), finished(), finished("failed"), finished("timed-out"),
                  finished("failed", group="h", duration_s=math.nan), started(group=7, wait_s=-1.0)):
        bus.emit(event)
    get = registry.get_sample_value
    assert get("recruiter_jobs_started_total", {"group": "g"}) == 2
    assert get("recruiter_jobs_started_total", {"group": ""}) == 1  # a group that is not a string
    assert get("recruiter_jobs_finished_total", {"group": "g", "outcome": "done"}) == 1
    assert get("recruiter_jobs_finished_total", {"group": "g", "outcome": "failed"}) == 1
    assert get("recruiter_jobs_finished_total", {"group": "g", "outcome": "timed-out"}) == 1
    assert get("recruiter_jobs_finished_total", {"group": "h", "outcome": "failed"}) == 1
    assert get("recruiter_job_wait_seconds_count", {"group": "g"}) == 1  # the one without a wait is not observed
    assert get("recruiter_job_wait_seconds_sum", {"group": "g"}) == pytest.approx(0.2)
    assert get("recruiter_job_wait_seconds_count", {"group": ""}) is None  # -1 s is no wait
    assert get("recruiter_job_run_seconds_count", {"group": "g"}) == 3
    assert get("recruiter_job_run_seconds_sum", {"group": "g"}) == pytest.approx(0.9)
    assert get("recruiter_job_run_seconds_count", {"group": "h"}) is None  # NaN is not observed
    assert get("recruiter_leader", {"role": "worker"}) is None  # a worker leads nothing


def test_tenant_labels_are_opt_in() -> None:
    registry = CollectorRegistry()
    bus = Bus([EventMetrics(registry, "worker", tenant_labels=True)])
    bus.emit(started(tenant="acme"))
    bus.emit(finished(tenant="acme"))
    bus.emit(finished())
    get = registry.get_sample_value
    assert get("recruiter_jobs_started_total", {"group": "g", "tenant": "acme"}) == 1
    assert get("recruiter_jobs_finished_total", {"group": "g", "tenant": "acme", "outcome": "done"}) == 1
    assert get("recruiter_jobs_finished_total", {"group": "g", "tenant": "", "outcome": "done"}) == 1
    assert get("recruiter_job_run_seconds_count", {"group": "g", "tenant": "acme"}) == 1


def test_tenant_labels_are_capped_and_the_others_counted_as_other() -> None:
    registry = CollectorRegistry()
    metrics = EventMetrics(registry, "worker", tenant_labels=True, tenant_labels_max=3)
    bus = Bus([metrics])
    for n in range(1000):
        bus.emit(started(tenant=f"t{n}"))
        bus.emit(finished(tenant=f"t{n}", outcome="failed" if n % 2 else "done"))
    bus.emit(finished(tenant="t1"))  # a tenant named before the cap keeps its label
    get = registry.get_sample_value
    assert [get("recruiter_jobs_started_total", {"group": "g", "tenant": f"t{n}"}) for n in range(4)] == [
        1, 1, 1, None]
    assert get("recruiter_jobs_started_total", {"group": "g", "tenant": "_other"}) == 997
    assert get("recruiter_jobs_finished_total", {"group": "g", "tenant": "t1", "outcome": "done"}) == 1
    done = get("recruiter_jobs_finished_total", {"group": "g", "tenant": "_other", "outcome": "done"})
    failed = get("recruiter_jobs_finished_total", {"group": "g", "tenant": "_other", "outcome": "failed"})
    assert (done, failed) == (498, 499)
    tenants = {s.labels["tenant"] for family in registry.collect() for s in family.samples if "tenant" in s.labels}
    assert tenants == {"t0", "t1", "t2", "_other"}  # 4 values, whatever the number of tenants
    with pytest.raises(ValueError, match="at least 1"):
        MetricsConfig("worker", 9100, tenant_labels=True, tenant_labels_max=0)


def test_a_recruiter_counts_archived_jobs_rounds_and_its_lease() -> None:
    registry = CollectorRegistry()
    metrics = EventMetrics(registry, "recruiter")
    bus = Bus([metrics])
    get = registry.get_sample_value
    assert get("recruiter_leader", {"role": "recruiter"}) == 0  # standing by until it wins the lease
    assert not metrics.leading
    bus.emit(LeaseWon("recruiter", 3, "me"))
    assert get("recruiter_leader", {"role": "recruiter"}) == 1
    assert get("recruiter_lease_epoch", {"role": "recruiter"}) == 3
    assert metrics.leading
    for why in ("done", "done", "not-scheduled-by-retry-policy"):
        bus.emit(JobArchived(1, why, 1, "g", by="recruiter"))
    bus.emit(JobArchived(2, "done", 1, {"not": "a group"}, by="recruiter"))  # type: ignore[arg-type]
    bus.emit(RoundCommitted(assigned=5, applied=2, free_workers=5, duration_s=0.02, phases={}))
    bus.emit(RoundCommitted(assigned=0, applied=1, free_workers=0, duration_s=0.01, phases={}))
    bus.emit(RoundIdle(0.001, {}))
    bus.emit(RoundAbandoned("conflict"))
    bus.emit(LeaseLost("recruiter", 3))
    assert get("recruiter_jobs_archived_total", {"group": "g", "why": "done"}) == 2
    assert get("recruiter_jobs_archived_total", {"group": "g", "why": "not-scheduled-by-retry-policy"}) == 1
    assert get("recruiter_jobs_archived_total", {"group": "", "why": "done"}) == 1
    assert get("recruiter_round_assigned_jobs_sum") == 5
    assert get("recruiter_round_assigned_jobs_count") == 2
    assert get("recruiter_round_assigned_jobs_bucket", {"le": "0.0"}) == 1
    assert get("recruiter_round_duration_seconds_sum") == pytest.approx(0.03)
    assert get("recruiter_rounds_idle_total") == 1
    assert get("recruiter_rounds_abandoned_total") == 1
    assert get("recruiter_leader", {"role": "recruiter"}) == 0
    assert not metrics.leading
    assert get("recruiter_jobs_started_total", {"group": "g"}) is None  # a recruiter runs no job


def test_a_cleaner_counts_what_it_archived_and_the_dead_workers() -> None:
    registry = CollectorRegistry()
    bus = Bus([EventMetrics(registry, "cleaner")])
    bus.emit(LeaseWon("cleaner", 1, "me"))
    bus.emit(JobArchived(1, "crashed-too-many-times", 3, "g", by="cleaner", reason="dead worker"))
    bus.emit(WorkerGone("w1", "dead"))
    bus.emit(WorkerGone("w2", "deregistered"))
    get = registry.get_sample_value
    assert get("recruiter_leader", {"role": "cleaner"}) == 1
    assert get("recruiter_jobs_archived_total", {"group": "g", "why": "crashed-too-many-times"}) == 1
    assert get("recruiter_workers_dead_total") == 1
    assert get("recruiter_round_duration_seconds_count") is None  # the cleaner has no rounds


def step_archived(workflow: object, why: str = "done", by: str = "recruiter") -> JobArchived:
    return JobArchived(1, why, 1, "g", by=by, workflow=workflow)  # type: ignore[arg-type]


def workflow_samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    return {(s.labels["workflow"], s.labels["why"]): s.value for family in registry.collect()
            for s in family.samples if s.name == "recruiter_workflow_steps_archived_total"}


@pytest.mark.parametrize("role", ["recruiter", "cleaner"])
def test_a_leader_counts_the_workflow_steps_it_archived_by_workflow_and_why(role: str) -> None:
    registry = CollectorRegistry()
    bus = Bus([EventMetrics(registry, role)])
    for workflow, why in (("nightly", "done"), ("nightly", "done"), ("nightly", "crashed-too-many-times"),
                          ("report", "not-scheduled-by-retry-policy"), (None, "done")):
        bus.emit(step_archived(workflow, why, by=role))
    assert workflow_samples(registry) == {("nightly", "done"): 2, ("nightly", "crashed-too-many-times"): 1,
                                          ("report", "not-scheduled-by-retry-policy"): 1}  # a plain job: none
    assert registry.get_sample_value("recruiter_jobs_archived_total", {"group": "g", "why": "done"}) == 3


def test_a_hostile_or_malformed_workflow_name_is_cut_or_labelled_malformed_and_never_raises() -> None:
    registry = CollectorRegistry()
    metrics = EventMetrics(registry, "recruiter")  # called directly: an exception would reach the test
    for workflow in ("x" * 100_000, "", 7, {"name": "nightly"}, ["a"], "(malformed)"):
        metrics(step_archived(workflow))
    # As the leaders name a stored tag (recruiter.domain.workflow.workflow_name): never raises.
    for raw in ({"id": ObjectId(), "name": "y" * 500, "step": "s", "deps": [], "kind": "workflow"},
                {"name": "nightly"}, "nightly", 12, [{"x": 1}], {"id": ObjectId(), "name": {"$gt": ""}}):
        metrics(step_archived(workflow_name(raw)))
    assert workflow_samples(registry) == {("x" * 100, "done"): 1, ("(malformed)", "done"): 11}


def test_the_workflow_label_is_capped_and_later_names_counted_as_other() -> None:
    registry = CollectorRegistry()
    bus = Bus([EventMetrics(registry, "recruiter")])
    with capture_logs() as logs:
        for n in range(1000):
            bus.emit(step_archived(f"w{n}", "done" if n % 2 else "failed"))
        bus.emit(step_archived("w1"))  # a name labelled before the cap keeps its label
        bus.emit(step_archived("(malformed)"))  # not capped: always its own label
    samples = workflow_samples(registry)
    names = {name for name, _ in samples}
    assert names == {f"w{n}" for n in range(100)} | {"_other", "(malformed)"}  # 102 values, whatever the number
    assert samples[("w1", "done")] == 2
    assert samples[("_other", "done")] + samples[("_other", "failed")] == 900  # the sums stay exact
    assert sum(samples.values()) == 1002
    capped = [e for e in logs if e["event"] == "metrics.workflow_labels_capped"]
    assert [e["cap"] for e in capped] == [100]  # logged once


def test_the_running_workflows_gauge_caps_its_names_as_the_counter_does() -> None:
    labels = WorkflowLabels()
    running = {f"w{n}": 1 for n in range(150)} | {"(malformed)": 2, "x" * 1000: 1, "w0": 3}  # w100...: _other
    summed = labels.summed(running)
    assert summed == {**{f"w{n}": 1 for n in range(1, 100)}, "w0": 3, "_other": 51, "(malformed)": 2}
    assert sum(summed.values()) == sum(running.values())  # exact
    registry = CollectorRegistry()
    q = Queue(NOW, {}, WorkerFigures(), workflows=summed)
    registry.register(ClusterCollector(lambda: q, lambda: True))
    assert registry.get_sample_value("recruiter_workflows_running", {"workflow": "_other"}) == 51
    assert registry.get_sample_value("recruiter_workflows_running", {"workflow": "w0"}) == 3


class Reads:
    """A cluster read that counts its calls and fails when told to."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail = False
        self.leading = True
        self.t = 100.0

    def __call__(self) -> Queue:
        self.calls += 1
        if self.fail:
            raise RuntimeError("the server went away")
        return Queue(NOW, {"g": Depth(ready=4, delayed=1, paused=1, oldest_ready_s=12.5), "h": Depth(running=2)},
                     WorkerFigures(idle=1, busy=2))


def collector(reads: Reads) -> tuple[CollectorRegistry, ClusterCollector]:
    registry = CollectorRegistry()
    c = ClusterCollector(reads, lambda: reads.leading, cache_s=5.0, monotonic=lambda: reads.t)
    registry.register(c)
    return registry, c


def test_the_cluster_gauges_come_from_one_read_per_cache_period() -> None:
    reads = Reads()
    registry, _ = collector(reads)
    assert reads.calls == 0  # registering reads nothing
    get = registry.get_sample_value
    assert get("recruiter_queue_jobs", {"group": "g", "state": "ready"}) == 4
    assert get("recruiter_queue_jobs", {"group": "g", "state": "paused"}) == 1
    assert get("recruiter_queue_jobs", {"group": "g", "state": "delayed"}) == 1
    assert get("recruiter_queue_jobs", {"group": "h", "state": "running"}) == 2
    assert get("recruiter_queue_jobs", {"group": "h", "state": "ready"}) == 0
    assert get("recruiter_queue_oldest_ready_seconds", {"group": "g"}) == 12.5
    assert get("recruiter_queue_oldest_ready_seconds", {"group": "h"}) == 0
    assert get("recruiter_workers", {"state": "busy"}) == 2
    assert get("recruiter_workers", {"state": "zombies"}) == 0
    assert get("recruiter_cluster_read_errors_total") == 0
    assert reads.calls == 1  # ten scrapes within the cache period: one read
    reads.t += 5.0
    assert get("recruiter_workers", {"state": "idle"}) == 1
    assert reads.calls == 2


def test_a_standby_serves_no_cluster_gauges_and_reads_nothing() -> None:
    reads = Reads()
    reads.leading = False
    registry, _ = collector(reads)
    assert b"recruiter_queue" not in generate_latest(registry)
    assert b"recruiter_cluster" not in generate_latest(registry)
    assert reads.calls == 0


def test_a_failed_read_is_counted_and_serves_no_gauges_until_the_next_read() -> None:
    reads = Reads()
    reads.fail = True
    registry, _ = collector(reads)
    text = generate_latest(registry).decode()  # no exception reaches the scrape
    assert "recruiter_queue_jobs" not in text
    assert registry.get_sample_value("recruiter_cluster_read_errors_total") == 1
    assert reads.calls == 1  # the failure is kept for the cache period too: no read per scrape
    reads.fail = False
    reads.t += 5.0
    assert registry.get_sample_value("recruiter_queue_jobs", {"group": "g", "state": "ready"}) == 4
    assert registry.get_sample_value("recruiter_cluster_read_errors_total") == 1


def test_a_config_refuses_a_bad_role_or_port() -> None:
    with pytest.raises(ValueError, match="role"):
        MetricsConfig("scheduler", 9100)
    with pytest.raises(ValueError, match="not a port"):
        MetricsConfig("worker", 70000)
    with pytest.raises(ValueError, match="not a port"):
        MetricsConfig("worker", -1)
    assert MetricsConfig("worker", 0).port == 0  # any free port, logged


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_process_serves_its_own_registry_and_a_busy_port_is_one_line() -> None:
    port = free_port()
    metrics = ProcessMetrics(MetricsConfig("worker", port))
    target = parse_target("mongodb://127.0.0.1:1/unused")
    metrics.events(started())
    with metrics.serving(target):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        with pytest.raises(ValueError, match="cannot serve metrics") as refused, \
                ProcessMetrics(MetricsConfig("cleaner", port)).serving(target):
            pass  # pragma: no cover - never reached
    assert 'recruiter_jobs_started_total{group="g"} 1.0' in text
    assert "process_resident_memory_bytes" in text or "python_info" in text
    assert REGISTRY.get_sample_value("recruiter_jobs_started_total", {"group": "g"}) is None  # not the global one
    assert str(refused.value) == f"--metrics-port: cannot serve metrics on 127.0.0.1:{port}: Address already in use"
    assert "\n" not in str(refused.value)
