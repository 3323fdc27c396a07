"""Memory sizes written by people: ``"512MB"``, ``"2G"``, ``"1.5GiB"``, ``"300000000"``.

Pure, like :mod:`recruiter.domain.durations`. Units are powers of 1024, as in PHP's
``memory_limit`` and ``ulimit``: ``K``/``KB``/``KiB`` = 1024 bytes, ``M`` = 1024²,
``G`` = 1024³, ``T`` = 1024⁴; a bare number (or ``B``) is bytes. Case does not matter.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["parse_size"]

_POWERS = {"": 0, "b": 0, "k": 1, "m": 2, "g": 3, "t": 4}
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(i?b)?", re.ASCII | re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes in ``text``; ``ValueError`` with a one-line reason if it is not a positive size."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"invalid size {text!r}: use a number with a unit, like 512MB, 2G or 300000000")
    number, prefix, suffix = match.groups()
    if suffix and suffix.lower() == "ib" and not prefix:
        raise ValueError(f"invalid size {text!r}: 'iB' needs a prefix, like KiB or MiB")
    try:
        size = int(Decimal(number) * 1024 ** _POWERS[prefix.lower()])
    except InvalidOperation:  # pragma: no cover - the pattern only lets numbers through
        raise ValueError(f"invalid size {text!r}") from None
    if size <= 0:
        raise ValueError(f"invalid size {text!r}: it must be more than zero bytes")
    return size
