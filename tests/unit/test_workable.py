"""Workables: capturing constructor arguments, rebuilding from documents, calling execute."""

from __future__ import annotations

from typing import Any

import pytest

from recruiter.domain.naming import UnknownClass
from recruiter.domain.workable import JobContext, Workable, accepts_context, workable_from_document

HERE = __name__


class Positional(Workable):
    def __init__(self, a: int, b: str, c: float = 1.5) -> None:
        self.a, self.b, self.c = a, b, c

    def execute(self, ctx: JobContext) -> tuple[int, str, float]:
        return self.a, self.b, self.c


class KeywordOnly(Workable):
    def __init__(self, name: str, *, loud: bool = False) -> None:
        self.name, self.loud = name, loud

    def execute(self) -> str:
        return self.name.upper() if self.loud else self.name


class WithKwargs(Workable):
    def __init__(self, first: int, **rest: Any) -> None:
        self.first, self.rest = first, rest

    def execute(self) -> None:
        pass


class Base(Workable):
    def __init__(self, x: int, y: int = 0) -> None:
        self.x, self.y = x, y

    def execute(self) -> int:
        return self.x + self.y


class Middle(Base):
    def __init__(self, label: str, x: int) -> None:
        super().__init__(x * 10, y=1)
        self.label = label


class Outer(Middle):
    def __init__(self, label: str) -> None:
        super().__init__(label.upper(), x=len(label))
        self.original = label


class Inherits(Base):
    """No constructor of its own: inherits Base's."""


class Custom(Workable):
    """Stores a derived form, not its constructor arguments."""

    def __init__(self, items: list[int]) -> None:
        self.items = sorted(items)

    def export_parameters(self) -> dict[str, Any]:
        return {"csv": ",".join(map(str, self.items))}

    @classmethod
    def from_parameters(cls, parameters: dict[str, Any]) -> Custom:
        return cls([int(s) for s in parameters["csv"].split(",") if s])

    def execute(self) -> int:
        return sum(self.items)


class NoInit(Workable):
    def execute(self) -> str:
        return "ran"


class NotAWorkable:
    def __init__(self, **kwargs: Any) -> None:
        pass


class OtherMethod(Workable):
    method = "run"

    def __init__(self) -> None:
        pass

    def run(self, ctx: JobContext) -> None:
        pass


def doc_of(w: Workable) -> dict[str, Any]:
    return w.to_document()


# -- capture -------------------------------------------------------------------------


def test_positional_arguments_are_stored_by_name() -> None:
    assert Positional(1, "two", 3.0).export_parameters() == {"a": 1, "b": "two", "c": 3.0}


def test_keyword_arguments_are_stored() -> None:
    assert Positional(b="two", a=1).export_parameters() == {"a": 1, "b": "two"}
    assert KeywordOnly("ann", loud=True).export_parameters() == {"name": "ann", "loud": True}


def test_defaults_not_given_are_left_to_the_class() -> None:
    # Only what the caller passed is stored; the worker's class supplies defaults.
    w = Positional(1, "two")
    assert w.export_parameters() == {"a": 1, "b": "two"}
    rebuilt = workable_from_document(w.to_document())
    assert isinstance(rebuilt, Positional)
    assert (rebuilt.a, rebuilt.b, rebuilt.c) == (1, "two", 1.5)


def test_var_keyword_arguments_are_flattened() -> None:
    w = WithKwargs(1, colour="red", size=3)
    assert w.export_parameters() == {"first": 1, "colour": "red", "size": 3}
    rebuilt = workable_from_document(w.to_document())
    assert isinstance(rebuilt, WithKwargs)
    assert rebuilt.first == 1
    assert rebuilt.rest == {"colour": "red", "size": 3}


def test_var_positional_constructor_is_rejected_at_class_definition() -> None:
    with pytest.raises(TypeError, match=r"takes \*values; a Workable constructor needs named parameters"):

        class Star(Workable):
            def __init__(self, *values: int) -> None:
                self.values = values


def test_subclass_chain_captures_the_outermost_call() -> None:
    w = Outer("abc")
    assert w.export_parameters() == {"label": "abc"}
    assert (w.label, w.x, w.y, w.original) == ("ABC", 30, 1, "abc")

    rebuilt = workable_from_document(w.to_document())
    assert type(rebuilt) is Outer
    assert (rebuilt.label, rebuilt.x, rebuilt.y, rebuilt.original) == ("ABC", 30, 1, "abc")
    assert rebuilt.export_parameters() == {"label": "abc"}


