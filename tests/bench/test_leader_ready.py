"""A bench layout's window starts only once its recruiter leads (bench.capacity.leader, and
bench.scenario.scenario for the designs' runs).

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
import bench.scenario
from bench.capacity import Layout, leader
from bench.scenario import QUICK, Design, scenario
from bench.server import Server
from recruiter.domain import versions

HELD_S = 20.0  # the other holder's lease: longer than the processes take to start and register


def held_elsewhere(monkeypatch: pytest.MonkeyPatch, module: Any) -> None:
    """``module``'s Producer, once made (after the database was dropped, before the processes start),
    writes the recruiter's lease as held by another process for ``HELD_S``."""
    real = module.Producer

    def producer_then_a_lease_held_elsewhere(uri: str, create_indexes: bool) -> Any:
        made = real(uri, create_indexes)
        until = datetime.now(UTC) + timedelta(seconds=HELD_S)
        made.rec.db.metadata.insert_one({"_id": "recruiter", "owner": "someone-else", "expires_at": until,
                                         "renewed_at": datetime.now(UTC), "epoch": 1,
                                         versions.FIELD: {**versions.record(), "owner": "someone-else"}})
        return made

    monkeypatch.setattr(module, "Producer", producer_then_a_lease_held_elsewhere)


def test_a_layout_is_ready_only_once_its_recruiter_has_led(server_uri: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    held_elsewhere(monkeypatch, bench.capacity)
    server = Server(server_uri, "the suite's server", None)
    with leader(server, Layout(1, 1, 0.5, 2.0), tmp_path, []) as lead:
        lease = lead.observer["metadata"].find_one({"_id": "recruiter"})
        assert lease is not None
        assert lease["owner"] != "someone-else", "ready while another process held the recruiter's lease"
        timings = lead.rounds()
        assert timings["rounds"] + timings["idle_rounds"] >= 1


def test_a_designs_run_starts_only_once_its_recruiter_leads(server_uri: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    held_elsewhere(monkeypatch, bench.scenario)
    server = Server(server_uri, "the suite's server", None)
    with scenario(server, Design("recruiter", 1), 1, QUICK, tmp_path) as s:
        lease = s.observer["metadata"].find_one({"_id": "recruiter"})
        assert lease is not None
        assert lease["owner"] != "someone-else", "ready while another process held the recruiter's lease"
