"""The emulated main model's tool calls: a documented, deterministic trigger for agent turns.

Why: the demo, the tests and the benchmarks drive agent turns (a tool call, its result, the answer)
through ``guardcache serve`` without a real model, so the emulator must answer with a tool call
when asked to, always the same way for the same request.

The rules (only for a request that is not a guard prompt, i.e. the emulator standing in for a main
model):

1. **The last message is a tool result** (``role: "tool"``): the answer is text, ``The tool said:
   <its content>`` (an agent's loop then ends with that answer).
2. **The request offers function tools** (``tools``, and ``tool_choice`` is not ``"none"``) and the
   last message is the user's: each line of that message holding ``call_tool <name> [<arguments>]``
   becomes one tool call to ``<name>`` (any name: a name the request does not offer is how a test
   gets an unknown tool). ``<arguments>`` is the rest of the line: when it starts with ``{`` or
   ``[`` it is the call's ``arguments`` string exactly as written (so a test can make arguments
   that are not JSON, or not an object), otherwise ``{"input": "<the rest>"}``. With
   ``parallel_tool_calls: false`` only the first line counts.
3. No ``call_tool`` line, but ``tool_choice`` is ``"required"`` or names a function: one call to
   that function (``"required"``: the first tool offered) with ``{"input": "<the user's text>"}``.

Each call's id is ``call_`` and 24 hex digits of a SHA-256 of its position, name and arguments, so a
repeated request gets the same ids. The arguments are the completion's tokens: ``max_tokens`` cuts
them (``finish_reason: "length"``: a tool call cut off mid-stream), otherwise ``finish_reason`` is
``"tool_calls"``. A streamed answer sends each call's id and name first, then its arguments token by
token, as OpenAI does.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .tokens import message_text

TRIGGER = re.compile(r"\bcall_tool[ \t]+([A-Za-z_][A-Za-z0-9_.-]*)[ \t]*([^\n]*)")
"""``call_tool <name> [<arguments>]``, one per line of the user's last message."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the emulated model makes: its id, function name and arguments string."""

    id: str
    name: str
    arguments: str


def function_names(tools: Any) -> tuple[str, ...]:
    """The function names a request's ``tools`` offer, in order (anything else in it is ignored:
    the emulator accepts what a server would)."""
    names: list[str] = []
    if isinstance(tools, list):
        for tool in tools:
            function = tool.get("function") if isinstance(tool, Mapping) else None
            name = function.get("name") if isinstance(function, Mapping) else None
            if isinstance(name, str) and name:
                names.append(name)
    return tuple(names)


def tool_calls_for(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[str], tool_choice: Any, parallel: bool
) -> tuple[ToolCall, ...] | str | None:
    """What the main model answers when tools are involved: tool calls, a text (the answer to a
    tool result), or None (the request is not a tool turn: the usual rules decide)."""
    if not messages:
        return None
    last = messages[-1]
    if last.get("role") == "tool":
        return f"The tool said: {message_text(last.get('content'))}"
    if not tools or tool_choice == "none" or last.get("role") != "user":
        return None
    text = message_text(last.get("content"))
    wanted: list[tuple[str, str]] = []
    for match in TRIGGER.finditer(text):
        name, rest = match.group(1), match.group(2).strip()
        arguments = rest if rest.startswith(("{", "[")) else json.dumps({"input": rest})
        wanted.append((name, arguments))
    if not wanted:
        forced = _forced(tool_choice, tools)
        if forced is None:
            return None
        wanted.append((forced, json.dumps({"input": text})))
    if not parallel:
        wanted = wanted[:1]
    return tuple(ToolCall(_call_id(i, name, args), name, args) for i, (name, args) in enumerate(wanted))


def _forced(tool_choice: Any, tools: Sequence[str]) -> str | None:
    if tool_choice == "required":
        return tools[0]
    if isinstance(tool_choice, Mapping):
        function = tool_choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else tool_choice.get("name")
        if isinstance(name, str) and name:
            return name
    return None


def _call_id(index: int, name: str, arguments: str) -> str:
    digest = hashlib.sha256(f"{index}\x00{name}\x00{arguments}".encode()).hexdigest()
    return f"call_{digest[:24]}"


__all__ = ["TRIGGER", "ToolCall", "function_names", "tool_calls_for"]
