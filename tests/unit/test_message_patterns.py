"""Failure messages masked into patterns (recruiter.domain.patterns): alike failures group together."""

from __future__ import annotations

import uuid

from bson import ObjectId
from hypothesis import given
from hypothesis import strategies as st

from recruiter.domain.patterns import message_pattern


def test_the_parts_that_change_are_masked() -> None:
    assert message_pattern("invoice 0 has no customer") == "invoice <n> has no customer"
    assert message_pattern("invoice 1234 has no customer") == "invoice <n> has no customer"
    assert message_pattern("job42 took 1.5e3 ms") == "job<n> took <n> ms"
    assert message_pattern("no user 'alice' in \"sales\"") == "no user '<s>' in '<s>'"
    assert message_pattern(f"job {ObjectId()} missing") == "job <oid> missing"
    assert message_pattern(f"request {uuid.uuid4()} failed") == "request <uuid> failed"
    assert message_pattern("object at 0x7f3a2c1b9d00 is gone") == "object at <hex> is gone"
    assert message_pattern("commit deadbeef1234 not found") == "commit <hex> not found"
    # Words are not ids: only runs holding a digit and a letter are hex.
    assert message_pattern("the database is gone") == "the database is gone"
    assert message_pattern("") == ""


@given(st.text(max_size=80))
def test_masking_is_idempotent(message: str) -> None:
    once = message_pattern(message)
    assert message_pattern(once) == once


_KINDS = {
    "number": st.integers(min_value=0, max_value=10**12).map(str),
    "objectid": st.builds(lambda: str(ObjectId())),
    "uuid": st.uuids().map(str),
    "hex": st.integers(min_value=1, max_value=2**64).map(hex),
}
_WORDS = st.text(alphabet="abcxyz :,.-", max_size=12)


@given(st.lists(st.tuples(_WORDS, st.sampled_from(sorted(_KINDS))), min_size=1, max_size=4), st.data())
def test_messages_differing_only_in_masked_parts_have_one_pattern(parts: list[tuple[str, str]],
                                                                   data: st.DataObject) -> None:
    def message() -> str:
        return "".join(f"{word} {data.draw(_KINDS[kind])} '{data.draw(st.text(alphabet='abc 12', max_size=6))}' "
                       for word, kind in parts)

    assert message_pattern(message()) == message_pattern(message())


@given(st.text(alphabet=st.characters(blacklist_categories=("Nd",)), max_size=60).filter(
    lambda t: not any(q in t for q in "'\"`")))
def test_text_without_digits_or_quotes_is_kept(message: str) -> None:
    assert message_pattern(message) == message
