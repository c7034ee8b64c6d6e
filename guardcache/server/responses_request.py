"""The Responses API request (``POST /v1/responses``) as ``guardcache serve`` reads it: the chat turn
it becomes (messages for the rails, parameters for the main model) and what its answer echoes. The
answers' shapes are ``server/responses_answers.py``'s; no I/O here.

Why a reader of its own, not ``parse_chat``'s: a Responses request spells a conversation as items
and its tools flat, and it may name state guardcache does not keep. It is read in one pass, its
parts checked as the chat route checks them (``server/protocol.py``'s parameter rules,
``server/tools.py``, :func:`~guardcache.rails.messages.read_messages`), each problem a 400 naming
the field or item:

- ``input``: a string (one user message) or a list of items: messages (``{"role", "content"}``,
  with or without ``"type": "message"``; content a string or ``input_text``/``output_text``/
  ``refusal`` parts, ``input_image`` when the config judges images), ``function_call`` (an
  assistant tool call) and ``function_call_output`` (a tool result: judged by the input rails
  before the main model reads it, as a chat turn's ``role: "tool"`` message). ``instructions`` is
  a system message first. An item of any other type (``reasoning``, ``item_reference``, a hosted
  tool's call...) is a 400 naming it, never ignored.
- ``tools`` (function tools, the Responses spelling), ``tool_choice``, ``parallel_tool_calls``,
  ``max_output_tokens`` (the main model's ``max_tokens``), ``temperature``, ``top_p``, ``user``,
  ``text.format`` (a ``json_schema``/``json_object`` format is the chat ``response_format``) go to
  the main model; ``metadata`` is echoed. ``include``, ``truncation``, ``reasoning``,
  ``prompt_cache_key``, ``safety_identifier`` and ``service_tier`` are accepted and not used.
- **guardcache keeps no conversation state**: ``previous_response_id``, ``conversation``,
  ``store: true`` and ``background: true`` are a 400 saying so (send the whole conversation in
  ``input``), never silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from guardcache.openai_wire import RequestError, kind_of
from guardcache.rails.messages import read_messages
from guardcache.server.protocol import PASSED_THROUGH, ImagePolicy
from guardcache.server.tools import read_tool_params

STATEFUL: Mapping[str, str] = {
    "previous_response_id": "a previous response's id",
    "conversation": "a stored conversation",
}
"""Request fields that name state guardcache does not keep."""

IGNORED = ("include", "truncation", "reasoning", "prompt_cache_key", "safety_identifier", "service_tier")
"""Request fields accepted and not used (documented in the module docstring)."""

MAX_METADATA = 16
"""At most this many ``metadata`` pairs, each key up to :data:`MAX_METADATA_KEY` characters and each
value up to :data:`MAX_METADATA_VALUE` (OpenAI's bounds: what is echoed stays small)."""
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512

_ROLES = frozenset(("user", "assistant", "system", "developer"))
_TEXT_PARTS = frozenset(("input_text", "output_text", "text"))
_PARAMS = ("temperature", "top_p", "user")
"""Fields passed to the main model under their own name, each checked by the chat route's rule."""


@dataclass(slots=True)
class ResponsesRequest:
    """A validated Responses request: the chat turn it becomes, and what its answer echoes."""

    messages: list[dict[str, Any]]
    params: dict[str, Any]
    model: str | None = None
    config_id: str | None = None
    stream: bool = False
    echo: dict[str, Any] = field(default_factory=dict)


def parse_responses(body: Any, images: ImagePolicy | None = None) -> ResponsesRequest:
    """Validate a decoded ``/v1/responses`` body; a :class:`RequestError` (400) naming the field or
    item otherwise. ``images``: the chat route's image policy (``(config_id, model) -> limits``).

    The order of the checks is the order of the 400s a request with several problems gets: the
    state it names, then the selection (model, config, stream), the conversation, and last what
    goes to the main model and what is echoed (:func:`_options`)."""
    if not isinstance(body, dict):
        raise RequestError(f"The request body must be a JSON object, not {kind_of(body)}.")
    for name, what in STATEFUL.items():
        if body.get(name) is not None:
            raise _stateless(name, f"'{name}' names {what}")
    if body.get("store") is True:
        raise _stateless("store", "'store: true' asks to store the response")
    if body.get("background") is True:
        raise _stateless("background", "'background: true' asks to run the response later")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError(f"'model' must be a string, not {kind_of(model)}.", param="model")
    config_id = body.get("config_id")
    if config_id is not None and not isinstance(config_id, str):
        raise RequestError(f"'config_id' must be a string, not {kind_of(config_id)}.", param="config_id")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise RequestError(f"'stream' must be true or false, not {kind_of(stream)}.", param="stream")
    raw_messages = _messages(body)
    limits = (
        images(config_id or None, model or None) if images is not None and _has_image(raw_messages) else None
    )
    try:
        messages = read_messages(raw_messages, "input", images=limits)
    except (TypeError, ValueError) as exc:
        text = str(exc)
        raise RequestError(f"{text}.", param=text.split(":", 1)[0].split(" ", 1)[0]) from None
    if not any(message["role"] == "user" for message in messages):
        raise RequestError("'input' has no user message: there is nothing to answer.", param="input")
    params, echo = _options(body)
    return ResponsesRequest(messages, params, model or None, config_id or None, bool(stream), echo)


def _stateless(param: str, what: str) -> RequestError:
    return RequestError(
        f"{what}, but guardcache keeps no conversation state: send the whole conversation in "
        "'input' (and leave 'store' false).",
        param=param,
        code="unsupported_parameter",
    )


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The chat messages of ``instructions`` and ``input``."""
    out: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise RequestError("'instructions' must be a string.", param="instructions")
        out.append({"role": "system", "content": instructions})
    raw = body.get("input")
    if isinstance(raw, str):
        out.append({"role": "user", "content": raw})
        return out
    if not isinstance(raw, list) or not raw:
        raise RequestError(
            f"'input' must be a string or a non-empty array of items, not {kind_of(raw)}.", param="input"
        )
    for i, item in enumerate(raw):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise RequestError(f"'{where}' must be an object, not {kind_of(item)}.", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            out.append(_message(item, where))
        elif kind == "function_call":
            call = _function_call(item, where)
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and last.get("tool_calls") is not None:
                last["tool_calls"].append(call)  # parallel calls: one assistant message
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise RequestError(f"'{where}.call_id' must be the call's id.", param=f"{where}.call_id")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "content": _text(item.get("output"), where, "output"),
                }
            )
        else:
            raise _unsupported_item(where, kind)
    return out


def _unsupported_item(where: str, kind: Any) -> RequestError:
    return RequestError(
        f"'{where}' is an item of type {repr(kind) if isinstance(kind, str) else kind_of(kind)}, "
        "which guardcache does not serve (it reads messages, function_call and "
        "function_call_output items).",
        param=where,
        code="unsupported_item",
    )


def _message(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in _ROLES:
        raise RequestError(
            f"'{where}.role' must be one of {', '.join(sorted(_ROLES))}, not {kind_of(role)}.",
            param=f"{where}.role",
        )
    content = item.get("content")
    if isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") == "input_image" for p in content
    ):
        return {
            "role": role,
            "content": [_image_or_text(p, f"{where}.content[{j}]") for j, p in enumerate(content)],
        }
    return {"role": role, "content": _text(content, where, "content")}


def _text(value: Any, where: str, name: str) -> str:
    """A message's content or a tool's output: a string, or text parts joined."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise RequestError(
            f"'{where}.{name}' must be a string or an array of text parts, not {kind_of(value)}.",
            param=f"{where}.{name}",
        )
    texts: list[str] = []
    for j, part in enumerate(value):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        else:
            raise _unsupported_part(f"{where}.{name}[{j}]", kind, part)
    return "".join(texts)


