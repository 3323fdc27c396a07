"""The Celery peer of ``bin/bench`` (``bench/peers/celery_peer.py``): its series at tiny sizes, and its
column in the peer table.

A smoke test of the harness, not a measurement: one solo Celery worker on kombu's MongoDB
transport runs no-op tasks from a short and a long queue, its commands counted in its
process and its runs in a file; the peer table shows its figures beside the recruiter's.
Skipped where Celery cannot be imported (the bench then skips its series with one line).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.peers import celery_peer, table
from bench.scenario import QUICK, Sizes
from bench.server import URI_ENVVAR

# Smaller than --quick where it does not matter here: two latency samples, a shorter idle window.
SIZES = Sizes(warm_up_s=0.5, window_s=1.5, latency_samples=2, latency_gap_s=(0.1, 0.2), idle_settle_s=0.3,
              idle_window_s=1.0, raw_ops=QUICK.raw_ops, notify_samples=QUICK.notify_samples)
LONG = 300


@pytest.mark.skipif(celery_peer.missing() is not None, reason=f"the Celery peer: {celery_peer.missing()}")
def test_celery_series_and_its_column(server_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(URI_ENVVAR, server_uri)  # the series' own server: the test's
    said: list[str] = []
    out = celery_peer.series(SIZES, tmp_path, said.append, long_queue=LONG)

    assert said == [f"bench: celery (kombu's MongoDB transport, one solo worker), short queue and {LONG} queued..."]
    assert out["versions"]["celery"].startswith("5.")
    assert out["guarantee"].startswith("at most once on a crash")
    point = out["results"]["1"]
    for kind in ("noop", "noop_long"):
        window = point[kind]
        assert window["jobs"] > 0, kind
        assert window["min_outstanding"] > 0, kind  # tasks waited through the window
        # kombu's fetches, counted in the worker: one findAndModify per task at least
        assert window["commands"]["worker"]["@findAndModify:messages"] >= window["jobs"] - 1, kind
    assert point["noop_long"]["min_outstanding"] >= LONG - 50  # the long queue stayed long
    assert point["latency"]["samples"] == 2
    assert 0 < point["latency"]["p50_ms"] <= point["latency"]["p95_ms"]
    assert point["idle"]["worker_requests_per_s"] > 0  # it polls
    assert point["memory"]["worker_rss_kib"] > 0

    doc = {"meta": {"workers": [1]}, "results": {"recruiter": {}},
           "peers": {"design": "recruiter", "series": {"celery": out}, "kill": {}, "agenda_skipped": "not run here"}}
    text = table.table(doc, "recruiter")
    assert "Celery 5." in text
    assert "delivery: at most once on a crash" in text
    rows = {line.split("  ")[0]: line.split() for line in text.splitlines()}
    assert "no-op jobs/s, long queue, 1 worker(s)" in rows
    assert rows["no-op jobs/s, 1 worker(s)"][-2] == f"{point['noop']['jobs_per_s']:.1f}"  # celery, then the ratio
