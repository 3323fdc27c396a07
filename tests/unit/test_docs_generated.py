"""The generated pages of the manual (the CLI reference, the configuration) match the click
commands: ``python -m recruiter.cli.reference`` rewrites them, the docs build refuses stale ones."""

from __future__ import annotations

import shutil
from pathlib import Path

from recruiter.cli.reference import BEGIN, END, PAGES, main, stale_pages
from tests.conftest import REPO


def test_the_generated_pages_are_up_to_date() -> None:
    assert stale_pages(REPO / "docs") == []


def test_every_option_and_variable_of_worker_start_is_on_the_configuration_page() -> None:
    page = (REPO / "docs" / "operations" / "configuration.md").read_text()
    for env in ("RECRUITER_HEARTBEAT_INTERVAL", "RECRUITER_ALLOW_MODULE", "RECRUITER_PREFETCH", "RECRUITER_BURST",
                "RECRUITER_CONSIDERED_DEAD_AFTER", "RECRUITER_LEASE_TTL", "MONGODB_URI"):
        assert f"`{env}`" in page, env


def test_a_changed_page_is_stale_and_the_hand_written_part_is_kept(tmp_path: Path) -> None:
    for page in PAGES:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "docs" / page, tmp_path / page)
    cli = tmp_path / "reference" / "cli.md"
    text = cli.read_text()
    cli.write_text(text.replace("| `--heartbeat-interval`", "| `--heartbeat-every`", 1))
    assert stale_pages(tmp_path) == ["reference/cli.md"]
    assert BEGIN in text
    assert END in text
    assert main(["--check"]) == 0  # the repository's own pages
