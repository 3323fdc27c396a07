"""Hot entries (recruiter.domain.hot): which idle entries the leader keeps hot, and what a worker believes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from recruiter.domain.hot import HOT_FOR, MAX_HOT_AHEAD, RENEW_BEFORE, choose_hot, dry_groups, hot_until

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def entry(entry_id: str, *groups: str, process: str | None = None) -> dict[str, object]:
    return {"_id": entry_id, "work_on": list(groups or ("*",)), "process": process or entry_id}


def test_a_worker_believes_only_a_date_ahead_and_not_too_far() -> None:
    assert hot_until(NOW + HOT_FOR, NOW) == NOW + HOT_FOR
    assert hot_until(NOW, NOW) is None  # past
    assert hot_until(NOW + MAX_HOT_AHEAD + timedelta(seconds=1), NOW) is None  # would keep it fast for long
    assert hot_until("soon", NOW) is None
    assert hot_until(None, NOW) is None


def test_each_group_gets_its_hot_entries_and_a_new_mark_is_written() -> None:
    idle = [entry("a1", "a"), entry("a2", "a"), entry("a3", "a"), entry("b1", "b")]
    hot, due = choose_hot(idle, {}, NOW, per_group=2)
    assert set(hot) == {"a1", "a2", "b1"}
    assert sorted(map(str, due)) == ["a1", "a2", "b1"]
    assert set(hot.values()) == {NOW + HOT_FOR}


def test_the_same_hot_set_writes_nothing_until_a_mark_is_due() -> None:
    idle = [entry("w1"), entry("w2"), entry("w3")]
    marked = {"w3": NOW + HOT_FOR, "w2": NOW + HOT_FOR}
    hot, due = choose_hot(idle, marked, NOW, per_group=2)
    assert hot == marked  # the marks stay where they are
    assert due == []
    later = NOW + HOT_FOR - RENEW_BEFORE + timedelta(seconds=1)
    hot, due = choose_hot(idle, marked, later, per_group=2)
    assert sorted(map(str, due)) == ["w2", "w3"]
    assert set(hot.values()) == {later + HOT_FOR}


def test_a_hot_entry_given_work_is_replaced_preferring_a_process_already_hot() -> None:
    marked = {"p1-0": NOW + HOT_FOR, "p2-0": NOW + HOT_FOR}
    # p2-0 got work: it is no longer idle; p1-1 belongs to the process that polls fast already.
    idle = [entry("p3-0", process="p3"), entry("p1-0", process="p1"), entry("p1-1", process="p1")]
    hot, due = choose_hot(idle, marked, NOW, per_group=2)
    assert set(hot) == {"p1-0", "p1-1"}
    assert due == ["p1-1"]


def test_entries_of_a_worker_group_are_not_a_group_of_their_own() -> None:
    idle = [{"_id": "w1", "work_on": ["@worker:w1"], "process": "w1"}]
    assert choose_hot(idle, {}, NOW) == ({}, [])


def test_only_a_group_the_round_ran_dry_keeps_hot_entries() -> None:
    """a: an entry offered work got none (dry); b: every entry offered got a job, so its idle
    entries wait for the next rounds, not for work; a mark in b is not kept."""
    asked = [entry("a1", "a"), entry("b1", "b"), entry("ab", "a", "b")]
    dry = dry_groups(asked, offered={"b1", "ab"})
    assert dry == {"a"}
    idle = [entry("a1", "a"), entry("a2", "a"), entry("b2", "b"), entry("b3", "b")]
    hot, due = choose_hot(idle, {"b2": NOW + HOT_FOR}, NOW, per_group=2, groups=dry)
    assert set(hot) == {"a1", "a2"}
    assert sorted(map(str, due)) == ["a1", "a2"]
    assert dry_groups(asked, offered={"a1", "b1", "ab"}) == set()
    assert choose_hot(idle, {}, NOW, groups=set()) == ({}, [])
