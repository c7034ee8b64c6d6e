"""Values the LLM client returns: what one chat completion cost and what it said.

They are frozen so a result can be stored in a cache and handed to many callers without any of them
being able to change what the others see.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

_T = TypeVar("_T", bound=type)


def quick_init(cls: _T) -> _T:
    """``cls`` (a frozen, slotted dataclass) with an ``__init__`` that sets each field through its
    slot's descriptor: the same parameters, defaults and values as the generated one, at about half
    its cost (that one calls ``object.__setattr__`` per field, looked up each time). Everything else
    is the dataclass's: equality, hash, repr, ``replace``, and no assignment after ``__init__``.
    For the values built on every call (a result, its usage, the completion read)."""
    names: list[str] = []
    namespace: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.default_factory is not dataclasses.MISSING or not field.init:
            raise TypeError(f"quick_init: {cls.__name__}.{field.name} needs the generated __init__")
        name = field.name
        namespace[f"_set_{name}"] = cls.__dict__[name].__set__
        if field.default is dataclasses.MISSING:
            names.append(name)
        else:
            namespace[f"_default_{name}"] = field.default
            names.append(f"{name}=_default_{name}")
    lines = "".join(f"    _set_{field.name}(self, {field.name})\n" for field in dataclasses.fields(cls))
    exec(f"def __init__(self, {', '.join(names)}):\n{lines}", namespace)  # (text made here, of field names)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = {**cls.__dict__["__init__"].__annotations__}
    setattr(cls, "__init__", init)  # noqa: B010 (mypy refuses an assignment to __init__)
    return cls


@quick_init
@dataclass(slots=True, frozen=True)
class Usage:
    """Token accounting of one chat completion, as the server reported it.

    ``cached_prompt_tokens`` is ``usage.prompt_tokens_details.cached_tokens``: the prompt tokens the
    server took from its KV cache (prefix reuse). Servers omit it when it is 0 (vLLM) or never send
    it, so absent or null reads as 0 — it is a measurement, never a promise.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_prompt_tokens: int = 0
    model: str | None = None
    provider: str | None = None


@quick_init
@dataclass(slots=True, frozen=True)
class ChatResult:
    """The answer of one :meth:`ChatClient.complete` call.

    ``duration`` is measured with ``time.monotonic()`` over the whole call, retries and backoff
    included, because that is the latency the guarded request actually paid. ``attempts`` counts
    HTTP requests sent (1 = no retry). ``tool_calls``: the answer's tool calls as the model sent
    them (a main model's client only, ``ChatClient(tool_calls=True)``; unchecked and unvalidated:
    the rails judge them, ``guardcache.rails.tools``).
    """

    content: str
    usage: Usage
    duration: float
    finish_reason: str | None = None
    attempts: int = 1
    tool_calls: tuple[Any, ...] = ()


__all__ = ["ChatResult", "Usage"]
