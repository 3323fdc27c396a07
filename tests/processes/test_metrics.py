"""``--metrics-port`` on the real processes: what each serves on /metrics agrees with the database.

The job counters equal the archived documents exactly (by outcome and by reason), summed over
the processes that archive; the leading recruiter's depth gauges equal a count of the queue made
document by document; a standby recruiter says it stands by and serves no cluster gauges.
"""

from __future__ import annotations

import json
import socket
import urllib.request
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from recruiter import Recruiter
from recruiter.processes.embedded import free_port
from recruiter.processes.metrics import CLUSTER_CACHE_S, DEPTH_STATES
from tests.conftest import wait_for
from tests.processes.conftest import FAST_CLEANER, FAST_WORKER, Processes
from tests.workables import AlwaysFails, NeverReturns, Record, WaitForRelease, release

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples | None:
    """Every sample of http://127.0.0.1:PORT/metrics, or None if nothing answers there (yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=20) as reply:
            text = reply.read().decode()
    except OSError:
        return None
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def by_labels(samples: Samples, name: str, *keys: str) -> Counter[tuple[str, ...]]:
    """The samples named ``name`` summed by the values of the labels ``keys`` (zeros left out)."""
    out: Counter[tuple[str, ...]] = Counter()
    for (sample, labels), v in samples.items():
        if sample == name and v:
            d = dict(labels)
            out[tuple(d.get(k, "") for k in keys)] += int(v)
    return out


def served(port: int) -> Samples:
    return wait_for(lambda: scrape(port), timeout_s=60, message=f"/metrics on port {port}")


def brute_force_depth(db: Any, now: datetime) -> Counter[tuple[str, str]]:
    """Ready, delayed, retrying and locked jobs by group, looking at each job document."""
    depth: Counter[tuple[str, str]] = Counter()
    for doc in db.scheduled.find({}):
        if doc.get("locked"):
            depth[(doc["group"], "locked")] += 1
        elif doc["scheduled_at"] <= now:
            depth[(doc["group"], "ready")] += 1
        else:
            depth[(doc["group"], "retrying" if doc.get("status") == "retrying" else "delayed")] += 1
    return depth


def test_the_metrics_of_the_three_processes_agree_with_the_database(
        processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        work = [Record(db_uri, n=i).as_job_of(rec).in_group("work") for i in range(4)]
        work += [AlwaysFails(db_uri).as_job_of(rec).in_group("work") for _ in range(2)]
        work += [NeverReturns(db_uri).as_job_of(rec).in_group("work")]  # times out (0.5 s)
        rec.enqueue_many(work)
        # No worker takes these: they stay ready, or delayed.
        rec.enqueue_many(Record(db_uri, n=10 + i).as_job_of(rec).in_group("idle") for i in range(3))
        rec.enqueue_many(Record(db_uri, n=20 + i).as_job_of(rec).in_group("later").schedule_in(hours=1)
                         for i in range(2))
    ports = {name: free_port() for name in ("leader", "standby", "worker", "cleaner")}
    processes.recruiter("--metrics-port", str(ports["leader"]))
    wait_for(lambda: value(scrape(ports["leader"]) or {}, "recruiter_leader", role="recruiter") == 1,
             timeout_s=60, message="the first recruiter leads")
    processes.recruiter("--metrics-port", str(ports["standby"]))
    processes.worker("--group", "work", "--metrics-port", str(ports["worker"]))
    processes.start("cleaner", "cleaner", "start", *FAST_CLEANER,  # the environment variable works too
                    env={"RECRUITER_METRICS_PORT": str(ports["cleaner"])})

    wait_for(lambda: db.archived.count_documents({}) == 7, timeout_s=120, message="7 archived jobs")
    archived_docs = Counter((d["group"], d["why"]) for d in db.archived.find({}))
    assert sum(archived_docs.values()) == 7

    # Each job is archived once, by the recruiter that led or by the cleaner: the sum is exact.
    def archived_counted() -> Counter[tuple[str, ...]]:
        total: Counter[tuple[str, ...]] = Counter()
        for name in ("leader", "standby", "cleaner"):
            total.update(by_labels(served(ports[name]), "recruiter_jobs_archived_total", "group", "why"))
        return total

    wait_for(lambda: sum(archived_counted().values()) >= 7, timeout_s=30, message="7 jobs archived in the metrics")
    assert archived_counted() == Counter({(g, w): n for (g, w), n in archived_docs.items()})

    # The worker's counters: one attempt per job, by outcome; its run and wait times observed once each.
    worker = served(ports["worker"])
    assert by_labels(worker, "recruiter_jobs_finished_total", "group", "outcome") == {
        ("work", "done"): 4, ("work", "failed"): 2, ("work", "timed-out"): 1}
    assert value(worker, "recruiter_jobs_started_total", group="work") == 7
    assert value(worker, "recruiter_job_run_seconds_count", group="work") == 7
    assert value(worker, "recruiter_job_wait_seconds_count", group="work") == 7
    assert (value(worker, "recruiter_job_run_seconds_sum", group="work") or 0) >= 0.5  # the timed-out one
    assert not any(name == "recruiter_leader" for name, _ in worker)

    # Who leads: the first recruiter and the cleaner; the standby says 0 and serves no cluster gauges.
    standby = served(ports["standby"])
    assert value(standby, "recruiter_leader", role="recruiter") == 0
    assert not any(name.startswith("recruiter_queue_") for name, _ in standby)
    wait_for(lambda: value(served(ports["cleaner"]), "recruiter_leader", role="cleaner") == 1, timeout_s=30,
             message="the cleaner leads")
    leader = served(ports["leader"])
    assert value(leader, "recruiter_leader", role="recruiter") == 1
    assert (value(leader, "recruiter_lease_epoch", role="recruiter") or 0) >= 1
    assert value(leader, "recruiter_round_assigned_jobs_sum") == 7  # every job assigned once, by the leader
    assert (value(leader, "recruiter_round_duration_seconds_count") or 0) >= 1

    # The depth gauges against the jobs themselves (the cache may hold a read from before the last job left).
    def depth_agrees() -> bool:
        samples = served(ports["leader"])
        now = datetime.now(UTC)
        expected = brute_force_depth(db, now)
        gauges = {(dict(labels)["group"], dict(labels)["state"]): v for (name, labels), v in samples.items()
                  if name == "recruiter_queue_jobs"}
        locked = Counter({g: gauges.get((g, "assigned"), 0) + gauges.get((g, "running"), 0)
                          for g in ("work", "idle", "later")})
        return (all(gauges.get((g, s), 0) == expected[(g, s)]
                    for g in ("work", "idle", "later") for s in ("ready", "delayed", "retrying"))
                and all(locked[g] == expected[(g, "locked")] for g in locked)
                and all(gauges.get((g, "paused"), 0) == 0 for g in locked)
                and value(samples, "recruiter_workers", state="idle") == 1)

    # A job running now: the leader shows it running, and the worker slot busy.
    with Recruiter.connect(db_uri) as rec:
        WaitForRelease(db_uri, "metrics").as_job_of(rec).in_group("work").enqueue()
    wait_for(lambda: value(served(ports["leader"]), "recruiter_queue_jobs", group="work", state="running") == 1,
             timeout_s=3 * CLUSTER_CACHE_S + 60, message="a running job in the depth gauges")
    assert brute_force_depth(db, datetime.now(UTC))[("work", "locked")] == 1
    assert value(served(ports["leader"]), "recruiter_workers", state="busy") == 1
    release(db_uri, "metrics")
    wait_for(lambda: db.archived.count_documents({}) == 8, timeout_s=60, message="the running job archived")
    wait_for(lambda: sum(archived_counted().values()) == 8, timeout_s=30, message="8 jobs archived in the metrics")
    assert archived_counted()[("work", "done")] == archived_docs[("work", "done")] + 1

    wait_for(depth_agrees, timeout_s=3 * CLUSTER_CACHE_S + 30, message="the depth gauges equal the queue")
    samples = served(ports["leader"])
    assert value(samples, "recruiter_queue_jobs", group="idle", state="ready") == 3
    assert value(samples, "recruiter_queue_jobs", group="later", state="delayed") == 2
    assert {s for (name, labels), _ in samples.items() if name == "recruiter_queue_jobs"
            for k, s in labels if k == "state"} == set(DEPTH_STATES)
    oldest_idle = min(d["scheduled_at"] for d in db.scheduled.find({"group": "idle"}))
    age = value(samples, "recruiter_queue_oldest_ready_seconds", group="idle")
    now_age = (datetime.now(UTC) - oldest_idle).total_seconds()
    assert age is not None
    assert now_age - CLUSTER_CACHE_S - 5 <= age <= now_age + 1
    assert value(samples, "recruiter_queue_oldest_ready_seconds", group="later") == 0
    assert value(samples, "recruiter_cluster_read_errors_total") == 0
    assert datetime.now(UTC) - oldest_idle < timedelta(minutes=10)


def test_a_port_in_use_is_a_one_line_error(processes: Processes) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for name, command in (("worker", ("worker", "start")), ("recruiter", ("start",)),
                              ("cleaner", ("cleaner", "start"))):
            proc = processes.start(name, *command, "--metrics-port", str(port))
            assert proc.wait(60) == 1, proc.log()
            errors = [line for line in proc.log().splitlines() if line.startswith("Error:")]
            assert errors == [f"Error: --metrics-port: cannot serve metrics on 127.0.0.1:{port}: "
                              "Address already in use"], proc.log()
            assert "Traceback" not in proc.log()


def test_port_0_serves_on_a_free_port_it_logs(processes: Processes) -> None:
    proc = processes.start("worker", "worker", "start", "--metrics-port", "0", "--heartbeat-interval", "300ms")

    def url() -> str | None:
        for line in proc.log().splitlines():
            if '"metrics.serving"' in line:
                return str(json.loads(line)["url"])
        return None

    served = wait_for(url, timeout_s=60, message="the metrics.serving line")
    assert not served.endswith(":0/metrics")
    text = urllib.request.urlopen(served, timeout=10).read().decode()
    assert "python_info" in text  # the process's own registry


def test_a_bad_metrics_port_is_a_usage_error(processes: Processes) -> None:
    proc = processes.start("worker", "worker", "start", "--metrics-port", "70000")
    assert proc.wait(60) == 2
    assert "--metrics-port" in proc.log()
    assert "Traceback" not in proc.log()


def test_a_worker_labels_its_first_tenants_and_counts_the_others_as_other(
        processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        rec.enqueue_many(Record(db_uri, n=i).as_job_of(rec).in_group("work").for_tenant(f"t{i}") for i in range(6))
    port = free_port()
    processes.recruiter()
    worker = processes.start("worker", "worker", "start", *FAST_WORKER, "--group", "work", "--metrics-port", str(port),
                             "--metrics-tenant-labels", env={"RECRUITER_METRICS_TENANT_LABELS_MAX": "2"})
    wait_for(lambda: db.archived.count_documents({}) == 6, timeout_s=120, message="6 archived jobs")
    finished = wait_for(lambda: (lambda c: c if sum(c.values()) == 6 else None)(
        by_labels(served(port), "recruiter_jobs_finished_total", "tenant")), timeout_s=30, message="6 finished")
    assert len(finished) == 3  # two tenants by name, and the others together
    assert finished[("_other",)] == 4
    assert all(t.startswith("t") for (t,) in finished if t != "_other")
    assert "metrics.tenant_labels_capped" in worker.log()
