"""The skew rule for per-outcome policies (recruiter.domain.dependency_policy): a 0.2.0 (a125777) leader
decides a held job by ``if_failed`` alone. A job whose policy it could decide otherwise is stored
guarded (its own id pending): 0.2.0's round release and its sweep, run here from that release's own
code (in a subprocess, on this database), leave it held; this release's sweep decides it."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from bson import ObjectId

from recruiter.domain.dependencies import HELD_UNTIL
from recruiter.domain.dependency_policy import SKIPPED
from recruiter.domain.edges import INLINE_MAX
from tests.conftest import REPO
from tests.integration.test_dependencies import sweep
from tests.integration.test_processes_inproc import START, Harness, run
from tests.workables import Record

RELEASE_0_2_0 = "a125777"

# What a 0.2.0 leader does with held jobs: its round's release of the dependents of an archived
# job, then its sweep's look (recruiter.processes.dependencies.DependencySweep.look, unfenced).
OLD_LEADER = """
import asyncio, sys
from datetime import UTC, datetime
from bson import ObjectId
from pymongo import AsyncMongoClient
import recruiter
from recruiter.processes.dependencies import _pending, _resolve_all
from recruiter.store.dependencies import read_ended, read_held, release_dependents
from recruiter.store.layout import Collections

async def main(uri, ended):
    assert recruiter.__file__.startswith(sys.argv[3]), recruiter.__file__
    client = AsyncMongoClient(uri, tz_aware=True)
    c = Collections.of(client.get_default_database())
    now = datetime.now(UTC)
    await release_dependents(c, ended, now)
    held = await read_held(c, None, 200)
    pending = {i for d in held for i in _pending(d)}
    found = await read_ended(c, list(pending)) if pending else {}
    ready = [d for d in held if not _pending(d) or any(i in found for i in _pending(d))]
    await _resolve_all(c, ready, found, now)
    await client.close()

asyncio.run(main(sys.argv[1], {ObjectId(a.split("=")[0]): a.split("=")[1] for a in sys.argv[4:]}))
"""


@pytest.fixture(scope="session")
def release_0_2_0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exported = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", RELEASE_0_2_0, "recruiter"],
                              capture_output=True, timeout=120, check=False)
    if exported.returncode != 0:
        pytest.skip(f"release 0.2.0 ({RELEASE_0_2_0}) cannot be exported here: a clone with its history is needed")
    root = tmp_path_factory.mktemp("release-0.2.0")
    with tarfile.open(fileobj=BytesIO(exported.stdout)) as tar:
        tar.extractall(root, filter="data")
    return root


def old_leader(source: Path, db_uri: str, ended: dict[ObjectId, str]) -> None:
    done = subprocess.run([sys.executable, "-c", OLD_LEADER, db_uri, "-", str(source),
                           *(f"{k}={v}" for k, v in ended.items())],
                          env={"PYTHONPATH": str(source), "PATH": "/usr/bin:/bin"}, cwd=source, capture_output=True,
                          text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_0_2_0_leader_leaves_a_guarded_job_held_and_this_release_decides_it(
        db_uri: str, release_0_2_0: Path) -> None:
    async def scenario(h: Harness) -> None:
        p = h.producer
        up = await Record(h.db_uri, n=1).as_job_of(p).schedule_in(hours=1).enqueue()
        fine = await Record(h.db_uri, n=2).as_job_of(p).schedule_in(hours=1).enqueue()
        runs = await Record(h.db_uri).as_job_of(p).after(up, on={"failed": "run"}).enqueue()  # 0.2.0: cancel
        skips = await Record(h.db_uri).as_job_of(p).after(up, on={"failed": "skip"}).enqueue()  # 0.2.0: cancel
        plain = await Record(h.db_uri).as_job_of(p).after(up).enqueue()  # not guarded: 0.2.0 decides alike
        later = await Record(h.db_uri).as_job_of(p).after(fine, on={"cancelled": "run"}).enqueue()
        for job_id, why in ((up, "tried-too-many-times"), (fine, "done")):
            doc: Any = await h.job(job_id)
            await h.db.archived.insert_one({**doc, "why": why, "archived_at": START})
            await h.db.scheduled.delete_one({"_id": job_id})

        old_leader(release_0_2_0, h.db_uri, {up: "tried-too-many-times", fine: "done"})
        for job_id in (runs, skips, later):
            held = await h.job(job_id)
            assert held is not None, "a 0.2.0 leader archived a guarded job"
            assert held["scheduled_at"] == HELD_UNTIL, "a 0.2.0 leader released a guarded job"
            assert held["after"]["pending"] == [job_id]  # what it waited for pulled; its guard left
        cancelled = await h.archived(plain)
        assert cancelled is not None
        assert cancelled["why"] == "upstream-failed"

        assert await sweep(h) == 3  # this release's leader
        for job_id in (runs, later):
            released = await h.job(job_id)
            assert released is not None
            assert released["scheduled_at"] == START
        skipped = await h.archived(skips)
        assert skipped is not None
        assert skipped["why"] == SKIPPED

    run(db_uri, scenario)


def test_a_0_2_0_leader_leaves_a_wide_fan_in_stored_with_edges_held_and_this_release_decides_it(
        db_uri: str, release_0_2_0: Path) -> None:
    async def scenario(h: Harness) -> None:
        p = h.producer
        parts = await p.enqueue_many(Record(h.db_uri, n=n).as_job_of(p).schedule_in(hours=1)
                                     for n in range(INLINE_MAX + 20))
        runs = await Record(h.db_uri).as_job_of(p).after(*parts).enqueue()
        crashed = parts[3]
        runs_anyway = await Record(h.db_uri).as_job_of(p).after(*parts, if_failed="run").enqueue()
        ended = {i: "crashed" if i == crashed else "done" for i in parts}
        for job_id, why in ended.items():
            doc: Any = await h.job(job_id)
            await h.db.archived.insert_one({**doc, "why": why, "archived_at": START})
            await h.db.scheduled.delete_one({"_id": job_id})

        old_leader(release_0_2_0, h.db_uri, ended)
        for job_id in (runs, runs_anyway):
            held = await h.job(job_id)
            assert held is not None, "a 0.2.0 leader archived a job stored with edges"
            assert held["scheduled_at"] == HELD_UNTIL, "a 0.2.0 leader released a job stored with edges"
        assert await h.db.dependency_edges.count_documents({"dependent": runs}) == INLINE_MAX + 20  # untouched

        while await sweep(h):  # this release's leader: a front of each one's edges per look
            pass
        archived = await h.archived(runs)
        assert archived is not None
        assert archived["why"] == "upstream-failed"
        assert archived["reason"].startswith(f"job {crashed} it waited for ended crashed")
        released = await h.job(runs_anyway)
        assert released is not None
        assert released["scheduled_at"] == START
        assert released["after"]["ids"] == parts

    run(db_uri, scenario)
