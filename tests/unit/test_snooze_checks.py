"""Snooze's pure parts (recruiter.domain.snooze, recruiter.domain.snoozed): the checks at the
boundary, the cap, the count a 0.2.0 leader leaves, and the leader's update."""

from __future__ import annotations

import importlib
import math
import sys
from datetime import UTC, datetime, time, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from bson import ObjectId
from hypothesis import given
from hypothesis import strategies as st

from recruiter import JobContext, JobRefused, Snooze, SnoozeRefused, Workable
from recruiter.domain.builder import JobBuilder
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.domain.policy import Archive, RetryAt
from recruiter.domain.snooze import (
    DEFAULT_MAX_SNOOZES,
    MAX_SNOOZE,
    Asked,
    Snoozed,
    asked_of,
    decide_snooze,
    due_of,
    max_snoozes_of,
    snoozes_of,
)
from recruiter.domain.snoozed import requeue_update, snooze_number, snoozed_status
from recruiter.domain.waiting import Waiting, explain
from recruiter.testing import run_inline
from tests.processes.test_readme import readme_files

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


class Nap(Workable):
    def execute(self) -> None:
        pass


class ShortNap(Nap):
    max_snoozes = 2


class WrongCap(Nap):
    max_snoozes = -2


# -- the constructor, in the job's own code ---------------------------------------------------------


def test_a_snooze_takes_seconds_a_timedelta_or_an_aware_date() -> None:
    assert Snooze(30).seconds == 30.0
    assert Snooze(timedelta(minutes=2)).seconds == 120.0
    assert Snooze(0).seconds == 0.0
    when = datetime(2026, 6, 2, tzinfo=timezone(timedelta(hours=2)))
    assert (Snooze(until=when).until, Snooze(until=when).seconds) == (when, None)


@pytest.mark.parametrize(("args", "kwargs", "why"), [
    ((), {}, "a snooze needs either seconds or until, not both nor neither"),
    ((1,), {"until": NOW}, "a snooze needs either seconds or until, not both nor neither"),
    ((-1,), {}, "a snooze cannot be negative, got -1s"),
    ((float("nan"),), {}, "a snooze needs a finite number of seconds, got nan"),
    ((float("inf"),), {}, "a snooze needs a finite number of seconds, got inf"),
    ((MAX_SNOOZE.total_seconds() + 1,), {}, "a snooze lasts at most 30 days, got 2.592e+06s"),
    ((True,), {}, "a snooze needs seconds (a number or a timedelta), got bool"),
    (("5m",), {}, "a snooze needs seconds (a number or a timedelta), got str"),
    ((), {"until": datetime(2026, 6, 2)}, "a snooze's until needs an aware datetime (with its time zone), got a "
                                          "naive one"),
    ((), {"until": "tomorrow"}, "a snooze's until needs a datetime, got str"),
])
def test_a_wrong_snooze_is_refused_where_the_job_makes_it(args: tuple[Any, ...], kwargs: dict[str, Any],
                                                          why: str) -> None:
    with pytest.raises(SnoozeRefused) as refused:
        Snooze(*args, **kwargs)
    assert str(refused.value) == why


# -- the boundary: what the worker reads of what the job returned --------------------------------------


def _tampered(**fields: object) -> Snooze:
    snooze = Snooze(1)
    for name, value in fields.items():
        object.__setattr__(snooze, name, value)
    return snooze


@pytest.mark.parametrize(("fields", "why"), [
    ({"seconds": -5.0}, "a snooze cannot be negative, got -5s"),
    ({"seconds": math.nan}, "a snooze needs a finite number of seconds, got nan"),
    ({"seconds": 10 ** 400}, "a snooze lasts at most 30 days, got a number too large for a float"),
    ({"seconds": "soon"}, "a snooze needs seconds (a number or a timedelta), got str"),
    ({"seconds": None}, "a snooze needs either seconds or until, not both nor neither"),
    ({"until": NOW}, "a snooze needs either seconds or until, not both nor neither"),
    ({"seconds": None, "until": datetime(2026, 1, 1)},
     "a snooze's until needs an aware datetime (with its time zone), got a naive one"),
])
def test_a_tampered_snooze_is_refused_at_the_boundary(fields: dict[str, object], why: str) -> None:
    assert asked_of(_tampered(**fields)) == why


