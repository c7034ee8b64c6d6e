"""The OpenAI chat-completions wire format as ``guardcache serve`` reads and writes it.

Requests are validated strictly but leniently about what they may carry: every field the OpenAI
clients send is accepted, generation parameters are type-checked and passed to the main model, and
anything that cannot be answered through the rails is a 400 in OpenAI's error shape (never a 500,
never an unguarded answer): the legacy ``functions``/``function_call`` (``tools`` are served: the
rails judge the tool calls and tool results, ``server/tools.py``), ``n`` > 1, content parts other
than text (images too, unless the request's config has a vision rail: ``parse_chat``'s ``images``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from guardcache.prompts.parts import ImageLimits
from guardcache.rails.messages import Message, last_index, read_messages
from guardcache.server.ids import new_id
from guardcache.server.tools import ToolFieldError, read_tool_params


class RequestError(Exception):
    """A request that cannot be served: answered with ``status`` and OpenAI's error body."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        type: str = "invalid_request_error",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.code = code
        self.type = type
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.code, self.param)


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _number(low: float, high: float) -> Any:
    def check(value: Any) -> bool:
        return (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and low <= value <= high
        )

    check.__doc__ = f"a number from {low:g} to {high:g}"
    return check


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


_positive_int.__doc__ = "a whole number > 0"


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_int.__doc__ = "a whole number"


def _stop(value: Any) -> bool:
    if isinstance(value, str):
        return True
    return isinstance(value, list) and 0 < len(value) <= 4 and all(isinstance(v, str) for v in value)


_stop.__doc__ = "a string or a list of up to 4 strings"


def _object(value: Any) -> bool:
    return isinstance(value, dict)


_object.__doc__ = "an object"


def _string(value: Any) -> bool:
    return isinstance(value, str)


_string.__doc__ = "a string"

PASSED_THROUGH: Mapping[str, Any] = {
    "temperature": _number(0, 2),
    "top_p": _number(0, 1),
    "max_tokens": _positive_int,
    "max_completion_tokens": _positive_int,
    "stop": _stop,
    "seed": _int,
    "presence_penalty": _number(-2, 2),
    "frequency_penalty": _number(-2, 2),
    "logit_bias": _object,
    "response_format": _object,
    "user": _string,
}
"""Request fields passed to the main model (when not null), with the check each must pass."""

REFUSED: Mapping[str, str] = {
    "functions": "the legacy function calling is not served through the rails; send 'tools'",
    "function_call": "the legacy function calling is not served through the rails; send 'tool_choice'",
}
"""Fields that, when set, make a request one the rails cannot guard."""

_PASSED_NAMES = frozenset(PASSED_THROUGH)
_REFUSED_NAMES = frozenset(REFUSED)
_TOOL_NAMES = frozenset(("tools", "tool_choice", "parallel_tool_calls"))


@dataclass(slots=True)
class ChatRequest:
    """A validated chat-completions request."""

    messages: list[Message]
    model: str | None = None
    config_id: str | None = None
    stream: bool = False
    include_usage: bool = False
    params: dict[str, Any] = field(default_factory=dict)


MAX_JSON_DEPTH = 64
"""The default limit on how deeply a request body nests arrays and objects (``--max-json-depth``)."""


