"""``POST /v1/responses``: OpenAI's Responses API, one guarded turn exactly as a chat turn.

The Responses API is what the openai SDK's ``client.responses`` and the OpenAI Agents SDK
(``openai-agents``) speak by default. guardcache translates a request to the main model's chat
completions and runs it through the config's rails as ``/v1/chat/completions`` does (the same
:class:`~guardcache.rails.runner.GuardedTurn`, caches, metrics and ``guardcache`` object):

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

The answer is a ``response`` object (``output``: a ``message`` with an ``output_text`` part and/or
``function_call`` items, the tool calls the rails let through; ``usage`` in input/output tokens);
``stream: true`` sends its events (``response.created``, ``response.in_progress``,
``response.output_item.added``, ``response.content_part.added``, ``response.output_text.delta``...,
``response.function_call_arguments.delta``/``.done``, ``response.output_item.done``,
``response.completed``), each ``event: <type>`` and ``data: <json>`` with its ``sequence_number``.
A blocked turn is a normal, completed answer whose text is the refusal (as the chat route's), with
the ``guardcache`` object (``blocked``, ``direction``, ``rail``, ``reason``, ``no_verdict``) in the
response and the ``X-Guardcache-*`` headers: a client (and the Agents SDK, which fails a run on an
``incomplete`` response) reads the refusal as the answer. A main model that stops at
``max_output_tokens`` makes an ``incomplete`` response (``incomplete_details.reason:
"max_output_tokens"``), as OpenAI's.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp

from guardcache.errors import BackendError
from guardcache.llm.wire import dumps_body
from guardcache.openai_wire import RequestError, kind_of
from guardcache.rails.messages import last_index, read_messages
from guardcache.rails.runner import GuardedTurn
from guardcache.rails.streaming import GuardedStream
from guardcache.server import answers
from guardcache.server.answers import error_response
from guardcache.server.ids import new_id
from guardcache.server.protocol import PASSED_THROUGH, parse_json
from guardcache.server.responses import EventStream, JSONResponse, LastEvent
from guardcache.server.routes import Handlers
from guardcache.server.tools import read_tool_params
from guardcache.server.turns import first_piece

STATEFUL: Mapping[str, str] = {
    "previous_response_id": "a previous response's id",
    "conversation": "a stored conversation",
}
"""Request fields that name state guardcache does not keep."""

IGNORED = ("include", "truncation", "reasoning", "prompt_cache_key", "safety_identifier", "service_tier")
"""Request fields accepted and not used (documented in the module docstring)."""

_ROLES = frozenset(("user", "assistant", "system", "developer"))
_TEXT_PARTS = frozenset(("input_text", "output_text", "text"))


@dataclass(slots=True)
class ResponsesRequest:
    """A validated Responses request: the chat turn it becomes, and what its answer echoes."""

    messages: list[dict[str, Any]]
    params: dict[str, Any]
    model: str | None = None
    config_id: str | None = None
    stream: bool = False
    echo: dict[str, Any] = field(default_factory=dict)


def parse_responses(body: Any, images: Any = None) -> ResponsesRequest:
    """Validate a decoded ``/v1/responses`` body; a :class:`RequestError` (400) naming the field or
    item otherwise. ``images``: the chat route's image policy (``(config_id, model) -> limits``)."""
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
    if last_index(messages, "user") is None:
        raise RequestError("'input' has no user message: there is nothing to answer.", param="input")
    params = _params(body)
    echo = {
        "instructions": body.get("instructions"),
        "metadata": _metadata(body.get("metadata")),
        "tools": body.get("tools") or [],
        "tool_choice": body.get("tool_choice") or "auto",
        "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "max_output_tokens": body.get("max_output_tokens"),
    }
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
            shown = repr(kind) if isinstance(kind, str) else kind_of(kind)
            raise RequestError(
                f"'{where}' is an item of type {shown}, which guardcache does not serve (it reads "
                "messages, function_call and function_call_output items).",
                param=where,
                code="unsupported_item",
            )
    return out


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
        at = f"{where}.{name}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        else:
            shown = repr(kind) if isinstance(kind, str) else kind_of(part)
            raise RequestError(
                f"'{at}' is a part of type {shown}; only text parts can be checked here.",
                param=at,
                code="unsupported_part",
            )
    return "".join(texts)


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


