"""Flow control with the real processes: a group limited to 5/s (burst 1) and 3 running at once
beside an unlimited group, on 16 worker slots, with the leading recruiter SIGKILLed mid-run and a
standby taking over. Measured from the ledger of start and end times the jobs write."""

from __future__ import annotations

import json
import signal
import subprocess
from datetime import datetime
from typing import Any

from recruiter import Recruiter
from recruiter.domain.pacing import PACED_AHEAD_S, PACED_START_S
from recruiter.domain.stored_limits import read_limits
from tests.conftest import cli_in_process, wait_for
from tests.processes.conftest import Processes
from tests.processes.test_cli_errors import run_cli
from tests.workables import Record

RATE, BURST, CAP = 5, 1, 3
PAY_JOBS, BULK_JOBS = 60, 150
ON_TIME_S = 0.05  # how much later than PACED_START_S + PACED_AHEAD_S after its hand-out a start is on time


def cli(db_uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``recruiter ARGS --target DB_URI``, in this process: the limits commands only read and write
    the database and print (a Python start-up for each was most of the refusals' tests)."""
    return cli_in_process(*args, "--target", db_uri)


def most_in_a_window(times: list[datetime], window_s: float) -> int:
    """The most starts in any half-open window of ``window_s`` (every window starting at a start)."""
    times = sorted(times)
    best = 0
    for i, t in enumerate(times):
        best = max(best, sum(1 for u in times[i:] if (u - t).total_seconds() < window_s))
    return best


def most_at_once(spans: list[tuple[datetime, datetime]]) -> int:
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1]))
    now = best = 0
    for _, step in edges:
        now += step
        best = max(best, now)
    return best


def test_limits_hold_beside_an_unlimited_group_and_across_a_failover(
        processes: Processes, db: Any, db_uri: str) -> None:
    done = cli(db_uri, "limits", "set", "--group", "pay", "--rate", f"{RATE}/s", "--burst", str(BURST),
               "--max-running", str(CAP))
    assert done.returncode == 0, done.stderr
    assert "limit set: group pay: rate 5/s (burst 1), max_running 3" in done.stdout
    with Recruiter.connect(db_uri) as rec:
        rec.enqueue_many(Record(db_uri, n=i, sleep_s=0.05 + 0.05 * (i % 3)).as_job_of(rec).in_group("pay")
                         for i in range(PAY_JOBS))
        rec.enqueue_many(Record(db_uri, n=i).as_job_of(rec).in_group("bulk") for i in range(BULK_JOBS))

    leader = processes.recruiter()
    wait_for(lambda: db.metadata.find_one({"_id": "recruiter", "owner": {"$exists": True}}) is not None,
             timeout_s=30, message="a leader")
    standby = processes.recruiter()
    processes.worker("--concurrency", "16")
    wait_for(lambda: db.ledger.count_documents({"event": "start", "group": "pay"}) >= 20, timeout_s=120,
             message="20 pay jobs started")
    leader.signal(signal.SIGKILL)
    leader.wait(30)
    wait_for(lambda: db.ledger.count_documents({"event": "end", "group": "pay"}) == PAY_JOBS, timeout_s=180,
             message="every pay job to run")
    wait_for(lambda: db.ledger.count_documents({"event": "end", "group": "bulk"}) == BULK_JOBS, timeout_s=60,
             message="every bulk job to run")
    assert "leader.elected" in standby.log()  # the standby took over, and the limits held across it

    rows = list(db.ledger.find({}, {"job": 1, "group": 1, "event": 1, "at": 1, "attempt": 1, "assigned_at": 1}))
    pay = [r for r in rows if r["group"] == "pay" and r["event"] == "start"]
    pay_starts = [r["at"] for r in pay]
    assert len(pay_starts) == PAY_JOBS  # each once: nothing ran twice across the failover
    handed_out = [r["assigned_at"] for r in pay]  # the rounds' times: what the limit counts
    # A job starts at the start time its round gave it: PACED_START_S to PACED_START_S + PACED_AHEAD_S
    # after the round; one whose hand-off took longer starts late.
    late = [r["at"] for r in pay
            if (r["at"] - r["assigned_at"]).total_seconds() > PACED_START_S + PACED_AHEAD_S + ON_TIME_S]
    ends = {r["job"]: r["at"] for r in rows if r["group"] == "pay" and r["event"] == "end"}
    spans = [(r["at"], ends[r["job"]]) for r in rows if r["group"] == "pay" and r["event"] == "start"]

    per_second = most_in_a_window(pay_starts, 1.0)
    handed_per_second = most_in_a_window(handed_out, 1.0)
    at_once = most_at_once(spans)
    bulk_ends = [r["at"] for r in rows if r["group"] == "bulk" and r["event"] == "end"]
    bulk_starts = [r["at"] for r in rows if r["group"] == "bulk" and r["event"] == "start"]
    bulk_rate = BULK_JOBS / max(1e-3, (max(bulk_ends) - min(bulk_starts)).total_seconds())
    pay_span = (max(pay_starts) - min(pay_starts)).total_seconds()
    print(f"\npay: {PAY_JOBS} jobs over {pay_span:.1f}s, at most {handed_per_second} handed out and "
          f"{per_second} started in any 1 s window (limit {RATE} + burst {BURST}; {len(late)} starts came over "
          f"{PACED_START_S + PACED_AHEAD_S + ON_TIME_S:.2f}s after their hand-out), at most {at_once} running at once "
          f"(cap {CAP}); "
          f"bulk: {BULK_JOBS} jobs at {bulk_rate:.1f} jobs/s beside it")
    # A round hands out the starts due within its reach (PACED_START_S + PACED_AHEAD_S), so the hand-outs
    # may bunch; what the rate bounds is the start times they carry, and so the starts below.
    assert handed_per_second <= RATE + BURST + RATE * PACED_AHEAD_S + 1
    # The start times a round gives keep the bound over any 1 s window. A worker starts a job up to
    # ON_TIME_S after its start time (a busy machine: more than the 2% margin of 20 ms), so the starts
    # of any 1 - ON_TIME_S seconds come from start times within 1 s; starts delayed by a hand-off
    # slower than its budget may come on top.
    ordered = sorted(pay_starts)
    for i, t in enumerate(ordered):
        window = [u for u in ordered[i:] if (u - t).total_seconds() < 1.0 - ON_TIME_S]
        assert len(window) <= RATE + BURST + sum(1 for u in late if t <= u <= window[-1]), (t, window, late)
    assert at_once <= CAP
    # The limited group never held the other back: every bulk job was done before the last pay job
    # started (the pay group needs at least (60 - 2) / 5 s = 11.6 s by its rate alone).
    assert max(bulk_ends) < max(pay_starts)

    # As a process of its own, as before: run at once in this process, the list can still count
    # one pay job running just after the last was archived (seen once in three runs); that the
    # count settles so soon is not what this test is about (reported, not loosened here).
    listed = run_cli("limits", "list", "--json", "--target", db_uri)
    assert listed.returncode == 0, listed.stderr
    assert '"max_running": 3' in listed.stdout
    assert '"running": 0' in listed.stdout


