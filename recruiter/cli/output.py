"""Everything the command line prints goes through :func:`echo`: text read from the database shown as text.

A group name, a job's argument, an error message or a log line may hold BEL, BS, CR, ESC
sequences or bidirectional controls (U+202E): printed raw, a terminal would ring, overwrite
what was shown, or show ``abc\\u202eexe.live`` as "abcevil.exe". :func:`echo` escapes them all
(:func:`recruiter.domain.visible.visible`, newline and tab kept); :func:`cell` escapes newline
and tab too, for a value that must stay on its line (a table cell, a field of ``jobs show``).

Invariant: no command calls ``click.echo`` itself (``tests/unit/test_cli_output.py`` checks it),
except to clear the screen of ``stats --watch`` (:data:`CLEAR_SCREEN`, a constant of ours).
JSON output needs nothing more: ``json.dumps`` escapes every control and non-ASCII character.
"""

from __future__ import annotations

import click

from recruiter.domain.visible import visible

CLEAR_SCREEN = "\x1b[2J\x1b[H"


def echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """Print ``text`` (to stderr with ``err``) with every control and bidirectional character escaped."""
    click.echo(visible(text, multiline=True), err=err, nl=nl)


def cell(value: object) -> str:
    """``value`` as one line of text: every control character escaped, newline and tab included."""
    return visible(str(value))


def clear_screen() -> None:
    """The one control sequence the command line writes itself: a fresh screen for ``stats --watch``."""
    click.echo(CLEAR_SCREEN, nl=False)
