"""Stored values as JSON: what the command line prints with ``--json`` and what the dashboard shows.

Pure: documents and arrays recursively, ids as strings, dates ISO 8601, binary data as hex.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from bson import Binary


def plain(value: object) -> Any:
    """``value`` as JSON-able values: documents and arrays recursively, ids as strings, dates ISO 8601."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # NaN and infinities are not JSON
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return [plain(v) for v in value]
    if isinstance(value, Binary | bytes | bytearray):
        return bytes(value).hex()
    return str(value)  # ObjectId, UUID and anything else: its text