def test_a_snooze_whose_fields_cannot_be_read_is_refused() -> None:
    class Hostile(Snooze):
        @property  # type: ignore[misc]
        def seconds(self) -> float:
            raise RuntimeError("no")

    assert asked_of(object.__new__(Hostile)) == "the snooze could not be read (RuntimeError)"


@given(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(), st.binary(),
                 st.datetimes(), st.timedeltas(), st.lists(st.integers())),
       st.one_of(st.none(), st.datetimes(), st.datetimes(timezones=st.just(UTC)), st.integers(), st.text()))
def test_reading_any_snooze_never_raises(seconds: object, until: object) -> None:
    """Whatever a job put in its snooze, the boundary answers a checked snooze or a reason."""
    asked = asked_of(_tampered(seconds=seconds, until=until))
    assert isinstance(asked, Asked | str)
    if isinstance(asked, Asked):
        due = due_of(asked, NOW)
        assert isinstance(due, str) or NOW <= due <= NOW + MAX_SNOOZE


def test_a_snooze_until_a_date_is_read_in_utc_and_bounded_from_the_workers_clock() -> None:
    paris = timezone(timedelta(hours=2))
    asked = asked_of(Snooze(until=datetime(2026, 6, 1, 16, 0, tzinfo=paris)))
    assert asked == Asked(until=datetime(2026, 6, 1, 14, 0, tzinfo=UTC))
    assert isinstance(asked, Asked)
    assert due_of(asked, NOW) == datetime(2026, 6, 1, 14, 0, tzinfo=UTC)
    assert due_of(Asked(until=NOW - timedelta(days=1)), NOW) == NOW, "a date past: due at once"
    assert due_of(Asked(until=NOW + MAX_SNOOZE), NOW) == NOW + MAX_SNOOZE
    far = Asked(until=datetime(9999, 12, 31, tzinfo=UTC))
    assert due_of(far, NOW) == "a snooze lasts at most 30 days; until 9999-12-31T00:00:00Z is further"
    assert due_of(Asked(delay_s=90), NOW) == NOW + timedelta(seconds=90)


# -- the cap -----------------------------------------------------------------------------------------


def test_the_snooze_past_the_cap_archives_the_job_saying_so() -> None:
    job: dict[str, object] = {"snoozes": 2, "max_snoozes": 3}
    assert decide_snooze(job, Asked(delay_s=10), NOW) == Snoozed(RetryAt(NOW + timedelta(seconds=10)), 3,
                                                                  NOW + timedelta(seconds=10))
    job["snoozes"] = 3
    decided = decide_snooze(job, Asked(delay_s=10), NOW)
    assert isinstance(decided, Snoozed)
    assert decided.decision == Archive("snoozed-too-often",
                                       "it asked to snooze a 4th time; a job may snooze 3 times (max_snoozes)")
    assert decide_snooze({"max_snoozes": 0}, Asked(delay_s=1), NOW).decision.why == "snoozed-too-often"  # type: ignore[union-attr]
    assert decide_snooze({}, Asked(until=datetime(9999, 1, 1, tzinfo=UTC)), NOW) == \
        "a snooze lasts at most 30 days; until 9999-01-01T00:00:00Z is further"


@pytest.mark.parametrize("stored", [None, -1, 2.5, True, "7", 10 ** 9, [3]])
def test_a_missing_or_malformed_cap_is_the_default_never_lifted(stored: object) -> None:
    job = {} if stored is None else {"max_snoozes": stored}
    assert max_snoozes_of(job) == DEFAULT_MAX_SNOOZES


def test_the_count_is_the_jobs_or_what_its_history_shows_a_0_2_0_leader_left() -> None:
    snoozed = {"outcome": "snoozed", "snooze": 1}
    assert snoozes_of({}) == 0
    assert snoozes_of({"snoozes": 4}) == 4
    # A 0.2.0 leader applied three numbered 1 (the worker was sent no count): three in the history.
    assert snoozes_of({"snoozes": 1, "executions": [snoozed, snoozed, {"outcome": "failed"}, snoozed]}) == 3
    assert snoozes_of({"executions": [{"outcome": "snoozed", "snooze": 9}]}) == 9
    # Malformed values count as nothing, never raise.
    assert snoozes_of({"snoozes": "many", "executions": "x"}) == 0
    assert snoozes_of({"snoozes": -3, "executions": [1, None, {"outcome": "snoozed", "snooze": "2"}]}) == 1


