"""Text read from the database, made safe to show: every control character visible, every long value cut.

A job's arguments, its error messages and logs, group and tenant names... are written
by anyone who can enqueue a job or run one. Shown raw, they can lie: U+202E (right-to-left
override) shows ``abc\\u202eexe.live`` as "abcevil.exe"; BEL, BS and CR in a terminal ring,
overwrite what is printed or move the cursor. Both the dashboard (a Jinja finalizer, so
every printed value goes through it) and the command line (every line it prints) use
:func:`visible` and :func:`cut`.

- :func:`visible`: the C0 controls (U+0000-U+001F), DEL, the C1 controls (U+0080-U+009F),
  the bidirectional controls (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) and the
  line and paragraph separators (U+2028, U+2029) are replaced by their escape, ``\\x07``, ``\\r``
  or ``\\u202e``. Newline and tab are kept where the text is multi-line (logs, traces).
- :func:`cut`: a value longer than ``VALUE_BOUND`` characters is cut there; what was cut is
  said (:func:`size_label`), and the caller says where the whole value is.

Invariant: pure; never raises on a string; text without those characters is returned
unchanged (and so ``visible`` is idempotent).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["VALUE_BOUND", "Cut", "cut", "hidden_characters", "size_label", "visible"]

VALUE_BOUND = 4096  # characters of one value shown before it is cut (4 KiB of ASCII)
BIDI = frozenset({0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)})
SEPARATORS = frozenset({0x2028, 0x2029})
_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}


def _escape(code: int) -> str:
    if code in _NAMED:
        return _NAMED[code]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_ONE_LINE = {c: _escape(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0), *BIDI, *SEPARATORS)}
_MULTI_LINE = {c: e for c, e in _ONE_LINE.items() if c not in (0x0A, 0x09)}


def hidden_characters(multiline: bool = False) -> frozenset[str]:
    """The characters :func:`visible` replaces (without newline and tab when ``multiline``)."""
    return frozenset(map(chr, _MULTI_LINE if multiline else _ONE_LINE))


def visible(text: str, *, multiline: bool = False) -> str:
    """``text`` with every control and bidirectional character replaced by its escape (``\\u202e``).

    ``multiline`` keeps newline and tab (logs, traces); a one-line value (a name, a table
    cell) shows them escaped too, so it cannot look like two lines or two cells.
    """
    return text.translate(_MULTI_LINE if multiline else _ONE_LINE)


@dataclass(frozen=True)
class Cut:
    """A value as shown: its first ``VALUE_BOUND`` characters, and how long the whole is."""

    text: str
    chars: int  # characters of the whole value
    size: int  # bytes of the whole value (UTF-8)

    @property
    def cut(self) -> bool:
        return len(self.text) < self.chars

    def note(self) -> str:
        """``cut: 4096 of 1048578 characters shown (1.0 MiB in all)``, or '' when whole."""
        if not self.cut:
            return ""
        return f"cut: {len(self.text)} of {self.chars} characters shown ({size_label(self.size)} in all)"


def cut(text: str, bound: int = VALUE_BOUND) -> Cut:
    """``text`` cut at ``bound`` characters (whole when it fits), with its whole length and size."""
    if len(text) <= bound:
        return Cut(text, len(text), len(text.encode("utf-8", "surrogatepass")))
    return Cut(text[:bound], len(text), len(text.encode("utf-8", "surrogatepass")))


def size_label(size: int) -> str:
    """``512 bytes``, ``4.0 KiB``, ``1.1 MiB``."""
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size / (1024 * 1024):.1f} MiB"
