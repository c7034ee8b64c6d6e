"""Server-sent events in OpenAI's ``chat.completion.chunk`` format, ending with ``data: [DONE]``.

Chunks are written from pre-rendered fragments (the id, model and creation time are fixed for one
completion), so a token costs one ``json.dumps`` of its text.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from guardcache.server.protocol import error_body, usage_body

DONE = b"data: [DONE]\n\n"


class ChunkWriter:
    """Renders the events of one streamed completion."""

    __slots__ = ("_head", "_prefix")

    def __init__(self, cid: str, model: str, created: int | None = None) -> None:
        made = int(time.time()) if created is None else created
        self._head = (
            f'{{"id":"{cid}","object":"chat.completion.chunk","created":{made},"model":{json.dumps(model)}'
        )
        self._prefix = self._head + ',"choices":[{"index":0,"delta":'

    def content(self, text: str, *, first: bool = False) -> bytes:
        role = '"role":"assistant",' if first else ""
        return (
            f'data: {self._prefix}{{{role}"content":{json.dumps(text, ensure_ascii=False)}}},'
            '"logprobs":null,"finish_reason":null}]}\n\n'
        ).encode()

    def final(self, finish_reason: str, extension: Mapping[str, Any]) -> bytes:
        """The last choice event: an empty delta, the finish reason, and guardcache's extension."""
        ext = json.dumps(extension, ensure_ascii=False, separators=(",", ":"))
        return (
            f'data: {self._prefix}{{}},"logprobs":null,"finish_reason":"{finish_reason}"}}],'
            f'"guardcache":{ext}}}\n\n'
        ).encode()

    def usage(self, usage: Any) -> bytes:
        """The usage-only event (``stream_options.include_usage``): empty ``choices``."""
        body = json.dumps(usage_body(usage), separators=(",", ":"))
        return f'data: {self._head},"choices":[],"usage":{body}}}\n\n'.encode()


def error_event(message: str, type_: str, code: str | None = None) -> bytes:
    """An error after the stream started (headers already sent): the OpenAI clients raise it."""
    return f"data: {json.dumps(error_body(message, type_, code))}\n\n".encode()


__all__ = ["DONE", "ChunkWriter", "error_event"]
