"""The per-call value types keep every dataclass behaviour under their quicker ``__init__``
(``guardcache.llm.types.quick_init``): a value built on every backend call must stay the immutable,
comparable record callers rely on."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from guardcache.llm.response import Completion
from guardcache.llm.types import ChatResult, Usage, quick_init


@dataclasses.dataclass(slots=True, frozen=True)
class Reference:
    """What the generated dataclass does, beside the same class made with quick_init."""

    a: int
    b: str = "x"
    c: Any = None


@quick_init
@dataclasses.dataclass(slots=True, frozen=True)
class Quick:
    a: int
    b: str = "x"
    c: Any = None


def test_quick_init_takes_the_same_arguments_and_sets_the_same_values() -> None:
    for args, kwargs in (((1,), {}), ((1, "y"), {}), ((1,), {"c": [2]}), ((), {"a": 3, "b": "z", "c": 4})):
        ref, quick = Reference(*args, **kwargs), Quick(*args, **kwargs)
        assert dataclasses.astuple(ref) == dataclasses.astuple(quick)
    assert list(inspect.signature(Quick).parameters) == list(inspect.signature(Reference).parameters)
    with pytest.raises(TypeError):
        Quick()  # a required field stays required
    with pytest.raises(TypeError):
        Quick(1, "y", None, 5)  # no extra positional argument


@pytest.mark.parametrize(
    "value",
    [
        Usage(400, 8, 408, 12, "nemoguard", "nim"),
        ChatResult("hi", Usage(1, 2, 3), 0.5, "stop", 2, ()),
        Completion("hi", "stop", "m", None, ()),
    ],
)
def test_the_per_call_types_stay_frozen_comparable_and_copyable(value: Any) -> None:
    cls = type(value)
    again = cls(*dataclasses.astuple(value, tuple_factory=tuple)) if cls is Usage else copy.copy(value)
    assert again == value and hash(again) == hash(value)
    assert repr(again) == repr(value)
    assert pickle.loads(pickle.dumps(value)) == value
    first = dataclasses.fields(value)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, first, None)
    assert dataclasses.replace(value, **{first: getattr(value, first)}) == value
    assert not hasattr(value, "__dict__")  # still slotted


def test_quick_init_refuses_a_field_it_cannot_build() -> None:
    @dataclasses.dataclass(slots=True, frozen=True)
    class WithFactory:
        items: list[int] = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError, match="needs the generated __init__"):
        quick_init(WithFactory)
