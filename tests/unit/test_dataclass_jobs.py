"""Jobs written as dataclasses or attrs classes store their fields as parameters, and any job
class whose stored parameters would not rebuild it is refused at enqueue, with one line."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from datetime import UTC, datetime
from pathlib import Path

import attrs
import pytest

from recruiter.domain.job import JobOptions, JobRefused, build_job_document
from recruiter.domain.workable import JobContext, Workable, workable_from_document
from recruiter.testing import run_inline
from tests.processes.test_readme import readme_files

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


@dataclasses.dataclass
class Resize(Workable):
    image_id: str
    width: int = 800
    sizes: list[int] = dataclasses.field(default_factory=list)
    cache: dict[str, int] = dataclasses.field(default_factory=dict, init=False)  # not an argument

    def execute(self, ctx: JobContext) -> dict[str, object]:
        return {"image": self.image_id, "width": self.width, "sizes": self.sizes}


@dataclasses.dataclass(frozen=True)
class FrozenJob(Workable):
    name: str

    def execute(self) -> str:
        return self.name.upper()


@attrs.define
class AttrsJob(Workable):
    invoice: str
    _retries_left: int = 3  # attrs takes it as `retries_left`

    def execute(self) -> list[object]:
        return [self.invoice, self._retries_left]


class Forgetful(Workable):
    """Keeps its argument but says it has no parameters: a worker could not build it."""

    def __init__(self, target: str) -> None:
        self.target = target

    def export_parameters(self) -> dict[str, object]:
        return {}

    def execute(self) -> None:
        pass


class Doubling(Workable):
    """Stores what its constructor derives, so every rebuild is another job."""

    def __init__(self, n: int) -> None:
        self.n = n * 2

    def export_parameters(self) -> dict[str, object]:
        return {"n": self.n}

    def execute(self) -> int:
        return self.n


def stored(workable: Workable) -> dict[str, object]:
    return dict(build_job_document(workable, JobOptions(), NOW)["workable"]["parameters"])


def test_a_dataclass_stores_the_fields_its_constructor_takes() -> None:
    job = Resize("img-1", sizes=[64, 128])
    assert stored(job) == {"image_id": "img-1", "width": 800, "sizes": [64, 128]}
    again = workable_from_document(build_job_document(job, JobOptions(), NOW)["workable"])  # type: ignore[arg-type]
    assert again == job


def test_a_frozen_dataclass_and_an_attrs_class_round_trip() -> None:
    assert stored(FrozenJob("x")) == {"name": "x"}
    assert stored(AttrsJob("INV-7", retries_left=1)) == {"invoice": "INV-7", "retries_left": 1}
    rebuilt = workable_from_document(build_job_document(AttrsJob("INV-7", 1), JobOptions(), NOW)["workable"])  # type: ignore[arg-type]
    assert rebuilt == AttrsJob("INV-7", 1)


def test_a_dataclass_job_runs_inline_with_its_fields() -> None:
    result = run_inline(Resize("img-2", width=10))
    assert result.why == "done"
    assert result.result == {"image": "img-2", "width": 10, "sizes": []}
    assert run_inline(AttrsJob("INV-8")).result == ["INV-8", 3]


def test_a_class_whose_parameters_cannot_rebuild_it_is_refused_at_enqueue() -> None:
    with pytest.raises(JobRefused, match=r"Forgetful cannot be rebuilt from its stored parameters \[\]: TypeError"):
        build_job_document(Forgetful("db-1"), JobOptions(), NOW)


def test_a_class_that_rebuilds_into_another_job_is_refused_at_enqueue() -> None:
    with pytest.raises(JobRefused, match=r"Doubling rebuilt from its stored parameters exports"):
        build_job_document(Doubling(2), JobOptions(), NOW)


def test_the_refusal_is_one_line() -> None:
    with pytest.raises(JobRefused) as caught:
        build_job_document(Forgetful("db-1"), JobOptions(), NOW)
    assert "\n" not in str(caught.value)


def test_the_guides_dataclass_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/guide/writing-jobs.md's resize.py (tests/processes/test_readme.py runs the other files)."""
    (tmp_path / "resize.py").write_text(readme_files()["resize.py"])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "resize", raising=False)
    resize = importlib.import_module("resize")
    assert stored(resize.ResizeImage("img-9")) == {"image_id": "img-9", "widths": [320, 640]}
    assert run_inline(resize.ResizeImage("img-9", widths=[10])).result == ["img-9@10"]