# -- the class, the builder and the decorator set the cap -------------------------------------------------


def test_the_cap_is_stored_from_the_builder_else_the_class() -> None:
    assert "max_snoozes" not in build_job_document(Nap(), JobOptions(), NOW)
    assert build_job_document(ShortNap(), JobOptions(), NOW)["max_snoozes"] == 2
    assert build_job_document(ShortNap(), JobOptions(max_snoozes=7), NOW)["max_snoozes"] == 7


@pytest.mark.parametrize("bad", [-1, 2.0, True, "3", 100_001])
def test_a_wrong_cap_is_refused_at_the_builder(bad: object) -> None:
    with pytest.raises(JobRefused, match="max_snoozes must be"):
        JobBuilder(Nap(), None).max_snoozes(bad)  # type: ignore[arg-type]


def test_a_wrong_class_cap_is_refused_at_enqueue() -> None:
    with pytest.raises(JobRefused, match="max_snoozes must be from 0 to 100000, got -2"):
        build_job_document(WrongCap(), JobOptions(), NOW)


# -- the leader's update --------------------------------------------------------------------------------


def _outcome(execution: dict[str, object] | None, decision: dict[str, object]) -> dict[str, object]:
    return {"job": 1, "token": ObjectId(), "attempt": 1, "executed": False, "decision": decision,
            "execution": execution, "result": None}


def test_only_a_numbered_snoozed_execution_that_requeues_is_a_snooze() -> None:
    retry = {"retry_at": NOW}
    assert snooze_number(_outcome({"outcome": "snoozed", "snooze": 2}, retry)) == 2
    assert snooze_number(_outcome({"outcome": "snoozed", "snooze": 2}, {"archive": "snoozed-too-often"})) is None
    assert snooze_number(_outcome({"outcome": "failed", "snooze": 2}, retry)) is None
    for bad in (0, -1, "2", 2.0, True, None):
        assert snooze_number(_outcome({"outcome": "snoozed", "snooze": bad}, retry)) is None
    assert snooze_number(_outcome(None, retry)) is None


def test_the_leader_requeues_a_snoozed_job_with_its_status_and_count() -> None:
    token = ObjectId()
    job = {"_id": 1, "attempts": 1, "lock_token": token, "executions": []}
    outcome = _outcome({"outcome": "snoozed", "snooze": 1, "attempt": 1}, {"retry_at": NOW})
    outcome["token"] = token
    filter_, update = requeue_update(job, outcome)
    assert (filter_["_id"], filter_["lock_token"]) == (1, token)
    assert update["$set"]["status"] == "queued"
    assert update["$set"]["snoozes"] == 1
    assert update["$set"]["scheduled_at"] == NOW
    assert update["$inc"] == {"attempts": -1}
    assert "lock_token" in update["$unset"]
    # After a failed attempt the job waits as a retry; a history the worker did not see counts.
    job = {**job, "attempts": 2, "executions": [{"outcome": "snoozed", "snooze": 1}] * 2}
    _, update = requeue_update(job, outcome)
    assert (update["$set"]["status"], update["$set"]["snoozes"]) == ("retrying", 3)
    # Not a snooze: the plain reschedule.
    _, update = requeue_update(job, _outcome({"outcome": "failed"}, {"retry_at": NOW}))
    assert "snoozes" not in update["$set"]
    assert update["$set"]["status"] == "retrying"


def test_the_status_of_a_snoozed_job_is_as_before_its_attempt() -> None:
    assert snoozed_status({"attempts": 1}) == "queued"
    assert snoozed_status({"attempts": 3}) == "retrying"
    assert snoozed_status({"attempts": "x"}) == "retrying"


# -- explain ---------------------------------------------------------------------------------------------


