"""The cluster gauges on a real database: ``recruiter.admin.stats.queue`` agrees with ``stats``, and
the collector serves it through its own synchronous client (recruiter.processes.metrics)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from recruiter.admin.stats import queue, stats
from recruiter.processes.embedded import free_port
from recruiter.processes.metrics import DEPTH_STATES, ClusterCollector, QueueReader
from recruiter.store import parse_target
from tests.integration.test_stats import populate


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
