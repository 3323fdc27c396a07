"""Parsing memory sizes for --memory-limit."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recruiter.domain.sizes import parse_size


@pytest.mark.parametrize(("text", "expected"), [
    ("512MB", 512 * 1024**2), ("512mb", 512 * 1024**2), ("512M", 512 * 1024**2), ("512MiB", 512 * 1024**2),
    ("2G", 2 * 1024**3), ("1.5GiB", 3 * 1024**3 // 2), ("64k", 65536), ("1T", 1024**4),
    ("300000000", 300_000_000), ("100B", 100), (" 1 GB ", 1024**3),
])
def test_sizes(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "-1MB", "0", "0.0001B", "12XB", "1iB", "1e3", "five", "1 2MB"])
def test_bad_sizes_are_one_line_errors(text: str) -> None:
    with pytest.raises(ValueError, match="size") as err:
        parse_size(text)
    assert "\n" not in str(err.value)
    assert "size" in str(err.value)


@given(st.integers(min_value=1, max_value=10**6), st.sampled_from(["", "K", "M", "G"]))
def test_integer_sizes_scale_by_1024(n: int, unit: str) -> None:
    assert parse_size(f"{n}{unit}") == n * 1024 ** ["", "K", "M", "G"].index(unit)
