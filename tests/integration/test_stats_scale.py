"""``recruiter stats`` on a database of many jobs over 50 tenants (issue 24, "What it must show 1"):
every figure ``Admin.stats()`` returns equals a brute-force count made in Python over the same
documents, and the read's round trips and documents returned are bounded and printed.

The documents are seeded directly, as the store writes them (:mod:`bench.stats_scale`: waiting
jobs ready, delayed, retrying and assigned; archived jobs with their outcomes over the last hour;
workers idle, busy, stopping and zombie; paused names). The issue's size, 100 000 queued and
200 000 archived, takes minutes to seed into the embedded server (over the suite's 5-minute
limit on a loaded 2-CPU machine), so this test runs 5 000 and 20 000 by default, enough for a
sampled window; ``python -m bench.stats_scale`` runs the full size with the same checks, and
``RECRUITER_STATS_SCALE_QUEUED`` / ``RECRUITER_STATS_SCALE_ARCHIVED`` set this test's.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from click.testing import CliRunner

from bench.stats_scale import DEPTH_FIELDS, MAX_ROUND_TRIPS, check, documents_bound, read_stats, seed
from recruiter.cli.main import main

QUEUED = int(os.environ.get("RECRUITER_STATS_SCALE_QUEUED", "5000"))
ARCHIVED = int(os.environ.get("RECRUITER_STATS_SCALE_ARCHIVED", "20000"))
TENANTS = 50


def test_every_figure_equals_a_brute_force_count_at_a_bounded_cost(db: Any, db_uri: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    seeded = seed(db, QUEUED, ARCHIVED, TENANTS)
    read = read_stats(db_uri, seeded.now)
    figures, bad = check(read.stats, seeded)
    assert not bad, bad[:20]
    assert figures > 7_000  # 5 groups x 51 tenants (one is "no tenant") x 28 figures, and the groups
    assert any(w.sampled for g in read.stats.groups for w in g.windows)  # the sample bound was met
    with capsys.disabled():
        print(f"\nstats over {len(seeded.scheduled)} waiting and {len(seeded.archived)} archived jobs, {TENANTS} "
              f"tenants: seeded in {seeded.seconds:.0f} s; admin.stats() took {read.seconds:.2f} s, "
              f"{len(read.trips)} round trips, {read.documents} documents returned; {figures} figures equal the "
              f"brute-force count\nround trips: {read.trips_text()}")
    assert len(read.trips) <= MAX_ROUND_TRIPS, read.trips
    assert read.documents <= documents_bound(TENANTS)

    # The command (on the server's clock: no job is due within a minute of the seeding, so the depth
    # is the same) prints the same depth, and its cost.
    out = CliRunner().invoke(main, ["stats", "--json", "--target", db_uri], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    printed = json.loads(out.stdout)
    depth = {g["group"]: g for g in printed["groups"]}
    for g in read.stats.groups:
        for name in DEPTH_FIELDS:
            assert depth[g.group][name] == getattr(g.depth, name), (g.group, name)
    with capsys.disabled():
        print(f"recruiter stats --json: {printed['cost']['round_trips']} round trips, "
              f"{printed['cost']['documents']} documents returned")
    assert printed["cost"]["round_trips"] <= MAX_ROUND_TRIPS
