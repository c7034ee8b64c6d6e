"""The OpenAI chat-completions request as ``guardcache serve`` reads it (the answers' shapes are
``server/answers.py``'s, on :mod:`guardcache.openai_wire`).

Requests are validated strictly but leniently about what they may carry: every field the OpenAI
clients send is accepted, generation parameters are type-checked and passed to the main model, and
anything that cannot be answered through the rails is a 400 in OpenAI's error shape (never a 500,
never an unguarded answer): the legacy ``functions``/``function_call`` (``tools`` are served: the
rails judge the tool calls and tool results, ``server/tools.py``), ``n`` > 1, content parts other
than text (images too, unless the request's config has a vision rail: ``parse_chat``'s ``images``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from guardcache.generation import GENERATION_FIELDS, FieldRule
from guardcache.openai_wire import RequestError, kind_of
from guardcache.prompts.parts import ImageLimits
from guardcache.rails.messages import Message, read_messages
from guardcache.server.tools import read_tool_params


def _check(rule: FieldRule) -> Callable[[Any], bool]:
    """A generation field's rule (guardcache.generation: the one config and serve share) as a check
    whose doc says what it expects."""

    def check(value: Any) -> bool:
        return rule.accepts(value)

    check.__doc__ = rule.expected
    return check


PASSED_THROUGH: Mapping[str, Any] = {name: _check(rule) for name, rule in GENERATION_FIELDS.items()}
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
        # A body that opens with "{" and a non-NUL byte is UTF-8 to json.loads (json.detect_encoding:
        # no BOM, not UTF-16 or UTF-32), decoded as it decodes it: its Python-level sniffing skipped.
        text = raw.decode("utf-8", "surrogatepass") if raw[:1] == b"{" and raw[1:2] != b"\x00" else raw
        body = json.loads(text)
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
        raise RequestError(f"The request body must be a JSON object, not {kind_of(body)}.")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list):
        raise RequestError(
            f"'messages' must be an array of messages, not {kind_of(raw_messages)}.", param="messages"
        )
    if not raw_messages:
        raise RequestError("'messages' is empty: send at least one user message.", param="messages")
    request = ChatRequest([])
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError(f"'model' must be a string, not {kind_of(model)}.", param="model")
    request.model = model or None
    request.config_id = _config_id(body)
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise RequestError(f"'stream' must be true or false, not {kind_of(stream)}.", param="stream")
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
    # Asked before the tools and the messages are read (it may refuse the request's config).
    limits = None if images is None else _image_limits(raw_messages, images, request.config_id, request.model)
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
        params.update(read_tool_params(body))
    request.params = params
    # The messages last: what the rails read (rails/messages.py), with the config's image limits.
    try:
        request.messages = read_messages(raw_messages, images=limits)
    except (TypeError, ValueError) as exc:
        text = str(exc)
        param = text.split(":", 1)[0].split(" ", 1)[0] if text.startswith("messages[") else "messages"
        raise RequestError(f"{text}.", param=param) from None
    for message in request.messages:
        if message["role"] == "user":
            return request
    raise RequestError(
        "'messages' has no user message (role 'user'): there is nothing to answer.", param="messages"
    )


def read_chat(raw: bytes, images: ImagePolicy | None = None, max_depth: int = MAX_JSON_DEPTH) -> ChatRequest:
    """:func:`parse_chat` of the body ``raw`` (:func:`parse_json`, within ``max_depth``)."""
    body = parse_json(raw, max_depth)
    return parse_chat(body, images)


def _image_limits(
    raw_messages: list[Any], images: ImagePolicy, config_id: str | None, model: str | None
) -> ImageLimits | None:
    """The limits ``images`` gives the request's config (``config_id``, ``model``: the request's,
    validated), asked only when a message has an image part."""
    for m in raw_messages:  # a loop, not a generator: every request with an image policy pays it
        content = m.get("content") if type(m) is dict else None
        if type(content) is list and any(type(p) is dict and p.get("type") == "image_url" for p in content):
            break
    else:
        return None
    return images(config_id, model)


def _config_id(body: Mapping[str, Any]) -> str | None:
    """NeMo's server selects a config with ``config_id`` (or a one-element ``config_ids``)."""
    config_id = body.get("config_id")
    if config_id is not None and not isinstance(config_id, str):
        raise RequestError(f"'config_id' must be a string, not {kind_of(config_id)}.", param="config_id")
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


def _show(value: Any) -> str:
    if isinstance(value, str):
        return "a string"
    return json.dumps(value)[:40] if isinstance(value, int | float | bool) else kind_of(value)


__all__ = [
    "MAX_JSON_DEPTH",
    "PASSED_THROUGH",
    "REFUSED",
    "ChatRequest",
    "ImagePolicy",
    "parse_chat",
    "parse_json",
    "read_chat",
]