def test_middle_of_a_chain_captures_its_own_call() -> None:
    w = Middle("m", 2)
    assert w.export_parameters() == {"label": "m", "x": 2}
    assert (w.x, w.y) == (20, 1)


def test_inherited_constructor_captures_too() -> None:
    w = Inherits(4, y=5)
    assert w.export_parameters() == {"x": 4, "y": 5}
    rebuilt = workable_from_document(w.to_document())
    assert type(rebuilt) is Inherits
    assert rebuilt.execute() == 9


def test_instances_do_not_share_parameters() -> None:
    a, b = Positional(1, "a"), Positional(2, "b")
    params = a.export_parameters()
    params["a"] = 99  # a copy: mutating it changes nothing stored
    assert a.export_parameters() == {"a": 1, "b": "a"}
    assert b.export_parameters() == {"a": 2, "b": "b"}


def test_workable_without_constructor_has_no_parameters() -> None:
    assert NoInit().export_parameters() == {}
    rebuilt = workable_from_document(NoInit().to_document())
    assert isinstance(rebuilt, NoInit)
    assert rebuilt.execute() == "ran"


def test_to_document_shape() -> None:
    assert doc_of(KeywordOnly("x")) == {
        "class": f"{HERE}:KeywordOnly",
        "parameters": {"name": "x"},
        "method": "execute",
    }
    assert doc_of(OtherMethod())["method"] == "run"


# -- custom representation ----------------------------------------------------------


def test_custom_export_and_from_parameters() -> None:
    w = Custom([3, 1, 2])
    doc = w.to_document()
    assert doc["parameters"] == {"csv": "1,2,3"}
    rebuilt = workable_from_document(doc)
    assert isinstance(rebuilt, Custom)
    assert rebuilt.items == [1, 2, 3]
    assert rebuilt.execute() == 6


def test_custom_from_parameters_with_empty_list() -> None:
    rebuilt = workable_from_document(Custom([]).to_document())
    assert isinstance(rebuilt, Custom)
    assert rebuilt.items == []


# -- rebuilding from documents ---------------------------------------------------------


def test_unknown_module_is_unknown_class() -> None:
    with pytest.raises(UnknownClass, match=r"cannot import module 'nonexistent\.module'"):
        workable_from_document({"class": "nonexistent.module:X", "parameters": {}})


def test_unknown_class_in_known_module_is_unknown_class() -> None:
    with pytest.raises(UnknownClass, match=f"module '{HERE}' has no attribute 'Missing'"):
        workable_from_document({"class": f"{HERE}:Missing", "parameters": {}})


def test_malformed_name_is_unknown_class() -> None:
    with pytest.raises(UnknownClass, match="is not of the form 'module:Qualname'"):
        workable_from_document({"class": "nodots", "parameters": {}})


def test_dotted_name_is_accepted() -> None:
    rebuilt = workable_from_document({"class": f"{HERE}.NoInit", "parameters": {}})
    assert isinstance(rebuilt, NoInit)


def test_non_workable_class_is_type_error() -> None:
    with pytest.raises(TypeError, match=r"is not a recruiter\.Workable subclass"):
        workable_from_document({"class": f"{HERE}:NotAWorkable", "parameters": {}})
    with pytest.raises(TypeError, match=r"is not a recruiter\.Workable subclass"):
        workable_from_document({"class": f"{HERE}:doc_of", "parameters": {}})


def test_wrong_parameters_raise_from_the_constructor() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'zzz'"):
        workable_from_document({"class": f"{HERE}:Positional", "parameters": {"a": 1, "b": "x", "zzz": 0}})


def test_missing_parameters_field_means_none() -> None:
    assert isinstance(workable_from_document({"class": f"{HERE}:NoInit"}), NoInit)
    assert isinstance(workable_from_document({"class": f"{HERE}:NoInit", "parameters": None}), NoInit)


# -- calling execute ------------------------------------------------------------------


def test_accepts_context() -> None:
    assert accepts_context(Positional(1, "b").execute) is True  # execute(self, ctx)
    assert accepts_context(KeywordOnly("a").execute) is False  # execute(self)
    assert accepts_context(OtherMethod().run) is True


def test_accepts_context_other_shapes() -> None:
    class Shapes:
        def var_args(self, *args: Any) -> None: ...

        def keyword_only(self, *, ctx: Any = None) -> None: ...

        async def coroutine(self, ctx: Any) -> None: ...

    shapes = Shapes()
    assert accepts_context(shapes.var_args) is True
    assert accepts_context(shapes.keyword_only) is False
    assert accepts_context(shapes.coroutine) is True
    assert accepts_context(lambda: None) is False
