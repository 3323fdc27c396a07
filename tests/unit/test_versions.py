"""The release and the skew rule (recruiter.domain.versions, recruiter.admin.releases): pure."""

from __future__ import annotations

import re
import tomllib
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import recruiter
from recruiter.admin.releases import releases_of
from recruiter.domain import versions
from recruiter.domain.versions import (
    RELEASE,
    UNKNOWN,
    UNREADABLE,
    WORKS_BESIDE,
    Release,
    beside,
    parse,
    recorded,
    refusal,
)
from tests.conftest import REPO


def test_one_source_for_the_version() -> None:
    assert recruiter.__version__ == RELEASE
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "recruiter.domain.versions.RELEASE"}


def test_the_changelog_has_a_section_for_this_release_and_the_one_it_works_beside() -> None:
    headings = re.findall(r"^## (\S+)", (REPO / "CHANGELOG.md").read_text(), flags=re.M)
    assert headings[0] == RELEASE
    assert WORKS_BESIDE in headings
    assert parse(RELEASE) > parse(WORKS_BESIDE)  # type: ignore[operator]


def test_versions_are_read_as_numbers() -> None:
    assert parse("0.10.0") == (0, 10, 0)
    assert parse("1.2.3rc1") == (1, 2, 3)
    assert versions.older("0.9.9", "0.10.0")
    for bad in ("", "1.2", "v1.2.3", None, 3, {"$gt": ""}, "1.2.3" + "x" * 100):
        assert parse(bad) is None


def test_a_record_is_read_back_and_anything_else_is_unrecorded() -> None:
    assert recorded({"release": versions.record()}) == versions.THIS
    assert recorded({}) == UNKNOWN
    for doc in ({"release": "0.2.0"}, {"release": {"version": 2}}, {"release": {"works_beside": "0.1.0"}},
                {"release": {"version": "two"}}, {"release": []}):
        assert recorded(doc) == UNREADABLE
    lease = {"release": {**versions.record(), "owner": "a"}}
    assert recorded(lease, owner="a") == versions.THIS
    assert recorded(lease, owner="b") == UNKNOWN  # left by the holder before


def test_this_release_works_beside_the_previous_and_unrecorded_or_unreadable_ones() -> None:
    assert beside(Release(WORKS_BESIDE, None))
    # A damaged release field must not stop a queue: it is shown as unreadable, not held against anyone.
    assert beside(UNREADABLE)
    assert refusal(UNREADABLE, "worker") is None
    assert UNREADABLE.shown == "unreadable (not held against it)"
    # No field at all: 0.1.1 or older, or an entry written by hand: not known, so not held against it.
    assert beside(UNKNOWN)
    assert refusal(UNKNOWN, "worker") is None
    assert not beside(Release("0.1.1", "0.1.0"))  # a release recorded, outside the rule


def test_a_refusal_names_both_versions_and_what_to_do() -> None:
    old = refusal(Release("0.0.9", "0.0.1"), "worker")
    assert old == (f"the worker runs recruiter 0.0.9, older than {WORKS_BESIDE}, the oldest this release ({RELEASE}) "
                   f"works beside: upgrade the worker to {WORKS_BESIDE} or later, or stop every process and start "
                   "this release (docs/operations/deploys.md)")
    new = refusal(Release("9.0.0", "8.0.0"), "leading recruiter")
    assert new is not None
    assert new.startswith(f"the leading recruiter runs recruiter 9.0.0, which works beside 8.0.0 and later, not this "
                          f"release ({RELEASE}): upgrade this process to 8.0.0 or later")


releases = st.builds(Release, st.from_regex(r"\A[0-3]\.[0-3]\.[0-3]\Z"),
                     st.none() | st.from_regex(r"\A[0-3]\.[0-3]\.[0-3]\Z"))


@given(releases, releases)
def test_side_by_side_is_symmetric_and_each_judges_alike(a: Release, b: Release) -> None:
    assert beside(a, b) == beside(b, a)
    assert (refusal(a, "worker", me=b) is None) == beside(a, b)


def by_name(view: Any) -> dict[str, tuple[str, ...]]:
    return dict(view.live)


def test_the_releases_live_newest_first_and_the_warnings() -> None:
    old = Release("0.0.9", "0.0.8")
    view = releases_of([("w-1", versions.THIS), ("w-2", versions.THIS), ("a", old), ("b", UNKNOWN)],
                       [("recruiter", UNKNOWN), ("cleaner", versions.THIS)])
    assert list(view.live) == [RELEASE, "0.0.9", f"{versions.UNRECORDED} or older (none recorded)"]
    assert by_name(view)[RELEASE] == ("cleaner lease", "2 worker slots")
    assert view.warnings[0].startswith(f"releases are mixed: {RELEASE}, 0.0.9, ")
    assert view.warnings[1].startswith("worker a: the worker runs recruiter 0.0.9")
    assert len(view.warnings) == 2  # recording none is mixed, not refused


def test_one_release_live_warns_of_nothing() -> None:
    view = releases_of([(f"w-{i}", versions.THIS) for i in range(5)], [("recruiter", versions.THIS)])
    assert by_name(view) == {RELEASE: ("recruiter lease", "5 worker slots")}
    assert view.warnings == ()
    assert releases_of([], []).live == {}
