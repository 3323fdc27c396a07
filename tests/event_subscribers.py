"""Subscribers that process tests name with ``--subscriber`` (recruiter.processes.events)."""

from __future__ import annotations

import json
import os
from dataclasses import fields, is_dataclass
from typing import Any

from recruiter.domain.events import Event

RECORD_ENVVAR = "TEST_EVENTS_FILE"
NOT_CALLABLE = 42


def record(event: Event) -> None:
    """Append the event as one JSON line to the file ``TEST_EVENTS_FILE`` names."""
    assert is_dataclass(event)
    doc: dict[str, Any] = {"kind": type(event).__name__}
    for f in fields(event):
        value = getattr(event, f.name)
        doc[f.name] = value if isinstance(value, int | float | str | bool | type(None)) else str(value)
    with open(os.environ[RECORD_ENVVAR], "a") as out:
        out.write(json.dumps(doc) + "\n")


def explode(event: Event) -> None:
    raise RuntimeError(f"this subscriber always fails ({type(event).__name__})")
