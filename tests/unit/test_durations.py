from __future__ import annotations

import re
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recruiter.domain.durations import MAX_DURATION, as_timedelta, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("200ms", timedelta(milliseconds=200)),
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("2h", timedelta(hours=2)),
        ("5d", timedelta(days=5)),
        ("1w", timedelta(weeks=1)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1m30s", timedelta(minutes=1, seconds=30)),
        ("1d2h3m4s5ms", timedelta(days=1, hours=2, minutes=3, seconds=4, milliseconds=5)),
        ("1.5", timedelta(seconds=1.5)),
        ("10", timedelta(seconds=10)),
        ("0", timedelta(0)),
        ("0.5s", timedelta(milliseconds=500)),
        (".25h", timedelta(minutes=15)),
        ("1.5ms", timedelta(microseconds=1500)),
        ("  30s\n", timedelta(seconds=30)),
        ("0.1", timedelta(milliseconds=100)),
    ],
)
def test_parse_accepts(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "abc",
        "-5s",
        "-1",
        "5x",
        "5 s",
        "s",
        "ms",
        "1h 30m",
        "1m1h",
        "5s5s",
        "1.2.3s",
        "1e3s",
        "inf",
        "nan",
        "5sm",
        "10mss",
        "5S",
        "٣s",
    ],
)
def test_parse_rejects_with_one_clear_line(text: str) -> None:
    with pytest.raises(ValueError, match=r"^invalid duration ") as info:
        parse_duration(text)
    message = str(info.value)
    assert message.startswith(f"invalid duration {text!r}:")
    assert "\n" not in message


def test_parse_message_suggests_units() -> None:
    with pytest.raises(ValueError, match=r"use a number with a unit, like 200ms, 30s, 5m"):
        parse_duration("abc")


def test_parse_rejects_too_large() -> None:
    with pytest.raises(ValueError, match="too large"):
        parse_duration("99999999999w")


def test_parse_rejects_non_strings() -> None:
    with pytest.raises(TypeError):
        parse_duration(5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("td", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(milliseconds=200), "200ms"),
        (timedelta(hours=1, minutes=30), "1h30m"),
        (timedelta(minutes=1, seconds=30), "1m30s"),
        (timedelta(days=8, seconds=1), "8d1s"),
        (timedelta(seconds=1, milliseconds=5), "1s5ms"),
        (timedelta(microseconds=1500), "1.5ms"),
        (timedelta(microseconds=1), "0.001ms"),
    ],
)
def test_format(td: timedelta, text: str) -> None:
    assert format_duration(td) == text


def test_format_rejects_negative() -> None:
    with pytest.raises(ValueError, match="negative"):
        format_duration(timedelta(seconds=-1))


whole_milliseconds = st.integers(min_value=0, max_value=10**12).map(
    lambda ms: timedelta(milliseconds=ms)
)


@given(whole_milliseconds)
def test_format_then_parse_round_trips_milliseconds(td: timedelta) -> None:
    text = format_duration(td)
    assert parse_duration(text) == td
    assert parse_duration(f"  {text} ") == td


@given(st.timedeltas(min_value=timedelta(0), max_value=MAX_DURATION))
def test_format_then_parse_round_trips_any_duration(td: timedelta) -> None:
    assert parse_duration(format_duration(td)) == td


@given(whole_milliseconds)
def test_format_is_compact(td: timedelta) -> None:
    text = format_duration(td)
    components = re.findall(r"(\d+)(ms|d|h|m|s)", text)
    assert "".join(number + unit for number, unit in components) == text
    units = [unit for _, unit in components]
    assert units == sorted(set(units), key=["d", "h", "m", "s", "ms"].index)
    if text != "0s":
        assert all(int(number) > 0 for number, _ in components)


@given(
    st.integers(min_value=0, max_value=1000),
    st.integers(min_value=0, max_value=59),
    st.integers(min_value=0, max_value=59),
)
def test_compounds_add_up(hours: int, minutes: int, seconds: int) -> None:
    text = f"{hours}h{minutes}m{seconds}s"
    assert parse_duration(text) == timedelta(hours=hours, minutes=minutes, seconds=seconds)


@given(st.timedeltas(min_value=MAX_DURATION + timedelta(microseconds=1)))
def test_durations_beyond_a_century_are_refused_in_one_line(td: timedelta) -> None:
    """Issue 22: a huge duration is one line, never an OverflowError later (``now - since``)."""
    with pytest.raises(ValueError, match="too large") as caught:
        parse_duration(format_duration(td))
    assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="too large"):
        as_timedelta(td, "every")
    with pytest.raises(ValueError, match="too large"):
        as_timedelta(td.total_seconds(), "every")


def test_numbers_beyond_any_timedelta_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="too large"):
        as_timedelta(1e300, "every")
    with pytest.raises(ValueError, match="too large"):
        parse_duration("1000000d")
