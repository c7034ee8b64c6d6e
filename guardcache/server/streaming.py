"""Server-sent events in OpenAI's ``chat.completion.chunk`` format, ending with ``data: [DONE]``.

Every JSON value is written by the server's one encoder, :func:`~guardcache.llm.wire.dumps_body`
(compact UTF-8; orjson when installed, the same bytes without it), as the plain answers are
(:class:`~guardcache.server.responses.JSONResponse`). An event is bytes joined from fragments made
once per completion (the head with the id, model and creation time) or once per process (the fixed
structure around a value), so a token costs one encode of its text and one join.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from guardcache.llm.wire import dumps_body
from guardcache.server.protocol import error_body, usage_body

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
    """Renders the events of one streamed completion."""

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

    def final(self, finish_reason: str, extension: Mapping[str, Any]) -> bytes:
        """The last choice event: an empty delta, the finish reason, and guardcache's extension."""
        return b"".join(
            (self._prefix, _FINAL, dumps_body(finish_reason), _EXTENSION, dumps_body(extension), _END)
        )

    def usage(self, usage: Any) -> bytes:
        """The usage-only event (``stream_options.include_usage``): empty ``choices``."""
        return self._head + _USAGE + dumps_body(usage_body(usage)) + _END


def error_event(message: str, type_: str, code: str | None = None) -> bytes:
    """An error after the stream started (headers already sent): the OpenAI clients raise it."""
    return b"data: " + dumps_body(error_body(message, type_, code)) + b"\n\n"


__all__ = ["DONE", "ChunkWriter", "error_event"]