def _unsupported_part(at: str, kind: Any, part: Any) -> RequestError:
    return RequestError(
        f"'{at}' is a part of type {repr(kind) if isinstance(kind, str) else kind_of(part)}; only "
        "text parts can be checked here.",
        param=at,
        code="unsupported_part",
    )


def _image_or_text(part: Any, where: str) -> dict[str, Any]:
    """A part of a message with images, as the chat route's content part (the rails read it)."""
    if isinstance(part, dict) and part.get("type") == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str):
            raise RequestError(
                f"'{where}.image_url' must be a URL (https: or data:).", param=f"{where}.image_url"
            )
        return {"type": "image_url", "image_url": {"url": url}}
    return {"type": "text", "text": _text([part], where.rsplit(".", 1)[0], where.rsplit(".", 1)[1])}


def _has_image(messages: Sequence[Mapping[str, Any]]) -> bool:
    return any(isinstance(m.get("content"), list) for m in messages)


def _function_call(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
    if not isinstance(call_id, str) or not call_id:
        raise RequestError(f"'{where}.call_id' must be the call's id.", param=f"{where}.call_id")
    if not isinstance(name, str) or not name:
        raise RequestError(f"'{where}.name' must be the function's name.", param=f"{where}.name")
    if not isinstance(arguments, str):
        raise RequestError(f"'{where}.arguments' must be a string (JSON).", param=f"{where}.arguments")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _options(body: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The main model's parameters, each checked as the chat route checks it, and the fields the
    answer echoes (``metadata`` checked against OpenAI's bounds, since it is sent back whole)."""
    params: dict[str, Any] = {}
    for name in _PARAMS:
        value = body.get(name)
        if value is not None:
            check = PASSED_THROUGH[name]
            if not check(value):
                raise RequestError(f"'{name}' must be {check.__doc__}.", param=name)
            params[name] = value
    limit = body.get("max_output_tokens")
    if limit is not None:
        if not PASSED_THROUGH["max_tokens"](limit):
            raise RequestError("'max_output_tokens' must be a whole number > 0.", param="max_output_tokens")
        params["max_tokens"] = limit
    text = body.get("text")
    if text is not None:
        params.update(_text_format(text))
    params.update(read_tool_params(body, flat=True))
    metadata = body.get("metadata")
    if metadata is not None and not (
        isinstance(metadata, dict)
        and len(metadata) <= MAX_METADATA
        and all(
            isinstance(k, str)
            and len(k) <= MAX_METADATA_KEY
            and isinstance(v, str)
            and len(v) <= MAX_METADATA_VALUE
            for k, v in metadata.items()
        )
    ):
        raise RequestError(
            f"'metadata' must be an object of at most {MAX_METADATA} strings (keys up to "
            f"{MAX_METADATA_KEY} characters, values up to {MAX_METADATA_VALUE}).",
            param="metadata",
        )
    echo = {
        "instructions": body.get("instructions"),
        "metadata": {} if metadata is None else metadata,
        "tools": body.get("tools") or [],
        "tool_choice": body.get("tool_choice") or "auto",
        "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "max_output_tokens": body.get("max_output_tokens"),
    }
    return params, echo


def _text_format(text: Any) -> dict[str, Any]:
    fmt = text.get("format") if isinstance(text, dict) else None
    if fmt is None:
        if not isinstance(text, dict):
            raise RequestError("'text' must be an object.", param="text")
        return {}
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return {}
    if kind == "json_object":
        return {"response_format": {"type": "json_object"}}
    if kind == "json_schema":
        schema = {k: v for k, v in fmt.items() if k in ("name", "schema", "strict", "description")}
        return {"response_format": {"type": "json_schema", "json_schema": schema}}
    raise RequestError("'text.format.type' must be text, json_object or json_schema.", param="text.format")


__all__ = [
    "IGNORED",
    "MAX_METADATA",
    "MAX_METADATA_KEY",
    "MAX_METADATA_VALUE",
    "STATEFUL",
    "ResponsesRequest",
    "parse_responses",
]
