"""The benchmark's arithmetic: percentiles and per-kind sums of command stats."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.capacity import retryable_line, retryable_per_job
from bench.stats import difference, per_job, percentile, totals


def test_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50
    assert percentile(values, 95) == 95
    assert percentile(values, 99) == 99
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1), st.floats(min_value=0, max_value=100))
def test_a_percentile_is_a_measured_value(values: list[float], q: float) -> None:
    assert percentile(values, q) in values


def snap(find: int, empty: int, update: int) -> dict[str, object]:
    return {"commands": {"find": {"count": find, "empty": empty, "request_bytes": 10 * find, "reply_bytes": find},
                         "update": {"count": update, "empty": 0, "request_bytes": 5 * update, "reply_bytes": 0},
                         "hello": {"count": 1, "empty": 0, "request_bytes": 1, "reply_bytes": 1}},
            "targets": {"find:roster": {"count": find}}}


def test_totals_sum_processes_and_classify_commands() -> None:
    t = totals([snap(4, 1, 2), snap(6, 2, 3), None])
    assert (t["round_trips"], t["reads"], t["writes"], t["other"]) == (17, 10, 5, 2)
    assert t["empty_reads"] == 3
    assert t["request_bytes"] == 10 * 10 + 5 * 5 + 2
    assert t["commands"]["@find:roster"] == 10


def test_difference_and_per_job() -> None:
    d = difference(totals([snap(10, 4, 5)]), totals([snap(4, 1, 2)]))
    assert (d["reads"], d["writes"], d["empty_reads"]) == (6, 3, 3)
    assert d["commands"] == {"find": 6, "update": 3, "@find:roster": 6}
    assert per_job(d, 3)["reads"] == 2
    assert per_job(d, 0) == {}


def test_empty_getmores_and_heartbeats_are_counted_apart() -> None:
    s = {"commands": {"getMore": {"count": 10, "empty": 7, "request_bytes": 0, "reply_bytes": 0},
                      "find": {"count": 5, "empty": 2, "request_bytes": 0, "reply_bytes": 0},
                      "update": {"count": 6, "empty": 0, "request_bytes": 0, "reply_bytes": 0}},
         "targets": {"getMore": {"count": 10}, "find:heartbeats": {"count": 1}, "find:roster": {"count": 4},
                     "update:heartbeats": {"count": 2}, "update:roster": {"count": 4}}}
    t = totals([s])
    assert t["empty_getmores"] == 7  # an empty find is an idle poll, not an empty getMore
    assert t["empty_reads"] == 9
    assert (t["heartbeat_reads"], t["heartbeat_writes"]) == (1, 2)
    assert per_job(t, 2)["empty_getmores"] == 3.5


def test_retryable_writes_are_summed_and_dropped_where_a_process_did_not_count_them() -> None:
    counted = {"commands": {"update": {"count": 5, "request_bytes": 0, "reply_bytes": 0, "retryable": 3},
                            "find": {"count": 2, "request_bytes": 0, "reply_bytes": 0, "retryable": 0}}}
    older = {"commands": {"update": {"count": 5, "request_bytes": 0, "reply_bytes": 0}}}
    assert totals([counted, counted])["retryable"] == 6
    assert "retryable" not in totals([counted, older])  # not known, rather than too low


def test_retryable_writes_per_job_by_process_kind() -> None:
    phase = {"worker": {"retryable": 10}, "recruiter": {"retryable": 5}, "enqueue": {"retryable": 1}}
    per_job = retryable_per_job(phase, 100)
    assert per_job == pytest.approx({"producer": 0.01, "recruiter": 0.05, "worker": 0.1, "all": 0.16})
    assert retryable_line(per_job).startswith("retryable writes per job: 0.16 (producer 0.01, recruiter 0.05")
    assert retryable_per_job({**phase, "worker": {}}, 100) == {}  # a kind that did not count them
    assert retryable_per_job(phase, 0) == {}
    assert retryable_line({}) == "retryable writes per job: - (not counted)"
