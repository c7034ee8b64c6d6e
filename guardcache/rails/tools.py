"""Tool calls and tool results, read for the rails: what an agent's turn adds to a chat turn.

An agent's tool results are where indirect prompt injection enters (a web page, a file, an API's
answer: text nobody trusted), and its tool calls are where harm leaves (a shell command, an e-mail,
a payment). So both are judged like the texts of a chat turn, through the same cached checks:

- a **tool result** (a ``role: "tool"`` message, wherever it stands in the conversation) is judged
  by the input rails as ``user_input`` (or by ``rails.tool_input.flows`` when the config has them)
  before the main model reads it; its ``history`` is the conversation before it;
- a **tool call** of the main model is judged by the output rails as ``bot_response`` (or by
  ``rails.tool_output.flows``), one check per call, before the caller sees it: the text judged is
  :func:`call_text`, the function's name and its parsed arguments written back as JSON (so the same
  arguments spelled twice are one call, and escapes such as ``\\u006b`` are judged as what the tool
  will read);
- a tool call that cannot be judged (arguments that are not a JSON object, a function the request
  did not offer, a call cut off by ``max_tokens`` or by a stream that broke) is **blocked without a
  verdict**: it is never passed on, and no guard is asked about something the tool would not get.

This module is pure (no I/O): the turn (``guardcache.rails.runner``) decides when each runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

TOOL_CALL_FORMAT = "tool call format"
"""The flow name of the no-verdict block of a malformed tool call (no guard judged it: the call
could not be read), in ``explain()``, the metrics and the served ``guardcache`` object."""

MALFORMED = "MalformedToolCallError"
"""The error class of that block (``RailResult.error_kind``)."""

MAX_TOOLS = 128
"""The most function tools one request may offer (OpenAI's own limit)."""


def tool_names(tools: Any) -> frozenset[str]:
    """The function names a request's ``tools`` (OpenAI's shape) offer: the only tools the main
    model may call. Anything unreadable offers nothing (so a call to it is unknown: blocked)."""
    names: set[str] = set()
    if isinstance(tools, Sequence) and not isinstance(tools, str):
        for tool in tools:
            function = tool.get("function") if isinstance(tool, Mapping) else None
            name = function.get("name") if isinstance(function, Mapping) else None
            if isinstance(name, str) and name:
                names.add(name)
    return frozenset(names)


def call_text(name: str, arguments: Any) -> str:
    """The text a guard judges for one tool call: ``name(<arguments as compact JSON>)``."""
    return f"{name}({json.dumps(arguments, ensure_ascii=False)})"


def call_texts(calls: Sequence[Any], offered: frozenset[str]) -> tuple[list[str], str | None]:
    """The text of each call to judge, or the reason the calls cannot be judged (then the turn is
    blocked without a verdict; the reason names the call and what is wrong, never its text)."""
    texts: list[str] = []
    for i, call in enumerate(calls):
        where = f"tool_calls[{i}]"
        if not isinstance(call, Mapping):
            return [], f"{where} is not an object"
        kind = call.get("type", "function")
        if kind != "function":
            return [], f"{where}.type is not 'function'"
        function = call.get("function")
        if not isinstance(function, Mapping):
            return [], f"{where}.function is not an object"
        name = function.get("name")
        if not isinstance(name, str) or not name:
            return [], f"{where}.function.name is not a name"
        if name not in offered:
            return [], f"{where} calls a function the request did not offer"
        raw = function.get("arguments")
        if not isinstance(raw, str):
            return [], f"{where}.function.arguments is not a string"
        try:
            arguments = json.loads(raw)
        except (ValueError, RecursionError):
            return [], f"{where}.function.arguments is not JSON"
        if not isinstance(arguments, dict):
            return [], f"{where}.function.arguments is not a JSON object"
        texts.append(call_text(name, arguments))
    return texts, None


def tool_results(messages: Sequence[Mapping[str, Any]]) -> list[int]:
    """The positions of the tool results (``role: "tool"``) in a turn's messages."""
    return [i for i, message in enumerate(messages) if message["role"] == "tool"]


def read_tool_calls(value: Any, where: str) -> list[dict[str, Any]]:
    """An assistant message's ``tool_calls`` in a request (the conversation so far), checked for
    OpenAI's shape and passed to the main model as they are. ``TypeError``/``ValueError`` naming
    the field. (These calls were the caller's to run already; the main model's new ones are judged.)
    """
    if not isinstance(value, list):
        raise TypeError(f"{where} must be a list of tool calls, not {type(value).__name__}")
    calls: list[dict[str, Any]] = []
    for j, call in enumerate(value):
        at = f"{where}[{j}]"
        if not isinstance(call, Mapping):
            raise TypeError(f"{at} must be an object, not {type(call).__name__}")
        function = call.get("function")
        if not isinstance(function, Mapping):
            raise ValueError(f"{at}.function: a tool call needs a function (name and arguments)")
        if not isinstance(function.get("name"), str):
            raise ValueError(f"{at}.function.name must be a string")
        if not isinstance(function.get("arguments", ""), str):
            raise ValueError(f"{at}.function.arguments must be a string (JSON)")
        if not isinstance(call.get("id", ""), str):
            raise ValueError(f"{at}.id must be a string")
        calls.append(dict(call))
    return calls


def from_langchain(calls: Iterable[Any], invalid: Iterable[Any] = ()) -> list[dict[str, Any]]:
    """LangChain's ``AIMessage.tool_calls`` (``{"name", "args", "id"}``) and
    ``invalid_tool_calls`` (``{"name", "args": str, "id", "error"}``) in OpenAI's shape. An invalid
    call keeps its arguments as the model wrote them, so it fails :func:`call_texts`."""
    out: list[dict[str, Any]] = []
    for call in calls:
        args = call.get("args") if isinstance(call, Mapping) else None
        out.append(_openai_call(call, json.dumps(args if args is not None else {})))
    for call in invalid:
        args = call.get("args") if isinstance(call, Mapping) else None
        out.append(_openai_call(call, args if isinstance(args, str) else ""))
    return out


def _openai_call(call: Any, arguments: str) -> dict[str, Any]:
    name = call.get("name") if isinstance(call, Mapping) else None
    call_id = call.get("id") if isinstance(call, Mapping) else None
    return {
        "id": call_id or "",
        "type": "function",
        "function": {"name": name if isinstance(name, str) else "", "arguments": arguments},
    }


def to_langchain(calls: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Checked calls (OpenAI's shape, arguments valid JSON objects) as LangChain's ``tool_calls``."""
    return [
        {
            "name": call["function"]["name"],
            "args": json.loads(call["function"]["arguments"]),
            "id": call.get("id") or None,
            "type": "tool_call",
        }
        for call in calls
    ]


__all__ = [
    "MALFORMED",
    "MAX_TOOLS",
    "TOOL_CALL_FORMAT",
    "call_text",
    "call_texts",
    "from_langchain",
    "read_tool_calls",
    "to_langchain",
    "tool_names",
    "tool_results",
]
