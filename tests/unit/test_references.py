"""Every dotted ``recruiter.…`` reference in a docstring, a comment or a page resolves (issue 23).

Modules moved in the house redesign left docstrings naming modules that no longer exist
(``recruiter.liveness``, ``recruiter.recruiting.RecruiterProcess.assign``). This test
collects every ``recruiter.x.y`` (and ``recruiter.x:Name``) in the package's sources and
in docs/ and README.md, and imports each: a module, then attributes down from it.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from recruiter.domain.naming import UnknownClass, import_qualified
from tests.conftest import REPO

REFERENCE = re.compile(r"(?<![\w./-])recruiter(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)?")
# References are read in code spans only (``x``, `x`, :mod:`x`): elsewhere ``recruiter`` is
# often a variable (``recruiter.clock.now()``) or a logger's name.
SPAN = re.compile(r"`+([^`]+)`+")


def sources() -> list[Path]:
    return [*sorted((REPO / "recruiter").rglob("*.py")), *sorted((REPO / "docs").rglob("*.md")), REPO / "README.md"]


def resolves(reference: str) -> bool:
    if ":" in reference:  # a class as stored in documents (module:Qualname, older module names too)
        try:
            import_qualified(reference)
        except UnknownClass:
            return False
        return True
    dotted, _, qualname = reference.partition(":")
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in [*parts[cut:], *(qualname.split(".") if qualname else [])]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def stale_references(paths: list[Path]) -> list[str]:
    stale = []
    for path in paths:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for span in SPAN.findall(line):
                for match in REFERENCE.finditer(span):
                    reference = match.group(0).rstrip(".")
                    if not resolves(reference):
                        stale.append(f"{path.relative_to(REPO)}:{number}: {reference}")
    return stale


def test_every_recruiter_reference_resolves() -> None:
    stale = stale_references(sources())
    assert stale == [], f"{len(stale)} references name nothing:\n" + "\n".join(stale)


def test_a_planted_stale_reference_is_found(tmp_path: Path) -> None:
    page = REPO / "docs" / "planted-for-the-test.md"
    try:
        page.write_text("See :mod:`recruiter.recruiting` and `recruiter.domain.selection.select`.\n")
        assert stale_references([page]) == ["docs/planted-for-the-test.md:1: recruiter.recruiting"]
    finally:
        page.unlink()
