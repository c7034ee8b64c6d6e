"""Tool calling in ``guardcache serve``'s requests: ``tools``, ``tool_choice``, ``parallel_tool_calls``.

They reach the main model unchanged (the rails judge what comes of them: the main model's tool calls
and the tool results a client sends back, see :mod:`guardcache.rails.tools`), but they are read
strictly first, each problem a 400 naming the field, so the server never forwards what it could not
judge the answer to: at most :data:`~guardcache.rails.tools.MAX_TOOLS` tools, each a ``function``
with a name (OpenAI's ``[A-Za-z0-9_-]{1,64}``), its ``parameters`` an object, a ``tool_choice`` of
``none``/``auto``/``required`` or a function the request offers. The JSON depth of a tool's schema
is bounded with the whole body's (``protocol.parse_json``, whose 400 names the field).

Chat completions spell a tool ``{"type": "function", "function": {"name", "description",
"parameters", "strict"}}``; the Responses API spells it flat (``{"type": "function", "name", ...}``)
and its ``tool_choice`` ``{"type": "function", "name"}``: :func:`read_tool_params` reads either
(``flat``) and returns the chat completions' spelling, what the main model is sent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from guardcache.openai_wire import RequestError, kind_of
from guardcache.rails.tools import MAX_TOOLS

TOOL_FIELDS = ("tools", "tool_choice", "parallel_tool_calls")
"""The request fields this module reads."""

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_CHOICES = ("none", "auto", "required")


def read_tool_params(body: Mapping[str, Any], *, flat: bool = False) -> dict[str, Any]:
    """The tool fields of a request body, checked, as the main model's parameters (those given and
    not null); a :class:`~guardcache.openai_wire.RequestError` (a 400) naming the field otherwise.
    ``flat``: the Responses API's spelling of a tool and of a named ``tool_choice``."""
    params: dict[str, Any] = {}
    names: list[str] = []
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise RequestError(f"'tools' must be an array of tools, not {kind_of(tools)}.", param="tools")
        if len(tools) > MAX_TOOLS:
            raise RequestError(
                f"'tools' offers {len(tools)} tools; at most {MAX_TOOLS} are accepted.",
                param="tools",
                code="too_many_tools",
            )
        chat_tools = [_tool(tool, f"tools[{i}]", flat) for i, tool in enumerate(tools)]
        names = [tool["function"]["name"] for tool in chat_tools]
        if chat_tools:
            params["tools"] = chat_tools
    choice = body.get("tool_choice")
    if choice is not None:
        params["tool_choice"] = _choice(choice, names, flat)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None:
        if not isinstance(parallel, bool):
            raise RequestError(
                f"'parallel_tool_calls' must be true or false, not {kind_of(parallel)}.",
                param="parallel_tool_calls",
            )
        params["parallel_tool_calls"] = parallel
    return params


def _tool(tool: Any, where: str, flat: bool) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise RequestError(f"'{where}' must be an object, not {kind_of(tool)}.", param=where)
    kind = tool.get("type")
    if kind != "function":
        raise RequestError(
            f"'{where}.type': only function tools are served through the rails (got {kind_of(kind)}"
            f"{' ' + repr(kind) if isinstance(kind, str) else ''}).",
            param=f"{where}.type",
            code="unsupported_tool",
        )
    function: Any
    if flat:
        function = {k: v for k, v in tool.items() if k != "type"}
        at = where
    else:
        function = tool.get("function")
        at = f"{where}.function"
        if not isinstance(function, dict):
            raise RequestError(f"'{at}' must be an object with the function's name.", param=at)
    name = function.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise RequestError(
            f"'{at}.name' must be a function name of 1 to 64 letters, digits, '_' or '-'.", param=f"{at}.name"
        )
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise RequestError(f"'{at}.parameters' must be a JSON schema object.", param=f"{at}.parameters")
    description = function.get("description")
    if description is not None and not isinstance(description, str):
        raise RequestError(f"'{at}.description' must be a string.", param=f"{at}.description")
    if flat:
        return {"type": "function", "function": {k: v for k, v in function.items() if v is not None}}
    return tool


def _choice(choice: Any, names: list[str], flat: bool) -> Any:
    if isinstance(choice, str):
        if choice not in _CHOICES:
            raise RequestError(
                f"'tool_choice' must be one of {', '.join(_CHOICES)} or a function, not {choice!r}.",
                param="tool_choice",
            )
        if choice == "required" and not names:
            raise RequestError("'tool_choice' is 'required' but 'tools' offers none.", param="tool_choice")
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice if flat else choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or name not in names:
            raise RequestError(
                "'tool_choice' names a function that 'tools' does not offer.", param="tool_choice"
            )
        return {"type": "function", "function": {"name": name}}
    raise RequestError(
        f"'tool_choice' must be one of {', '.join(_CHOICES)} or a function tool, not {kind_of(choice)}.",
        param="tool_choice",
    )


__all__ = ["TOOL_FIELDS", "read_tool_params"]
