"""The cluster gauges on a real database: ``recruiter.admin.stats.queue`` agrees with ``stats``, and
the collector serves it through its own synchronous client (recruiter.processes.metrics)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry
from pymongo import MongoClient, monitoring

from recruiter import Recruiter, Workflow
from recruiter.admin.stats import queue, stats
from recruiter.admin.workflow_view import list_workflows, running_by_name, stats_by_name
from recruiter.processes.embedded import free_port
from recruiter.processes.metrics import DEPTH_STATES, ClusterCollector, QueueReader
from recruiter.store import ensure_indexes_sync, parse_target
from tests.integration.test_stats import populate
from tests.workables import Record


def test_the_queue_is_the_depth_and_workers_of_stats_without_the_history(db: Any, db_uri: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    populate(db, db_uri, now)
    q = queue(db, now)
    full = stats(db, now)
    assert q.depth == {g.group: g.depth for g in full.groups if g.depth != type(g.depth)()}
    assert q.workers == full.workers
    assert sum(d.ready for d in q.depth.values()) > 0
    assert sum(d.paused for d in q.depth.values()) > 0


def test_the_collector_reads_the_database_through_a_client_of_its_own(db: Any, db_uri: str) -> None:
    # Jobs due between this past "now" and a second later are due when read, whatever the read's time.
    populate(db, db_uri, datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=5))
    reader = QueueReader(parse_target(db_uri))
    registry = CollectorRegistry()
    registry.register(ClusterCollector(reader, lambda: True))
    try:
        get = registry.get_sample_value
        expected = queue(db, datetime.now(UTC))
        for group, depth in expected.depth.items():
            for state in DEPTH_STATES:
                assert get("recruiter_queue_jobs", {"group": group, "state": state}) == getattr(depth, state)
            assert get("recruiter_queue_oldest_ready_seconds", {"group": group}) >= (depth.oldest_ready_s or 0) - 5
        assert get("recruiter_workers", {"state": "busy"}) == expected.workers.busy
        assert get("recruiter_cluster_read_errors_total") == 0
    finally:
        reader.close()


class Commands(monitoring.CommandListener):
    """The collections the commands of a client named."""

    def __init__(self) -> None:
        self.named: list[object] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.named.append(event.command.get(event.command_name))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def test_the_running_workflows_by_name_are_those_of_workflows_stats_read_from_the_queue_alone(
        db: Any, db_uri: str) -> None:
    ensure_indexes_sync(db)
    runs = []
    with Recruiter.connect(db_uri) as rec:
        for name, steps in (("nightly", 2), ("nightly", 1), ("report", 1), ("report", 1)):
            wf = Workflow(name)
            for k in range(steps):
                wf.step(f"s{k}", Record(db_uri, n=k))
            runs.append(wf.enqueue(rec))
        hostile = Record(db_uri).as_job_of(rec).enqueue().id
        bad_id = Record(db_uri).as_job_of(rec).enqueue().id
    ended = db.scheduled.find_one_and_delete({"workflow.id": runs[3].id})  # one report ended: archived
    db.archived.insert_one({**ended, "why": "done"})
    db.scheduled.update_one({"_id": hostile}, {"$set": {"workflow": {"id": "x", "name": "n" * 10_000}}})
    db.scheduled.update_one({"_id": bad_id}, {"$set": {"workflow": {"id": "y", "name": "nightly"}}})

    expected = {k.name: k.running for k in stats_by_name(list_workflows(db, None)[0])}
    assert expected == {"nightly": 2, "report": 1}
    listener = Commands()
    client: MongoClient[Any] = MongoClient(db_uri, event_listeners=[listener])
    try:
        assert running_by_name(client.get_default_database()) == {**expected, "(malformed)": 2}
    finally:
        client.close()
    assert "scheduled" in listener.named
    assert "archived" not in listener.named  # the queue alone: never the archive

    reader = QueueReader(parse_target(db_uri))
    registry = CollectorRegistry()
    registry.register(ClusterCollector(reader, lambda: True))
    try:
        get = registry.get_sample_value
        assert get("recruiter_workflows_running", {"workflow": "nightly"}) == 2
        assert get("recruiter_workflows_running", {"workflow": "report"}) == 1
        assert get("recruiter_workflows_running", {"workflow": "(malformed)"}) == 2
    finally:
        reader.close()


def test_an_unreachable_server_is_a_counted_error_within_the_read_timeout() -> None:
    reader = QueueReader(parse_target(f"mongodb://127.0.0.1:{free_port()}/nothing"), timeout_s=0.5)
    registry = CollectorRegistry()
    registry.register(ClusterCollector(reader, lambda: True))
    began = time.monotonic()
    try:
        assert registry.get_sample_value("recruiter_queue_jobs", {"group": "g", "state": "ready"}) is None
        assert registry.get_sample_value("recruiter_cluster_read_errors_total") == 1
    finally:
        reader.close()
    assert time.monotonic() - began < 5  # two scrapes, one read (cached), bounded by its timeout