def _params(body: Mapping[str, Any]) -> dict[str, Any]:
    """The main model's parameters, each checked as the chat route checks it."""
    params: dict[str, Any] = {}
    for name, target in (("temperature", "temperature"), ("top_p", "top_p"), ("user", "user")):
        value = body.get(name)
        if value is not None:
            check = PASSED_THROUGH[target]
            if not check(value):
                raise RequestError(f"'{name}' must be {check.__doc__}.", param=name)
            params[target] = value
    limit = body.get("max_output_tokens")
    if limit is not None:
        if not PASSED_THROUGH["max_tokens"](limit):
            raise RequestError("'max_output_tokens' must be a whole number > 0.", param="max_output_tokens")
        params["max_tokens"] = limit
    text = body.get("text")
    if text is not None:
        params.update(_text_format(text))
    params.update(read_tool_params(body, flat=True))
    return params


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


def _metadata(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if (
        not isinstance(value, dict)
        or len(value) > 16
        or not all(
            isinstance(k, str) and len(k) <= 64 and isinstance(v, str) and len(v) <= 512
            for k, v in value.items()
        )
    ):
        raise RequestError(
            "'metadata' must be an object of at most 16 strings (keys up to 64 characters, values "
            "up to 512).",
            param="metadata",
        )
    return value


# -- the answer ----------------------------------------------------------------------------------------


def response_id() -> str:
    return f"resp_{new_id()}"


def usage_body(usage: Any) -> dict[str, Any]:
    """The Responses API's usage (input/output tokens) of the main model's usage (zeros without)."""
    prompt = usage.prompt_tokens if usage is not None else 0
    completion = usage.completion_tokens if usage is not None else 0
    cached = usage.cached_prompt_tokens if usage is not None else 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = (
        [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
        if status == "completed"
        else []
    )
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def call_item(
    call: Mapping[str, Any], status: str = "completed", arguments: str | None = None
) -> dict[str, Any]:
    function = call.get("function") or {}
    return {
        "type": "function_call",
        "id": f"fc_{new_id()}" if status != "completed" else call.get("_item_id") or f"fc_{new_id()}",
        "call_id": call.get("id") or f"call_{new_id()}",
        "name": function.get("name"),
        "arguments": function.get("arguments") if arguments is None else arguments,
        "status": status,
    }


class _Shape:
    """One response's fixed fields (id, model, creation time, the echoed request fields)."""

    __slots__ = ("created", "echo", "id", "model")

    def __init__(self, model: str, echo: Mapping[str, Any]) -> None:
        self.id = response_id()
        self.created = int(time.time())
        self.model = model
        self.echo = echo

    def body(
        self,
        status: str,
        output: list[dict[str, Any]],
        usage: Any,
        extension: Mapping[str, Any] | None,
        *,
        finish_reason: str | None = None,
    ) -> dict[str, Any]:
        incomplete = None
        if status == "completed" and finish_reason == "length":
            status, incomplete = "incomplete", {"reason": "max_output_tokens"}
        body: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": None,
            "incomplete_details": incomplete,
            "model": self.model,
            "output": output,
            **self.echo,
            "usage": usage_body(usage) if status != "in_progress" else None,
        }
        if extension is not None:
            body["guardcache"] = extension
        return body


def _output(text: str, calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    output = [message_item(f"msg_{new_id()}", text)] if text or not calls else []
    output += [call_item(call) for call in calls]
    return output


class ResponsesHandler:
    """The ``/v1/responses`` route: a body in, a ``response`` (or its events, or a 4xx) out. Runs
    the turn as the chat route does (:class:`~guardcache.server.routes.Handlers`: its metrics,
    failures, headers and ``guardcache`` object)."""

    def __init__(self, handlers: Handlers) -> None:
        self.handlers = handlers
        self.state = handlers.state

    async def handle(self, raw: bytes) -> ASGIApp:
        started = time.monotonic()
        state = self.state
        handlers = self.handlers
        try:
            request = parse_responses(parse_json(raw, state.settings.max_json_depth), handlers.images)
            config_id = state.select(request.config_id, request.model)
        except RequestError as exc:
            state.metrics.refused(exc)
            return error_response(exc)
        runner = state.rails[config_id].runner
        shape = _Shape(state.main_models[config_id], request.echo)
        if not request.stream:
            turn = GuardedTurn(runner, request.messages, request.params)
            try:
                text = await turn.complete()
            except BaseException as exc:
                return handlers.turns.failed(config_id, exc, started, "plain")
            handlers.turns.observe(config_id, turn, started, "plain")
            no_verdict = turn.turn.checks.no_verdict
            body = shape.body(
                "completed",
                _output(text, turn.tool_calls),
                turn.usage,
                answers.extension(turn, config_id, no_verdict),
                finish_reason=turn.finish_reason,
            )
            return JSONResponse(body, headers=answers.headers(turn, no_verdict))
        stream = GuardedStream(runner, request.messages, request.params, stream_main=None)
        try:
            first = await first_piece(stream)
        except BaseException as exc:
            await stream.aclose()
            return handlers.turns.failed(config_id, exc, started, "stream")
        headers = answers.headers(stream, stream.turn.checks.no_verdict)
        return EventStream(self._events(config_id, shape, stream, first, started), headers)

    async def _events(
        self, config_id: str, shape: _Shape, stream: GuardedStream, first: str | None, started: float
    ) -> AsyncIterator[bytes]:
        events = _Events(shape)
        outcome: str | None = None
        try:
            yield events.start()
            text = (first or "") + stream.ready()
            if text:
                yield events.text(text)
            try:
                async for piece in stream:
                    yield events.text(piece + stream.ready())
            except BackendError as exc:
                outcome = "main_error"
                self.state.metrics.main_error(config_id, type(exc).__name__)
                yield LastEvent(events.error(answers.main_model_failed_mid_stream(type(exc).__name__)))
                return
            report = answers.extension(stream, config_id, stream.turn.checks.no_verdict)
            outcome = answers.outcome(stream)
            yield LastEvent(events.end(stream.tool_calls, stream.usage, report, stream.finish_reason))
        finally:
            await stream.aclose()
            first_at = stream.first_piece_at
            self.state.metrics.observe_turn(
                config_id,
                stream.turn,
                mode="stream",
                outcome=outcome or "client_left",
                seconds=time.monotonic() - started,
                first_piece=first_at - started if first_at is not None else None,
            )


class _Events:
    """The server-sent events of one streamed response, numbered (``sequence_number``)."""

    __slots__ = ("_message", "_sequence", "_shape", "_text")

    def __init__(self, shape: _Shape) -> None:
        self._shape = shape
        self._sequence = 0
        self._message: str | None = None  # the message item's id, once its first text came
        self._text: list[str] = []

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + dumps_body(data) + b"\n\n"

    def start(self) -> bytes:
        response = self._shape.body("in_progress", [], None, None)
        return self._event("response.created", response=response) + self._event(
            "response.in_progress", response=response
        )

    def _open_message(self) -> bytes:
        self._message = item_id = f"msg_{new_id()}"
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return self._event(
            "response.output_item.added", output_index=0, item=message_item(item_id, "", "in_progress")
        ) + self._event(
            "response.content_part.added", item_id=item_id, output_index=0, content_index=0, part=part
        )

    def text(self, delta: str) -> bytes:
        head = self._open_message() if self._message is None else b""
        self._text.append(delta)
        return head + self._event(
            "response.output_text.delta",
            item_id=self._message,
            output_index=0,
            content_index=0,
            delta=delta,
            logprobs=[],
        )

    def error(self, message: str) -> bytes:
        return self._event("error", code="main_model_failed", message=message, param=None)

    def end(
        self,
        calls: Sequence[Mapping[str, Any]],
        usage: Any,
        extension: Mapping[str, Any],
        finish_reason: str | None,
    ) -> bytes:
        out: list[bytes] = []
        output: list[dict[str, Any]] = []
        if self._message is None and not calls:
            out.append(self._open_message())  # an empty answer is still one message
        if self._message is not None:
            text = "".join(self._text)
            item_id = self._message
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            out.append(
                self._event(
                    "response.output_text.done",
                    item_id=item_id,
                    output_index=0,
                    content_index=0,
                    text=text,
                    logprobs=[],
                )
            )
            out.append(
                self._event(
                    "response.content_part.done", item_id=item_id, output_index=0, content_index=0, part=part
                )
            )
            done = message_item(item_id, text)
            out.append(self._event("response.output_item.done", output_index=0, item=done))
            output.append(done)
        for call in calls:  # judged whole: each goes out whole, its arguments in one delta
            index = len(output)
            item = call_item(call, "in_progress", "")
            item_id = item["id"]
            out.append(self._event("response.output_item.added", output_index=index, item=item))
            arguments = (call.get("function") or {}).get("arguments") or ""
            out.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item_id,
                    output_index=index,
                    delta=arguments,
                )
            )
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item_id,
                    output_index=index,
                    arguments=arguments,
                    name=item["name"],
                )
            )
            done = {**item, "arguments": arguments, "status": "completed"}
            out.append(self._event("response.output_item.done", output_index=index, item=done))
            output.append(done)
        response = self._shape.body("completed", output, usage, extension, finish_reason=finish_reason)
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        out.append(self._event(kind, response=response))
        return b"".join(out)


__all__ = ["IGNORED", "STATEFUL", "ResponsesHandler", "ResponsesRequest", "parse_responses"]