def test_bad_limits_are_one_line_and_change_nothing(db: Any, db_uri: str) -> None:
    assert cli(db_uri, "limits", "set", "--group", "pay", "--max-running", "2").returncode == 0
    before = db.metadata.find_one({"_id": "limits"})
    for args, says in [
        (["--rate", "5/x"], "invalid rate '5/x'"),
        (["--rate", "0/s"], "the count must be at least 1"),
        (["--rate", "-5/s"], "invalid rate '-5/s'"),
        (["--max-running", "0"], "invalid max_running 0"),
        (["--max-running", "-2"], "invalid max_running -2"),
        ([], "give --rate, --max-running, or both"),
        (["--burst", "2", "--max-running", "1"], "--burst needs --rate"),
    ]:
        out = cli(db_uri, "limits", "set", "--group", "pay", *args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        errors = [line for line in out.stderr.splitlines() if line.startswith("Error")]
        assert len(errors) == 1, (args, out.stderr)
        assert says in errors[0], (args, out.stderr)
        assert "Traceback" not in out.stderr
    bad_name = cli(db_uri, "limits", "set", "--group", "a.b", "--max-running", "1")
    assert bad_name.returncode == 2
    assert "invalid group name" in bad_name.stderr
    assert db.metadata.find_one({"_id": "limits"}) == before

    unknown = cli(db_uri, "limits", "set", "--group", "pay", "--tenant", "nobody-yet", "--rate", "1/m")
    assert unknown.returncode == 0  # a warning, not an error: tenants appear over time
    assert "Warning: no job has used the tenant 'nobody-yet' yet" in unknown.stderr
    cleared = cli(db_uri, "limits", "clear", "--group", "pay", "--tenant", "nobody-yet")
    assert cleared.returncode == 0
    assert "limit cleared" in cleared.stdout
    again = cli(db_uri, "limits", "clear", "--group", "pay", "--tenant", "nobody-yet")
    assert again.returncode == 0
    assert "nothing changed" in again.stderr
    assert read_limits(db.metadata.find_one({"_id": "limits"})) == read_limits(before)


def test_hand_edited_limits_are_listed_with_their_state_and_set_says_what_it_replaced(db: Any, db_uri: str) -> None:
    db.metadata.insert_one({"_id": "limits", "groups": {
        "pay": {"max_running": 2.0},  # a double, as a JSON import writes it: read as 2
        "mail": {"max_running": 2, "rates": "5/s"},  # a misspelled field: malformed, held
        "a.b": {"max_running": 1}, "a%2Eb": {"max_running": 3}}})  # one name stored twice
    listed = cli(db_uri, "limits", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["path"]: r for r in json.loads(listed.stdout)}
    assert rows["groups.pay"]["state"] == "applied"
    assert rows["groups.pay"]["max_running"] == 2
    assert rows["groups.mail"]["state"] == "malformed"
    assert "unknown field 'rates'" in rows["groups.mail"]["problem"]
    assert rows["groups.a.b"]["state"] == rows["groups.a%2Eb"]["state"] == "malformed"
    assert "is stored 2 times" in rows["groups.a%2Eb"]["problem"]
    assert "Warning: groups.mail (group mail): unknown field 'rates'" in listed.stderr
    text = cli(db_uri, "limits", "list")
    assert "malformed at groups.mail: unknown field 'rates'" in text.stdout

    kept = cli(db_uri, "limits", "set", "--group", "pay", "--rate", "5/s")
    assert kept.returncode == 0, kept.stderr
    assert "limit set: group pay: rate 5/s, max_running 2 (was: max_running 2)" in kept.stdout
    replaced = cli(db_uri, "limits", "set", "--group", "pay", "--rate", "4/s", "--replace")
    assert "Warning: --replace removed max_running 2 from the limit" in replaced.stderr
    fixed = cli(db_uri, "limits", "set", "--group", "mail", "--max-running", "3")
    assert "(replaced a malformed limit: unknown field 'rates'" in fixed.stdout

    for rate in ("1000000/0.000000000001s", "1000001/s", "20000/s"):
        out = cli(db_uri, "limits", "set", "--group", "pay", "--rate", rate)
        assert out.returncode == 2, (rate, out.stderr)
        errors = [line for line in out.stderr.splitlines() if line.startswith("Error")]
        assert len(errors) == 1, out.stderr
        assert f"invalid rate '{rate}'" in errors[0]
