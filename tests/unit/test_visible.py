"""Text from the database made safe to show (recruiter.domain.visible): properties, then the cases of issue 39."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from recruiter.domain.visible import VALUE_BOUND, cut, hidden_characters, size_label, visible

HIDDEN = hidden_characters()
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
# Any text, with the characters that lie drawn often.
TEXT = st.text(alphabet=st.one_of(st.characters(codec="utf-8"), st.sampled_from(sorted(HIDDEN))))


@given(TEXT)
def test_nothing_hidden_is_left(text: str) -> None:
    assert not set(visible(text)) & HIDDEN
    assert not set(visible(text, multiline=True)) & hidden_characters(multiline=True)


@given(TEXT)
def test_no_control_or_bidi_character_survives(text: str) -> None:
    shown = visible(text)
    assert all(unicodedata.category(c) != "Cc" for c in shown)
    assert not set(shown) & set(BIDI)
    assert all(unicodedata.category(c) != "Cc" or c in "\n\t" for c in visible(text, multiline=True))


@given(st.text(alphabet=st.characters(codec="utf-8", exclude_characters=HIDDEN)))
def test_safe_text_is_unchanged(text: str) -> None:
    assert visible(text) == text
    assert visible(text, multiline=True) == text


@given(TEXT)
def test_visible_is_idempotent_and_keeps_the_lines_of_multiline_text(text: str) -> None:
    once = visible(text, multiline=True)
    assert visible(once, multiline=True) == once
    assert once.count("\n") == text.count("\n")
    assert once.count("\t") == text.count("\t")
    assert "\n" not in visible(text)


@given(TEXT, st.integers(min_value=0, max_value=300))
def test_cut_keeps_a_prefix_and_says_the_whole_size(text: str, bound: int) -> None:
    shown = cut(text, bound)
    assert text.startswith(shown.text)
    assert len(shown.text) == min(len(text), bound)
    assert shown.chars == len(text)
    assert shown.size == len(text.encode("utf-8", "surrogatepass"))
    assert shown.cut == (len(text) > bound)
    assert bool(shown.note()) == shown.cut


def test_the_cases_of_the_issue() -> None:
    assert visible("abc\u202eevil.exe") == "abc\\u202eevil.exe"
    assert visible("ring\x07back\x08\x08\x08tab\x0bff\x0c") == "ring\\x07back\\x08\\x08\\x08tab\\x0bff\\x0c"
    assert visible("a\nb\tc\r\n", multiline=True) == "a\nb\tc\\r\n"
    assert visible("a\nb\tc") == "a\\nb\\tc"
    assert visible("\x1b[2J\x9b31m\u2028") == "\\x1b[2J\\x9b31m\\u2028"
    assert visible("é ü 中文 🙂") == "é ü 中文 🙂"
    for char in BIDI:
        assert visible(char) == f"\\u{ord(char):04x}"


def test_a_large_value_is_cut_at_the_bound_with_its_size() -> None:
    value = "x" * (1024 * 1024)
    shown = cut(value)
    assert len(shown.text) == VALUE_BOUND
    assert shown.note() == f"cut: {VALUE_BOUND} of 1048576 characters shown (1.0 MiB in all)"
    assert cut("short").note() == ""
    assert [size_label(n) for n in (0, 1023, 1024, 4096, 1536 * 1024)] == [
        "0 bytes", "1023 bytes", "1.0 KiB", "4.0 KiB", "1.5 MiB"]
