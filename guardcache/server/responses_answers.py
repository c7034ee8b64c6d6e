"""What the Responses API's answers say (``POST /v1/responses``): the ``response`` object of a plain
turn and the numbered server-sent events of a streamed one. No I/O here; the turn is run to them by
``server/turns.py``, the bytes written by ``server/responses.py``.

Why apart from ``server/answers.py``: these are OpenAI's Responses shapes, which share nothing with
the chat completion's but guardcache's report of the turn, and that report (the ``guardcache``
object, the ``X-Guardcache-*`` headers) is made by ``server/answers.py`` for every route and handed
in here whole, so a client reads it the same way whichever route it called.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from guardcache.llm.wire import dumps_body
from guardcache.server.ids import new_id
from guardcache.server.responses import JSONResponse

if TYPE_CHECKING:
    from guardcache.rails.runner import GuardedTurn


def response_id() -> str:
    return f"resp_{new_id()}"


def _now() -> int:
    return int(time.time())


def response_usage(usage: Any) -> dict[str, Any]:
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
    """The answer's ``message`` item: whole when completed; announced empty while its text streams
    (the text follows in deltas, and the item is sent whole again at its end)."""
    content = (
        [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
        if status == "completed"
        else []
    )
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def call_item(
    call: Mapping[str, Any], status: str = "completed", arguments: str | None = None
) -> dict[str, Any]:
    """A ``function_call`` item of a chat tool call the rails let through (``arguments``: what a
    streamed item announces before its arguments are sent)."""
    function = call.get("function") or {}
    return {
        "type": "function_call",
        "id": f"fc_{new_id()}" if status != "completed" else call.get("_item_id") or f"fc_{new_id()}",
        "call_id": call.get("id") or f"call_{new_id()}",
        "name": function.get("name"),
        "arguments": function.get("arguments") if arguments is None else arguments,
        "status": status,
    }


def response_output(text: str, calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A whole answer's ``output``: its message (an empty answer is still one, unless it is only
    tool calls), then its tool calls."""
    output = [message_item(f"msg_{new_id()}", text)] if text or not calls else []
    output += [call_item(call) for call in calls]
    return output


@dataclass(frozen=True, slots=True)
class ResponseShape:
    """One response's fixed fields: made when the request is read, so its id and ``created_at``
    are the request's, whenever the answer is shaped (the model and the echoed request fields)."""

    model: str
    echo: Mapping[str, Any]
    id: str = field(default_factory=response_id)
    created: int = field(default_factory=_now)

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
            "usage": response_usage(usage) if status != "in_progress" else None,
        }
        if extension is not None:
            body["guardcache"] = extension
        return body


def plain_response(
    shape: ResponseShape,
    turn: GuardedTurn,
    text: str,
    report: Mapping[str, Any],
    headers: Mapping[str, str] | None,
) -> JSONResponse:
    """A plain turn's answer: its ``response`` object, with guardcache's ``report`` and ``headers``
    (``server/answers.py``'s :func:`~guardcache.server.answers.extension` and
    :func:`~guardcache.server.answers.headers`)."""
    output = response_output(text, turn.tool_calls)
    body = shape.body("completed", output, turn.usage, report, finish_reason=turn.finish_reason)
    return JSONResponse(body, headers=headers)


class ResponseEvents:
    """The server-sent events of one streamed response, numbered (``sequence_number``)."""

    __slots__ = ("_message", "_sequence", "_shape", "_text")

    def __init__(self, shape: ResponseShape) -> None:
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


__all__ = [
    "ResponseEvents",
    "ResponseShape",
    "call_item",
    "message_item",
    "plain_response",
    "response_id",
    "response_output",
    "response_usage",
]
