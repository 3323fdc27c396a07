"""Every public method of ``Admin`` has an awaitable counterpart on ``AsyncAdmin`` with the same parameters,
so a method added to the read model is not forgotten on the asyncio side."""

from __future__ import annotations

import inspect

from recruiter.admin import Admin
from recruiter.admin.async_api import AsyncAdmin


def public_methods(cls: type) -> dict[str, object]:
    return {name: member for name, member in vars(cls).items() if not name.startswith("_") and callable(member)}


def test_every_admin_method_has_an_awaitable_counterpart() -> None:
    missing = sorted(set(public_methods(Admin)) - set(public_methods(AsyncAdmin)))
    assert not missing, f"AsyncAdmin lacks {missing} (recruiter/admin/async_api.py)"
    for name, method in public_methods(Admin).items():
        counterpart = getattr(AsyncAdmin, name)
        assert inspect.iscoroutinefunction(counterpart), f"AsyncAdmin.{name} is not awaitable"
        assert inspect.signature(counterpart).parameters.keys() == inspect.signature(method).parameters.keys(), name
        for param, value in inspect.signature(method).parameters.items():
            theirs = inspect.signature(counterpart).parameters[param]
            assert (theirs.default, theirs.kind, theirs.annotation) == (value.default, value.kind, value.annotation), \
                f"AsyncAdmin.{name}({param}) differs from Admin.{name}"
        assert inspect.signature(counterpart).return_annotation == inspect.signature(method).return_annotation, name
