"""Nothing a job hands back kills its worker (issue 22, item 5), with the real CLI processes.

Every kind of hostile job of :mod:`tests.hostile_jobs` runs in a thread, on the event loop
and in a child process (a job with a timeout), beside 30 normal jobs, on two worker processes
of three slots each, and once more on a worker started with ``--isolation process`` (every
job in a child process): results BSON cannot hold, that refer to themselves or nest too deep, lone
surrogates in results, messages, progress and logs, exceptions whose ``__str__`` misbehaves,
``SystemExit``, ``KeyboardInterrupt`` and a job's own ``CancelledError``, 200 MB of output with
and without newlines, ``\\r`` progress. Two jobs kill their process outright (``os._exit``, a
segfault): in a child process they fail their attempt; in a thread they take their worker with
them, and are counted as crashes as before (on workers of their own group).

It shows: no worker exits but those the killers take; every hostile job is archived with its
reason; every normal job is done exactly once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recruiter import Recruiter, Workable
from recruiter.domain.builder import JobBuilder
from tests.conftest import wait_for
from tests.hostile_jobs import EXPECTED, KILLERS, Hostile, HostileAsync
from tests.processes.conftest import Proc, Processes
from tests.workables import Record

HEAVY = {"200mb-lines", "200mb-no-newline", "cr-progress"}
# Heavy output is written once per shape, not in every mode: enough to show each path is linear.
HEAVY_MODES = {"thread": ("200mb-lines", "200mb-no-newline", "cr-progress"), "asyncio": ("200mb-no-newline",),
               "child": ("200mb-lines", "cr-progress"), "isolated": ("200mb-no-newline",)}
MODES = tuple(HEAVY_MODES)
CHILD_TIMEOUT_S = 150


def hostile_jobs(rec: Recruiter) -> dict[Any, tuple[str, str]]:
    """Enqueue every hostile case: job id -> (mode, what)."""
    def build(mode: str, what: str) -> JobBuilder:
        job: Workable = HostileAsync(what) if mode == "asyncio" else Hostile(what)
        builder = job.as_job_of(rec).in_group("isolated" if mode == "isolated" else "hostile")
        return builder.with_timeout(seconds=CHILD_TIMEOUT_S) if mode == "child" else builder

    cases = [(mode, what) for mode in MODES for what in EXPECTED if what not in HEAVY or what in HEAVY_MODES[mode]]
    cases += [(mode, what) for mode in ("child", "isolated") for what in KILLERS]  # only the child dies
    return {build(mode, what).enqueue().id: (mode, what) for mode, what in cases}


def check_archived(doc: dict[str, Any], mode: str, what: str) -> None:
    label = f"{what} ({mode})"
    last = doc.get("last_execution") or {}
    if what in KILLERS:
        assert (doc["why"], last.get("class")) == ("not-scheduled-by-retry-policy", "recruiter.child:ChildDied"), label
        return
    kind, detail = EXPECTED[what]
    if kind == "dropped":
        assert doc["why"] == "done", label
        assert "result" not in doc, label
        assert detail in doc["result_dropped"]["reason"], (label, doc["result_dropped"])
    elif kind == "kept":
        assert (doc["why"], doc.get("result"), doc.get("result_dropped")) == ("done", detail, None), label
    else:
        assert doc["why"] == "not-scheduled-by-retry-policy", (label, doc["why"])
        assert last.get("class") == detail, (label, last.get("class"))
        assert isinstance(last.get("message"), str), label
    if what == "surrogate-logs":
        assert "a print \\ud800 line" in last["logs"], label
    if what.startswith("200mb"):
        assert last["logs_cut"] > 199_000_000, (label, last.get("logs_cut"))
        assert 60_000 < len(last["logs"].encode()) <= 64 * 1024, label


def start_killer_workers(processes: Processes, db: Any, killers: list[Any]) -> list[Proc]:
    """Workers of the ``killers`` group, one at a time, each started once the last one died,
    until both killer jobs are archived (the next worker judges the crash)."""
    started: list[Proc] = []

    def archived_or_restart() -> bool:
        if db.archived.count_documents({"_id": {"$in": killers}}) == len(killers):
            return True
        if all(p.popen.poll() is not None for p in started):
            assert len(started) < 2 * len(killers) + 1, "more killer workers than crashes to judge"
            started.append(processes.worker("--group", "killers", "--id", f"killer-{len(started)}",
                                            "--prefetch", "0"))
        return False

    wait_for(archived_or_restart, timeout_s=150, interval_s=0.5, message="the killer jobs archived")
    return started


def test_hostile_jobs_end_their_attempts_and_never_their_worker(processes: Processes, db: Any,
                                                                db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        hostile = hostile_jobs(rec)
        normal = [Record(db_uri, n=i).as_job_of(rec).in_group("hostile").enqueue().id for i in range(30)]
        killers = [Hostile(what).as_job_of(rec).in_group("killers").at_most_once().enqueue().id for what in KILLERS]
    assert len(hostile) >= 80
    processes.recruiter()
    processes.cleaner()
    workers = [processes.worker("--group", "hostile", "--id", f"main-{i}", "--concurrency", "3") for i in range(2)]
    # Every job of its group in a child process, whether it has a timeout or not.
    workers.append(processes.worker("--group", "isolated", "--id", "isolated", "--concurrency", "2",
                                    "--isolation", "process"))

    killer_workers = start_killer_workers(processes, db, killers)
    everything = [*hostile, *normal]
    wait_for(lambda: db.archived.count_documents({"_id": {"$in": everything}}) == len(everything),
             timeout_s=240, interval_s=0.5, message="every hostile and normal job archived")

    assert [w.popen.poll() for w in workers] == [None, None, None], "no worker of the hostile jobs exited"
    for doc in db.archived.find({"_id": {"$in": list(hostile)}}):
        check_archived(doc, *hostile[doc["_id"]])
    done = list(db.archived.find({"_id": {"$in": normal}}, {"why": 1, "executions": 1}))
    assert sorted(d["why"] for d in done) == ["done"] * 30
    assert all(len(d["executions"]) == 1 for d in done)
    starts = [s["job"] for s in db.ledger.find({"event": "start"})]
    assert sorted(starts) == sorted(str(j) for j in normal), "each normal job ran exactly once"
    for doc in db.archived.find({"_id": {"$in": killers}}):
        assert (doc["why"], doc["crashes"]) == ("crashed", 1), doc["_id"]
    assert sum(p.popen.poll() not in (None, 0) for p in killer_workers) == len(killers), \
        "each killer took exactly its own worker"
    for w in workers:  # hundreds of MB of job output: not kept once the test passed
        Path(w.log_path).write_bytes(b"")
