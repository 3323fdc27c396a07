"""A bench layout's window starts only once its recruiter leads (bench.capacity.leader).

The layout used to be ready once its slots had registered: on a loaded machine the recruiter
was still making its indexes and taking its lease through the warm-up and the window, and the
round-reads smoke test saw a window with no job done (``jobs > 0`` failed in CI now and then).
Here the lease is held by someone else for a while after the slots register: the layout must
not be ready before the recruiter has taken it and run a round.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import bench.capacity
from bench.capacity import Layout, leader
from bench.server import Server
from recruiter.domain import versions

HELD_S = 8.0  # the other holder's lease: longer than the slots take to register on a quiet machine


def test_a_layout_is_ready_only_once_its_recruiter_has_led(server_uri: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    real = bench.capacity.Producer

    def producer_then_a_lease_held_elsewhere(uri: str, create_indexes: bool) -> Any:
        made = real(uri, create_indexes)  # after the layout's database was dropped, before its processes start
        until = datetime.now(UTC) + timedelta(seconds=HELD_S)
        made.rec.db.metadata.insert_one({"_id": "recruiter", "owner": "someone-else", "expires_at": until,
                                         "renewed_at": datetime.now(UTC), "epoch": 1,
                                         versions.FIELD: {**versions.record(), "owner": "someone-else"}})
        return made

    monkeypatch.setattr(bench.capacity, "Producer", producer_then_a_lease_held_elsewhere)
    server = Server(server_uri, "the suite's server", None)
    with leader(server, Layout(1, 1, 0.5, 2.0), tmp_path, []) as lead:
        lease = lead.observer["metadata"].find_one({"_id": "recruiter"})
        assert lease is not None
        assert lease["owner"] != "someone-else", "ready while another process held the recruiter's lease"
        timings = lead.rounds()
        assert timings["rounds"] + timings["idle_rounds"] >= 1
