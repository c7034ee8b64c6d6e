"""A request before its turn: its body read within the size limit, and the JSON answer of a refusal.

Shared by :mod:`~guardcache.server.app` (the middleware reads the chat body and refuses requests)
and :mod:`~guardcache.server.routes` (the routes answer in JSON and refuse what does not parse);
it sits below both and imports neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.requests import ClientDisconnect
from starlette.types import Message, Receive

from guardcache.server.protocol import RequestError
from guardcache.server.responses import JSONResponse


def json_response(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """Compact UTF-8 JSON (the same bytes with or without orjson)."""
    return JSONResponse(body, status, headers)


def error_response(exc: RequestError) -> JSONResponse:
    """A refused request's answer: OpenAI's error object, the refusal's status and headers."""
    return json_response(exc.body(), exc.status, exc.headers or None)


async def read_body(receive: Receive, limit: int, first: Message | None = None) -> bytes:
    """The request body; 413 (a :class:`RequestError`) past ``limit`` bytes, ``ClientDisconnect``
    when the client leaves first. ``first``: a message the caller already received."""
    chunks: list[bytes] = []
    size = 0
    while True:
        if first is not None:
            message, first = first, None
        else:
            message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def too_large(limit: int) -> RequestError:
    return RequestError(
        f"The request body is larger than this server accepts ({limit} bytes).",
        status=413,
        code="request_too_large",
    )


def reject_reason(exc: RequestError) -> str:
    """The ``reason`` label of a refused request in ``guardcache_requests_rejected_total``."""
    if exc.status == 413:
        return "body_too_large"
    if exc.code in ("config_not_found", "model_not_found"):
        return "unknown_config"
    return "invalid"


__all__ = ["error_response", "json_response", "read_body", "reject_reason", "too_large"]
