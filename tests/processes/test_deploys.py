"""A rolling deploy loses nothing (issue 22, item 3): workers of two releases side by side.

The "new release" is a module only one worker can import (``release_two.py``, on its
``PYTHONPATH`` and ``--import-path``); the "old" worker has everything else. A job of
the new class that reaches the old worker is given back unattempted, recorded in the
job's ``refusals``, and never handed to that process again: it runs once, on the new
worker, with one attempt and one execution. Before this, the old worker's import
failure was the attempt's failure, and under the default ``DoNotDoItAgain`` every such
job was archived for good.
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from recruiter import Recruiter
from tests.conftest import REPO, wait_for
from tests.processes.conftest import FAST_WORKER, Proc, Processes


@pytest.fixture
def release_two(tmp_path: Path) -> Iterator[Path]:
    """A directory holding ``release_two.py``, importable by this test and the new worker only."""
    code = tmp_path / "release_two"
    code.mkdir()
    (code / "release_two.py").write_text(textwrap.dedent("""
        from recruiter import Workable


        class NewJob(Workable):
            def __init__(self, n: int) -> None:
                self.n = n

            def execute(self, ctx) -> str:
                return f"{ctx.worker_id}:{self.n}"
    """))
    sys.path.insert(0, str(code))
    yield code
    sys.path.remove(str(code))
    sys.modules.pop("release_two", None)


def enqueue(db_uri: str, count: int) -> list[Any]:
    from release_two import NewJob  # type: ignore[import-not-found]

    with Recruiter.connect(db_uri) as rec:
        return rec.enqueue_many([NewJob(n).as_job_of(rec).in_group("deploy") for n in range(count)])


def old_worker(processes: Processes) -> Proc:
    return processes.worker("--group", "deploy", "--id", "old", "--concurrency", "2")


def new_worker(processes: Processes, code: Path) -> Proc:
    return processes.start("worker", "worker", "start", *FAST_WORKER, "--group", "deploy", "--id", "new",
                           "--concurrency", "2", "--import-path", str(code),
                           env={"PYTHONPATH": os.pathsep.join([str(REPO), str(code)])})


def assert_all_done_once_by_the_new_release(db: Any, ids: list[Any]) -> None:
    docs = list(db.archived.find({"_id": {"$in": ids}}))
    assert len(docs) == len(ids)
    assert Counter(d["why"] for d in docs) == {"done": len(ids)}
    for d in docs:
        assert d["attempts"] == 1, d
        assert [e["outcome"] for e in d["executions"]] == ["done"], d["executions"]
        assert d["result"].startswith("new"), d["result"]  # run by the new worker's slots
        assert all(r["worker"].startswith("old") for r in d.get("refusals", []))
    assert db.scheduled.count_documents({}) == 0


def test_two_releases_side_by_side(processes: Processes, db: Any, db_uri: str, release_two: Path) -> None:
    processes.recruiter()
    old = old_worker(processes)
    new = new_worker(processes, release_two)
    ids = enqueue(db_uri, 50)
    wait_for(lambda: db.archived.count_documents({}) == 50, timeout_s=120, message="the 50 jobs archived")
    assert_all_done_once_by_the_new_release(db, ids)
    assert old.popen.poll() is None
    assert new.popen.poll() is None


def test_the_new_release_starts_after_the_enqueue(processes: Processes, db: Any, db_uri: str,
                                                  release_two: Path) -> None:
    """Measured before the fix: all 30 jobs archived ``malformed`` by the old worker."""
    processes.recruiter()
    old = old_worker(processes)
    ids = enqueue(db_uri, 30)
    wait_for(lambda: db.scheduled.count_documents({"refusals.worker": {"$regex": "^old"}}) >= 1, timeout_s=60,
             message="the old worker giving jobs back")
    new_worker(processes, release_two)
    wait_for(lambda: db.archived.count_documents({}) == 30, timeout_s=120, message="the 30 jobs archived")
    assert_all_done_once_by_the_new_release(db, ids)
    assert old.popen.poll() is None
    assert '"job.given_back"' in old.log()
