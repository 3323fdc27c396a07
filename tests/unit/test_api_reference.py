"""The Python API reference (docs/reference/python-api.md) is complete: every name a user imports from
``recruiter`` or ``recruiter.admin`` has its mkdocstrings entry, every public method of ``Admin`` and
``AsyncAdmin`` is documented, and every value they return is one of the rendered names.

mkdocstrings renders an entry's public members (``filters: ["!^_"]``, no ``members:`` list) and, with
``show_if_no_docstring``, a dataclass's fields; ``mkdocs build --strict`` (CI) checks every entry resolves.
"""

from __future__ import annotations

import inspect
import re

import yaml

import recruiter
import recruiter.admin
from recruiter.admin import Admin, AsyncAdmin
from tests.conftest import REPO

PAGE = REPO / "docs" / "reference" / "python-api.md"
BUILTIN_TYPES = {"None", "bool", "int", "str", "list", "datetime"}


def entries() -> set[str]:
    return set(re.findall(r"^::: (\S+)$", PAGE.read_text(), flags=re.M))


def public_methods(cls: type) -> dict[str, object]:
    return {name: member for name, member in vars(cls).items() if not name.startswith("_") and callable(member)}


def test_every_exported_name_has_an_entry() -> None:
    missing = [f"recruiter.{name}" for name in recruiter.__all__ if f"recruiter.{name}" not in entries()]
    missing += [f"recruiter.admin.{name}" for name in recruiter.admin.__all__
                if f"recruiter.admin.{name}" not in entries()]
    assert not missing, f"not in {PAGE.name}: {missing}"


def test_every_admin_method_is_documented_and_returns_rendered_values() -> None:
    undocumented = [f"{cls.__name__}.{name}" for cls in (Admin, AsyncAdmin)
                    for name, method in public_methods(cls).items() if not inspect.getdoc(method)]
    assert not undocumented, f"no docstring to render: {undocumented}"
    unrendered = set()
    for method in public_methods(Admin).values():
        returned = str(inspect.signature(method).return_annotation)  # a string: annotations are postponed
        unrendered |= {name.rsplit(".", 1)[-1] for name in re.findall(r"[\w.]+", returned)} - BUILTIN_TYPES
    unrendered -= {*recruiter.admin.__all__, *recruiter.__all__}
    assert not unrendered, f"returned by Admin, in neither recruiter nor recruiter.admin (not rendered): {unrendered}"


def test_entries_render_every_public_member() -> None:
    assert "members:" not in PAGE.read_text()  # no entry lists a subset of its members
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text().replace("!!python", "#"))
    handler = next(p for p in config["plugins"] if isinstance(p, dict) and "mkdocstrings" in p)
    options = handler["mkdocstrings"]["handlers"]["python"]["options"]
    assert options["filters"] == ["!^_"]
    assert options["show_if_no_docstring"] is True
