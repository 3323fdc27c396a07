"""The history's bucketing and merging (recruiter.domain.timeline) and its charts' geometry (recruiter.web.charts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from recruiter.domain.clock import ManualClock
from recruiter.domain.events import LeaseWon, OutcomeApplied
from recruiter.domain.timeline import HOUR, MINUTE, Tally, Totals, bucket_document, bucket_start, merge
from recruiter.processes.timeline import Timeline
from recruiter.web.charts import nice_ceiling, time_chart

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


def test_a_time_falls_in_its_minute_and_its_hour() -> None:
    at = datetime(2026, 3, 1, 10, 17, 42, 123000, tzinfo=UTC)
    assert bucket_start(at, MINUTE) == datetime(2026, 3, 1, 10, 17, tzinfo=UTC)
    assert bucket_start(at, HOUR) == T0


def test_a_tally_counts_each_outcome_in_its_group_and_the_whole_queue() -> None:
    tally = Tally()
    tally.count("mail", "done", 2.0, T0 + timedelta(seconds=5))
    tally.count("mail", "failed", 4.0, T0 + timedelta(seconds=50))
    tally.count("pdf", "timed-out", None, T0 + timedelta(seconds=70))
    tally.count("pdf", "judged", None, T0 + timedelta(seconds=70))  # neither done nor failed
    minute = {(k[1], k[2]): t for k, t in tally.buckets.items() if k[0] == MINUTE}
    assert minute[T0, "mail"] == Totals(done=1, failed=1, wait_n=2, wait_s=6.0, wait_max_s=4.0)
    assert minute[T0 + timedelta(minutes=1), "pdf"] == Totals(failed=1)
    assert tally.buckets[HOUR, T0, None] == Totals(done=1, failed=2, wait_n=2, wait_s=6.0, wait_max_s=4.0)


def test_written_buckets_that_are_over_are_forgotten_the_current_ones_kept() -> None:
    tally = Tally()
    tally.count("mail", "done", None, T0)
    now = T0 + timedelta(minutes=1, seconds=3)
    tally.cover(now)
    keys = tally.pending()
    tally.written(keys, now)
    assert tally.pending() == []
    assert set(tally.buckets) == {(MINUTE, T0 + timedelta(minutes=1), None), (HOUR, T0, None), (HOUR, T0, "mail")}


_OUTCOMES = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["done", "failed"]),
                               st.integers(min_value=0, max_value=179)), max_size=40)


@given(_OUTCOMES, st.integers(min_value=0, max_value=40))
def test_a_takeover_at_any_point_counts_each_flushed_outcome_once(outcomes: list[tuple[str, str, int]],
                                                                 split: int) -> None:
    """Two leaders, each flushing its own epoch's totals (repeatedly): merged, the counts are the outcomes'."""
    stored: dict[object, dict[str, object]] = {}
    for epoch, part in ((1, outcomes[:split]), (2, outcomes[split:])):
        tally = Tally()
        for group, kind, second in part:
            tally.count(group, kind, None, T0 + timedelta(seconds=second))
            for doc in tally.documents(tally.pending(), epoch):  # a flush after every outcome, as a retry would
                stored[doc["_id"]] = doc
    until = T0 + timedelta(minutes=2)
    for group in ("a", "b", None):
        series = merge(stored.values(), MINUTE, T0, until, group)
        done = sum(t.done for _, t in series.points if t is not None)
        assert done == sum(1 for g, k, _ in outcomes if k == "done" and group in (None, g))


def test_a_bucket_no_leader_recorded_is_a_gap_and_one_recorded_without_outcomes_is_zero() -> None:
    docs = [bucket_document((MINUTE, T0, None), Totals(done=2), 1),
            bucket_document((MINUTE, T0 + timedelta(minutes=2), None), Totals(), 1),
            {"_id": "x", "res": MINUTE, "at": T0, "group": None, "done": -1}]
    series = merge(docs, MINUTE, T0, T0 + timedelta(minutes=2), None)
    assert [t if t is None else t.done for _, t in series.points] == [2, None, 0]
    assert series.malformed == 1


def test_a_chart_stops_its_line_at_a_gap_and_shades_it() -> None:
    points = [(T0 + timedelta(minutes=i), None if i in (3, 4) else Totals(done=i)) for i in range(8)]
    chart = time_chart("t", "jobs", T0, T0 + timedelta(minutes=7), timedelta(minutes=1), points,
                       [("done", "done", lambda t: t.done)], str)
    (line,) = chart.lines
    assert line.path.count("M ") == 2
    assert len(chart.gaps) == 1
    lo, hi = chart.gaps[0]
    xs = [float(p.split(",")[0]) for p in line.path.replace("M ", "").replace("L ", "").split()]
    assert not any(lo < x < hi for x in xs)
    assert [t.label for t in chart.x_ticks] == ["10:00", "10:05"]  # 8 minutes: at most 7 ticks, every 5


@given(st.floats(min_value=1e-6, max_value=1e12))
def test_the_value_axis_ends_at_a_round_number_at_or_above_the_highest(value: float) -> None:
    top = nice_ceiling(value)
    assert value * (1 - 1e-9) <= top <= value * 2.0 + 1e-9


def test_the_leaders_tally_follows_its_own_leaderships_only() -> None:
    timeline = Timeline(ManualClock(T0), "me")
    timeline(OutcomeApplied("mail", "done", 1.0, T0))
    timeline(LeaseWon("recruiter", 4, "me"))  # a leadership begins: nothing counted before it is its
    assert timeline.tally.buckets == {}
    timeline(OutcomeApplied("mail", "done", 1.0, T0))
    timeline(LeaseWon("cleaner", 9, "me"))  # another role's lease
    timeline(LeaseWon("recruiter", 5, "someone else"))  # another process's
    timeline(LeaseWon("recruiter", 4, "me"))  # the same leadership taken back: its counts still its own
    assert timeline.tally.buckets[MINUTE, T0, "mail"].done == 1
    timeline(LeaseWon("recruiter", 6, "me"))  # a new epoch: what the old one counted cannot be written under it
    assert timeline.tally.buckets == {}
    assert timeline.epoch == 6


def test_buckets_past_their_retention_are_forgotten_even_unwritten() -> None:
    tally = Tally()
    tally.count("mail", "done", None, T0)
    tally.expire(T0 + timedelta(days=1, minutes=1))  # the minute buckets' day is over, not the hours' 30 days
    assert set(tally.buckets) == {(HOUR, T0, None), (HOUR, T0, "mail")}
    assert set(tally.pending()) == set(tally.buckets)
    tally.expire(T0 + timedelta(days=30, hours=1))
    assert tally.buckets == {}
    assert tally.pending() == []