def parse_json(raw: bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The decoded body; a 400 when it is not JSON or nests arrays and objects deeper than
    ``max_depth``.

    Why a depth limit: the decoder recurses once per level, so a body nested thousands deep raised
    RecursionError (a 500 with a traceback in the log), and anything that walks the value later
    would recurse as deep. The check costs two byte counts per request: a body with at most
    ``max_depth`` brackets cannot nest deeper, so only bodies with more are walked (iteratively).
    """
    try:
        body = json.loads(raw)
    except RecursionError:
        raise _too_deep(max_depth) from None
    except (ValueError, UnicodeDecodeError):
        raise RequestError(
            "The request body is not valid JSON; send a JSON object "
            '(e.g. {"model": "...", "messages": [{"role": "user", "content": "Hello"}]}).',
            code="invalid_json",
        ) from None
    if raw.count(b"[") + raw.count(b"{") > max_depth:
        where = _deeper_than(body, max_depth)
        if where is not None:
            raise _too_deep(max_depth, where or None)
    return body


_PATH_PARTS = 4
"""How much of the path to a too-deep value a 400 names (``tools[0].function.parameters``)."""


def _deeper_than(value: Any, limit: int) -> str | None:
    """Where ``value`` nests lists and dicts more than ``limit`` levels deep (itself is level 1):
    the first :data:`_PATH_PARTS` steps of the path to such a value ("" for the body itself), or
    None when it does not."""
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 1, ())]
    while stack:
        node, depth, path = stack.pop()
        if depth > limit:
            return _path(path)
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1, path if len(path) >= _PATH_PARTS else (*path, key)))
    return None


def _path(path: tuple[str | int, ...]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _too_deep(limit: int, param: str | None = None) -> RequestError:
    return RequestError(
        f"The request body nests arrays and objects deeper than this server accepts ({limit} levels)"
        + (f", in '{param}'." if param else "."),
        code="json_too_deep",
        param=param,
    )


ImagePolicy = Callable[[str | None, str | None], ImageLimits | None]
"""``(config_id, model) -> `` the image limits of the config the request goes to
(``LLMRails.image_limits``: None unless a vision rail judges images); may raise ``RequestError``."""


def parse_chat(body: Any, images: ImagePolicy | None = None) -> ChatRequest:
    """Validate a decoded request body; raises :class:`RequestError` naming the field.

    Image parts are a 400 naming the part unless ``images`` says the request's config judges them
    (then a malformed or oversized image is the 400, naming the part)."""
    if not isinstance(body, dict):
        raise RequestError(f"The request body must be a JSON object, not {_kind(body)}.")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list):
        raise RequestError(
            f"'messages' must be an array of messages, not {_kind(raw_messages)}.", param="messages"
        )
    if not raw_messages:
        raise RequestError("'messages' is empty: send at least one user message.", param="messages")
    limits = _image_limits(body, raw_messages, images) if images is not None else None
    try:
        messages = read_messages(raw_messages, images=limits)
    except (TypeError, ValueError) as exc:
        text = str(exc)
        param = text.split(":", 1)[0].split(" ", 1)[0] if text.startswith("messages[") else "messages"
        raise RequestError(f"{text}.", param=param) from None
    if last_index(messages, "user") is None:
        raise RequestError(
            "'messages' has no user message (role 'user'): there is nothing to answer.", param="messages"
        )
    request = ChatRequest(messages)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError(f"'model' must be a string, not {_kind(model)}.", param="model")
    request.model = model or None
    request.config_id = _config_id(body)
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise RequestError(f"'stream' must be true or false, not {_kind(stream)}.", param="stream")
    request.stream = bool(stream)
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise RequestError("'stream_options' must be an object.", param="stream_options")
        usage = options.get("include_usage", False)
        if not isinstance(usage, bool):
            raise RequestError(
                "'stream_options.include_usage' must be true or false.", param="stream_options.include_usage"
            )
        request.include_usage = usage
    present = body.keys()
    # A body names a few of these fields at most: look them up only when one is there, instead of
    # 15 lookups of absent fields on every request.
    if not present.isdisjoint(_REFUSED_NAMES):
        for name, why in REFUSED.items():
            value = body.get(name)
            if value is not None and value != [] and not (name == "function_call" and value == "none"):
                raise RequestError(f"'{name}': {why}.", param=name, code="unsupported_parameter")
    n = body.get("n")
    if n is not None and n != 1:
        raise RequestError("'n': only one choice (n=1) is served through the rails.", param="n")
    params: dict[str, Any] = {}
    if not present.isdisjoint(_PASSED_NAMES):
        for name, check in PASSED_THROUGH.items():  # in this order, so an error names the same field
            value = body.get(name)
            if value is None:
                continue
            if not check(value):
                raise RequestError(f"'{name}' must be {check.__doc__}, not {_show(value)}.", param=name)
            params[name] = value
    if not present.isdisjoint(_TOOL_NAMES):  # tools for the main model (the rails judge its calls)
        params.update(tool_params(body))
    request.params = params
    return request


def tool_params(body: Mapping[str, Any], *, flat: bool = False) -> dict[str, Any]:
    """``server.tools.read_tool_params`` with its errors as 400s (``RequestError``)."""
    try:
        return read_tool_params(body, flat=flat)
    except ToolFieldError as exc:
        raise RequestError(exc.message, param=exc.param, code=exc.code) from None


def _image_limits(
    body: Mapping[str, Any], raw_messages: list[Any], images: ImagePolicy
) -> ImageLimits | None:
    """The limits ``images`` gives the request's config, asked only when a message has an image part."""
    for m in raw_messages:  # a loop, not a generator: every request with an image policy pays it
        content = m.get("content") if type(m) is dict else None
        if type(content) is list and any(type(p) is dict and p.get("type") == "image_url" for p in content):
            break
    else:
        return None
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError(f"'model' must be a string, not {_kind(model)}.", param="model")
    return images(_config_id(body), model or None)


def _config_id(body: Mapping[str, Any]) -> str | None:
    """NeMo's server selects a config with ``config_id`` (or a one-element ``config_ids``)."""
    config_id = body.get("config_id")
    if config_id is not None and not isinstance(config_id, str):
        raise RequestError(f"'config_id' must be a string, not {_kind(config_id)}.", param="config_id")
    ids = body.get("config_ids")
    if ids is not None:
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise RequestError("'config_ids' must be an array of strings.", param="config_ids")
        if len(ids) > 1:
            raise RequestError(
                "'config_ids': combining configs is not supported; send one config_id.", param="config_ids"
            )
        if ids:
            if config_id is not None and config_id != ids[0]:
                raise RequestError("'config_id' and 'config_ids' name different configs.", param="config_ids")
            config_id = ids[0]
    return config_id or None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


kind_of = _kind
"""What kind of JSON value ``value`` is, for an error message (``"an array"``, ``"null"``...)."""


def _show(value: Any) -> str:
    if isinstance(value, str):
        return "a string"
    return json.dumps(value)[:40] if isinstance(value, int | float | bool) else _kind(value)


# -- responses ---------------------------------------------------------------------------------------


def completion_id() -> str:
    return f"chatcmpl-{new_id()}"


def usage_body(usage: Any) -> dict[str, int] | None:
    if usage is None:
        return None
    body = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }
    return body


def completion_body(
    cid: str,
    model: str,
    content: str,
    finish_reason: str | None,
    usage: Any,
    extension: Mapping[str, Any],
    tool_calls: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A ``chat.completion``; with ``tool_calls`` (judged by the rails), its message holds them and
    its content is null when there is no text, as OpenAI's."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message = {
            "role": "assistant",
            "content": content or None,
            "tool_calls": [dict(c) for c in tool_calls],
        }
    return {
        "id": cid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason or "stop",
                "logprobs": None,
            }
        ],
        "usage": usage_body(usage) or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        "guardcache": extension,
    }


__all__ = [
    "MAX_JSON_DEPTH",
    "PASSED_THROUGH",
    "REFUSED",
    "ChatRequest",
    "ImagePolicy",
    "RequestError",
    "completion_body",
    "completion_id",
    "error_body",
    "kind_of",
    "parse_chat",
    "parse_json",
    "tool_params",
]
