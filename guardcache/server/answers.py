"""What ``guardcache serve``'s answers say, shaped in one place: a turn's ``chat.completion`` and its
stream's ``chat.completion.chunk`` events, the ``guardcache`` object and the ``X-Guardcache-*``
headers every route reports a turn with, and the refusals and failures in OpenAI's error shape.

Why one place: the chat route, the Responses API and the gateways' routes report the same facts
(blocked or not, by which rail, with a verdict or without), and a client reads them the same way
whichever route it called. The OpenAI shapes themselves are :mod:`guardcache.openai_wire`'s (the
emulator writes the same); what is added here is guardcache's (the extension, the headers). The
Responses API's own shapes, which share nothing else with these, are
``server/responses_answers.py``'s, given this module's report. Bytes are written by
``server/responses.py``; no I/O here.

Stream events are bytes joined from fragments made once per completion (the head with the id,
model and creation time) or once per process (the fixed structure around a value), so a token costs
one encode of its text and one join. Every JSON value is written by the server's one encoder,
:func:`~guardcache.llm.wire.dumps_body` (compact UTF-8; orjson when installed, the same bytes
without it), as the plain answers are.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from guardcache.llm.wire import dumps_body
from guardcache.openai_wire import NO_USAGE, RequestError, completion_body, error_body, usage_body
from guardcache.server.ids import new_id
from guardcache.server.responses import JSONResponse

if TYPE_CHECKING:
    from guardcache.rails.runner import GuardedTurn

# -- a turn's report: the guardcache object, the headers, the outcome --------------------------------


def extension(turn: GuardedTurn, config_id: str, no_verdict: tuple[str, ...]) -> dict[str, Any]:
    """The ``guardcache`` object of an answer. ``no_verdict`` (the turn's ``checks.no_verdict``)
    appears only when a rail got no verdict, so a turn whose rails all answered has the shape it
    always had and costs nothing more."""
    if turn.blocked is None:
        if not no_verdict:
            return {"blocked": False, "config_id": config_id}
        return {"blocked": False, "no_verdict": list(no_verdict), "config_id": config_id}
    report = {
        "blocked": True,
        "direction": turn.blocked,
        "rail": turn.rail,
        "reason": turn.turn.checks.reason,
        "config_id": config_id,
    }
    if no_verdict:
        report["no_verdict"] = list(no_verdict)
    return report


NO_VERDICT_HEADER = "X-Guardcache-No-Verdict"
_HEADER_SAFE = " !\"#$&'()*+/:;<=>?@[\\]^`{|}"
"""What a flow keeps as it is in the header: printable ASCII but the list's separator (",") and the
escape ("%"); anything else is percent-encoded, so any flow name makes a valid, splittable header."""


def headers(turn: GuardedTurn, no_verdict: tuple[str, ...]) -> dict[str, str] | None:
    """``X-Guardcache-Blocked`` when blocked, ``X-Guardcache-No-Verdict`` when a rail got no
    verdict (its flows, ``", "``-separated); None (no dict) when neither."""
    if turn.blocked is None and not no_verdict:
        return None
    found = {"X-Guardcache-Blocked": turn.blocked} if turn.blocked else {}
    if no_verdict:
        found[NO_VERDICT_HEADER] = ", ".join(quote(flow, safe=_HEADER_SAFE) for flow in no_verdict)
    return found


def outcome(turn: GuardedTurn) -> str:
    """The ``outcome`` label of an answered turn in the metrics."""
    return f"blocked_{turn.blocked}" if turn.blocked else "allowed"


# -- chat completions ------------------------------------------------------------------------------


def completion_id() -> str:
    return f"chatcmpl-{new_id()}"


def usage_of(usage: Any) -> dict[str, Any] | None:
    """OpenAI's ``usage`` of the main model's (None when it reported none)."""
    if usage is None:
        return None
    return usage_body(usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)


def plain(turn: GuardedTurn, text: str, config_id: str, model: str) -> JSONResponse:
    """A plain turn's answer: its ``chat.completion`` and headers."""
    no_verdict = turn.turn.checks.no_verdict
    report = extension(turn, config_id, no_verdict)
    found = headers(turn, no_verdict)
    cid = completion_id()
    body = chat_completion(cid, model, text, turn.finish_reason, turn.usage, report, turn.tool_calls)
    return JSONResponse(body, headers=found)


def chat_completion(
    cid: str,
    model: str,
    content: str,
    finish_reason: str | None,
    usage: Any,
    report: Mapping[str, Any],
    tool_calls: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A served turn's ``chat.completion``, with guardcache's ``report`` (:func:`extension`)."""
    counts = (
        dict(NO_USAGE)
        if usage is None
        else usage_body(usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)
    )
    body = completion_body(cid, model, content, finish_reason or "stop", counts, tool_calls=tool_calls)
    body["guardcache"] = report
    return body


DONE = b"data: [DONE]\n\n"

_CHOICE = b',"choices":[{"index":0,"delta":'
_FIRST = b'{"role":"assistant","content":'
_NEXT = b'{"content":'
_CONTENT_END = b'},"logprobs":null,"finish_reason":null}]}\n\n'
_FINAL = b'{},"logprobs":null,"finish_reason":'
_EXTENSION = b'}],"guardcache":'
_USAGE = b',"choices":[],"usage":'
_END = b"}\n\n"


class ChunkWriter:
    """Renders the events of one streamed completion (``openai_wire.chunk_body``'s shapes)."""

    __slots__ = ("_first", "_head", "_next", "_prefix")

    def __init__(self, cid: str, model: str, created: int | None = None) -> None:
        made = int(time.time()) if created is None else created
        head = {"id": cid, "object": "chat.completion.chunk", "created": made, "model": model}
        self._head = b"data: " + dumps_body(head)[:-1]  # the object left open: '{"id":...,"model":"m"'
        self._prefix = self._head + _CHOICE
        self._first = self._prefix + _FIRST
        self._next = self._prefix + _NEXT

    def content(self, text: str, *, first: bool = False) -> bytes:
        return (self._first if first else self._next) + dumps_body(text) + _CONTENT_END

    def tool_calls(self, calls: Sequence[Mapping[str, Any]]) -> bytes:
        """One event with every tool call whole (``delta.tool_calls`` by index): they are judged
        whole, so nothing of them streams before the rails let them through."""
        delta = {
            "tool_calls": [
                {"index": i, "id": c.get("id"), "type": "function", "function": c.get("function")}
                for i, c in enumerate(calls)
            ]
        }
        return self._prefix + dumps_body(delta)[:-1] + _CONTENT_END  # _CONTENT_END closes the delta

    def final(self, finish_reason: str, report: Mapping[str, Any]) -> bytes:
        """The last choice event: an empty delta, the finish reason, and guardcache's extension."""
        return b"".join(
            (self._prefix, _FINAL, dumps_body(finish_reason), _EXTENSION, dumps_body(report), _END)
        )

    def usage(self, usage: Any) -> bytes:
        """The usage-only event (``stream_options.include_usage``): empty ``choices``."""
        return self._head + _USAGE + dumps_body(usage_of(usage)) + _END

    def end(self, stream: GuardedTurn, config_id: str, include_usage: bool) -> bytes:
        """The last events of a stream that ended: the judged tool calls (whole, in one event) if
        any, the finish reason with guardcache's extension, usage if asked, ``[DONE]``."""
        report = extension(stream, config_id, stream.turn.checks.no_verdict)
        tail = self.final(stream.finish_reason or "stop", report)
        if stream.tool_calls:
            tail = self.tool_calls(stream.tool_calls) + tail
        return tail + self.usage(stream.usage) + DONE if include_usage else tail + DONE


def error_event(message: str, type_: str, code: str | None = None) -> bytes:
    """An error after the stream started (headers already sent): the OpenAI clients raise it."""
    return b"data: " + dumps_body(error_body(message, type_, code)) + b"\n\n"


def broken_stream(kind: str) -> bytes:
    """The end of a stream the main model broke (``kind``: its error class): an error event, then
    ``[DONE]``."""
    return error_event(main_model_failed_mid_stream(kind), "upstream_error", "main_model_failed") + DONE


# -- refusals and failures -------------------------------------------------------------------------


def error_response(exc: RequestError) -> JSONResponse:
    """A refused request's answer: OpenAI's error object, the refusal's status and headers."""
    return JSONResponse(exc.body(), exc.status, exc.headers or None)


def main_model_failed(kind: str, status: int) -> JSONResponse:
    """The main model failed before the answer started: its error class only (backend addresses
    stay in the log)."""
    message = f"The main model did not answer ({kind}); see the server log for this request id."
    return JSONResponse(error_body(message, "upstream_error", "main_model_failed"), status)


def main_model_failed_mid_stream(kind: str) -> str:
    """What a stream that the main model broke ends with (as an error event of the route's kind)."""
    return f"The main model failed mid-stream ({kind}); the answer is incomplete."


def not_found(path: str) -> JSONResponse:
    return JSONResponse(error_body(f"No route {path}.", "invalid_request_error", "not_found"), 404)


def method_not_allowed(method: str, allowed: Sequence[str] = ()) -> JSONResponse:
    body = error_body(f"Method {method} is not allowed here.", "invalid_request_error", "method_not_allowed")
    return JSONResponse(body, 405, {"Allow": ", ".join(allowed)} if allowed else None)


def internal_error() -> JSONResponse:
    """A bug: a 500 that names only the request id, never an answer that reads as passed."""
    return JSONResponse(
        error_body("Internal error; see the server log for this request id.", "server_error"), 500
    )


__all__ = [
    "DONE",
    "NO_VERDICT_HEADER",
    "ChunkWriter",
    "broken_stream",
    "chat_completion",
    "completion_id",
    "error_event",
    "error_response",
    "extension",
    "headers",
    "internal_error",
    "main_model_failed",
    "main_model_failed_mid_stream",
    "method_not_allowed",
    "not_found",
    "outcome",
    "plain",
    "usage_of",
]
