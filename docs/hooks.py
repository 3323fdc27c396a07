"""MkDocs hooks (mkdocs.yml ``hooks:``): the build fails when a generated page is out of date."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

from recruiter.cli.reference import stale_pages


def on_pre_build(config: Any) -> None:
    stale = stale_pages(Path(config["docs_dir"]))
    if stale:
        raise PluginError(f"{', '.join(stale)} out of date with the commands: run python -m recruiter.cli.reference")