def test_explain_says_snoozed_how_many_times_and_until_when() -> None:
    due = NOW + timedelta(minutes=5)
    job = {"_id": 1, "group": "g", "status": "queued", "priority": "low", "tenant": None, "locked": False,
           "scheduled_at": due, "snoozes": 2,
           "max_snoozes": 5, "last_execution": {"outcome": "snoozed", "snooze": 2}}
    explanation = explain(1, job, None, NOW)
    assert explanation is not None
    assert explanation.code is Waiting.SNOOZED
    assert explanation.text == "snoozed 2 times (of at most 5): due at 2026-06-01 12:05:00 UTC (in 5m)"
    assert dict(explanation.details) == {"due_at": due, "group": "g", "tenant": None, "snoozes": 2,
                                         "max_snoozes": 5, "snoozed_until": due}


# -- inline, and the guide's example ---------------------------------------------------------------------


def test_the_guides_snooze_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/guide/writing-jobs.md's export_jobs.py, run inline: snoozes are not attempts, and the cap holds."""
    (tmp_path / "export_jobs.py").write_text(readme_files()["export_jobs.py"])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "export_jobs", raising=False)
    export_jobs = importlib.import_module("export_jobs")
    assert run_inline(export_jobs.FetchExport("E-1")).result == {"fetched": "E-1"}
    never = run_inline(export_jobs.FetchExport("X-1"))
    assert (never.why, never.reason) == ("snoozed-too-often",
                                         "it asked to snooze a 31st time; a job may snooze 30 times (max_snoozes)")
    assert len(never.attempts) == 31
    assert {a.attempt for a in never.attempts} == {1}
    assert {a.outcome for a in never.attempts} == {"snoozed"}
    assert never.waits == (timedelta(seconds=60),) * 30
    # The function job reads the real clock (run_inline skips its waits on its own): before nine it
    # snoozes until nine each time, and inline, where no time passes, it ends at its cap.
    send = export_jobs.send_after_nine.workable("hello")
    assert build_job_document(send, JobOptions(), NOW)["max_snoozes"] == 2
    now = datetime.now(UTC).time()
    sent = run_inline(send)
    if now < time(8, 59):
        assert (sent.why, [a.outcome for a in sent.attempts]) == ("snoozed-too-often", ["snoozed"] * 3)
    elif now >= time(9, 0):
        assert (sent.why, sent.result) == ("done", "sent: hello")


def test_inline_counts_a_snooze_as_no_attempt_and_a_refused_one_as_a_failure() -> None:
    snoozing = run_inline(SnoozesTwice(), max_attempts=1)
    assert (snoozing.why, snoozing.result) == ("done", 3)
    assert [(a.attempt, a.outcome) for a in snoozing.attempts] == [(1, "snoozed"), (1, "snoozed"), (1, "done")]
    refused = run_inline(SnoozesBackwards())
    assert (refused.why, refused.last.outcome, refused.last.error_class) == (
        "not-scheduled-by-retry-policy", "failed", "recruiter.domain.snooze:SnoozeRefused")
    assert refused.last.message == "a snooze cannot be negative, got -1s"


class SnoozesTwice(Workable):
    def __init__(self) -> None:
        self.runs = 0

    def execute(self, ctx: JobContext) -> object:
        _RUNS[ctx.job_id] = _RUNS.get(ctx.job_id, 0) + 1
        return Snooze(5) if _RUNS[ctx.job_id] <= 2 else _RUNS[ctx.job_id]


class SnoozesBackwards(Workable):
    def execute(self) -> object:
        return _tampered(seconds=-1.0)


_RUNS: dict[str, int] = {}


def test_a_checked_snooze_handed_back_by_a_job_itself_is_checked_again() -> None:
    """``Asked`` is what a child process sends; a job returning one is not trusted for it."""
    assert asked_of(Asked(delay_s=-1e300)) == "a snooze cannot be negative, got -1e+300s"
    assert asked_of(Asked(until="later")) == "a snooze's until needs a datetime, got str"  # type: ignore[arg-type]
    assert asked_of(Asked()) == "a snooze needs either seconds or until, not both nor neither"
    assert asked_of(Asked(delay_s=5)) == Asked(delay_s=5.0)
