"""Failure messages as patterns: the parts that change from job to job masked, so alike failures group.

``invoice 0 has no customer`` and ``invoice 17 has no customer`` are one failure with a
different argument: :func:`message_pattern` turns both into ``invoice <n> has no customer``.
Masked, in this order (an earlier mask is never looked into by a later one):

- quoted values: ``'...'``, ``"..."`` and backquoted text become ``'<s>'`` (the quotes kept);
- UUIDs (8-4-4-4-12 hex digits) become ``<uuid>``;
- ObjectIds (24 hex digits) become ``<oid>``;
- other hex ids: ``0x``-prefixed numbers, and runs of 8 or more hex digits holding at least
  one digit and one letter (a hash, an address), become ``<hex>``;
- numbers (integers, decimals, with an exponent; a sign is kept) become ``<n>``, inside words too
  (``job42`` becomes ``job<n>``), so ids made of a name and a counter group together.

Invariant: pure, and idempotent (``message_pattern(message_pattern(m)) == message_pattern(m)``):
no mask holds a digit or a quote that a later pass would mask again. Two messages that differ
only in masked parts have the same pattern.
"""

from __future__ import annotations

import re

QUOTED = "'<s>'"
_QUOTED = re.compile(r"""'[^'\n]*'|"[^"\n]*"|`[^`\n]*`""")
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_OBJECT_ID = re.compile(r"\b[0-9a-fA-F]{24}\b")
_HEX = re.compile(r"\b0[xX][0-9a-fA-F]+\b|\b(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b")
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
# A mask already in the text (a pattern masked again) is kept as it is.
_MASK = re.compile(r"'<s>'|<(?:uuid|oid|hex|n)>")


def message_pattern(message: str) -> str:
    """``message`` with its quoted values, UUIDs, ObjectIds, hex ids and numbers masked (see the module doc)."""
    parts: list[str] = []
    last = 0
    for found in _MASK.finditer(message):  # masks already there stay; the text between them is masked
        parts += [_mask(message[last:found.start()]), found.group()]
        last = found.end()
    parts.append(_mask(message[last:]))
    return "".join(parts)


def _mask(text: str) -> str:
    text = _QUOTED.sub(QUOTED, text)
    pieces = text.split(QUOTED)
    return QUOTED.join(_mask_unquoted(p) for p in pieces)


def _mask_unquoted(text: str) -> str:
    text = _UUID.sub("<uuid>", text)
    text = _OBJECT_ID.sub("<oid>", text)
    text = _HEX.sub("<hex>", text)
    return _NUMBER.sub("<n>", text)
