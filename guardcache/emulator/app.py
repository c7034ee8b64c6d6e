"""The HTTP face of the emulator: a Starlette app over one ``Emulator``.

Routes (``/v1`` is what an OpenAI client's ``base_url`` points at):

- ``POST /v1/chat/completions`` (``stream: true`` -> SSE), ``POST /v1/classify``, ``GET /v1/models``:
  bearer token checked when ``api_key`` is configured (401 in OpenAI error shape).
- ``GET /v1/health/ready``, ``GET /v1/health/live``, ``GET /v1/metrics`` (Prometheus): no token.
- A body over ``max_body_bytes`` answers 413, and a chat prompt that does not fit ``max_model_len``
  ("This model's maximum context length is ..."), images sent to a model that is not ``vision``
  ("... is not a multimodal model") or an image that does not load answer 400, all in vLLM's flat
  error shape
  ``{"object": "error", "message", "type", "param", "code"}`` as the NIMs send it; other invalid
  requests answer 400 in the OpenAI shape.
- While the admin switch holds the server down, every ``/v1/*`` route answers 503 (OpenAI error
  shape, ``code: "service_unavailable"``); connections are not dropped, so "down" is distinguishable
  from the ``drop`` fault.
- ``/admin/*``: see ``admin.py``.

A request abandoned by its client (disconnect) is cancelled wherever it is waiting, so it frees its
running slot at once, exactly as a real server aborts a request whose client went away.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from guardcache.openai_wire import (
    RequestError,
    chunk_body,
    completion_body,
    error_body,
    usage_body,
    vllm_error_body,
)

from .admin import admin_routes
from .connection import (
    BodyTooLarge,
    CaptureTransport,
    ClientDisconnected,
    close_transport,
    drop_connection,
    read_json,
    until_disconnect,
)
from .engine import ContextLengthExceeded, Emulator, Generation
from .faults import Fault
from .images import ImageInputError
from .requests import ChatRequest
from .scheduler import EmulatorStopping

CHAT = "chat.completions"
CLASSIFY = "classify"


def create_app(emulator: Emulator) -> ASGIApp:
    """The ASGI app serving ``emulator``; wrap-free, ready for ``uvicorn.Config(app=...)``."""
    h = _Handlers(emulator)
    routes = [
        Route("/v1/chat/completions", h.chat, methods=["POST"]),
        Route("/v1/classify", h.classify, methods=["POST"]),
        Route("/v1/models", h.models, methods=["GET"]),
        Route("/v1/health/ready", h.ready, methods=["GET"]),
        Route("/v1/health/live", h.live, methods=["GET"]),
        Route("/v1/metrics", h.metrics, methods=["GET"]),
        *admin_routes(emulator),
    ]
    app = Starlette(routes=routes)
    app.state.emulator = emulator
    return CaptureTransport(app)


class _Handlers:
    def __init__(self, emulator: Emulator) -> None:
        self.emu = emulator
        self._created = int(time.time())

    # -- inference ------------------------------------------------------------------------

    async def chat(self, request: Request) -> Response:
        emu = self.emu
        refused = self._refuse(request, CHAT)
        if refused is not None:
            return refused
        try:
            chat = ChatRequest.from_body(
                await read_json(request, max_bytes=emu.config.max_body_bytes),
                default_model=emu.config.model,
                default_max_tokens=emu.config.default_max_tokens,
            )
        except ClientDisconnected:
            return self._gone(CHAT)
        except BodyTooLarge as exc:
            return self._too_large(CHAT, exc)
        except RequestError as exc:
            return self._error(CHAT, 400, str(exc), "invalid_request_error", None, exc.param)
        try:
            prepared = emu.prepare(chat)
        except (ContextLengthExceeded, ImageInputError) as exc:
            emu.metrics.record_status(CHAT, "400")
            return JSONResponse(vllm_error_body(str(exc), "BadRequestError", 400), status_code=400)
        fault = emu.draw_fault()
        early = await self._early_fault(request, CHAT, fault)
        if early is not None:
            return early
        try:
            generation = await until_disconnect(request, emu.admit(prepared, fault))
        except ClientDisconnected:
            return self._gone(CHAT)
        except EmulatorStopping:
            return await self._drop(request, CHAT)
        if chat.stream:
            emu.metrics.record_status(CHAT, "200")
            return _ReleasingStream(
                self._events(request, generation, chat, fault),
                generation,
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        try:
            await until_disconnect(request, generation.finish())
        except ClientDisconnected:
            generation.release(completed=False)
            return self._gone(CHAT)
        except EmulatorStopping:
            generation.release(completed=False)
            return await self._drop(request, CHAT)
        except BaseException:
            generation.release(completed=False)
            raise
        generation.release(completed=True)
        body = completion_body(
            _completion_id(),
            chat.model,
            generation.content,
            generation.finish_reason,
            self._usage(generation),
            tool_calls=generation.tool_calls() if generation.token_calls else None,
        )
        emu.metrics.record_status(CHAT, "200")
        if fault is Fault.INVALID_BODY:
            return _truncated_json(body)
        return JSONResponse(body)

    async def _events(
        self, request: Request, gen: Generation, chat: ChatRequest, fault: Fault | None
    ) -> AsyncIterator[bytes]:
        cid, created = _completion_id(), int(time.time())
        common: dict[str, Any] = {
            "completion_id": cid,
            "model": chat.model,
            "created": created,
            "include_usage": chat.include_usage,
        }
        completed = False
        try:
            first = True
            position = 0
            async for token in gen.stream():
                if gen.token_calls:  # a tool call's arguments, token by token
                    delta = gen.tool_call_delta(position, token)
                    if first:
                        delta = {"role": "assistant", "content": None, **delta}
                else:
                    delta = {"role": "assistant", "content": token} if first else {"content": token}
                first = False
                position += 1
                yield _sse(chunk_body(delta=delta, **common))
            if fault is Fault.INVALID_BODY:
                yield f'data: {{"id": "{cid}", "object": "chat.completion.ch\n\n'.encode()
                completed = True
                return
            yield _sse(chunk_body(delta={}, finish_reason=gen.finish_reason, **common))
            if chat.include_usage:
                yield _sse(chunk_body(delta=None, usage=self._usage(gen), **common))
            yield _sse("[DONE]")
            completed = True
        except EmulatorStopping:
            close_transport(request)
        finally:
            gen.release(completed=completed)

    async def classify(self, request: Request) -> Response:
        refused = self._refuse(request, CLASSIFY)
        if refused is not None:
            return refused
        try:
            body = await read_json(request, max_bytes=self.emu.config.max_body_bytes)
        except ClientDisconnected:
            return self._gone(CLASSIFY)
        except BodyTooLarge as exc:
            return self._too_large(CLASSIFY, exc)
        except RequestError as exc:
            return self._error(CLASSIFY, 400, str(exc), "invalid_request_error", None)
        text = body.get("input") if isinstance(body, dict) else None
        if not isinstance(text, str):
            return self._error(
                CLASSIFY, 400, "'input' must be a string.", "invalid_request_error", None, "input"
            )
        fault = self.emu.draw_fault()
        early = await self._early_fault(request, CLASSIFY, fault)
        if early is not None:
            return early
        try:
            if fault is Fault.HANG:
                await until_disconnect(request, self.emu.stopper.sleep(self.emu.faults.config.hang_seconds))
            jailbreak, score = await until_disconnect(request, self.emu.classify(text))
        except ClientDisconnected:
            return self._gone(CLASSIFY)
        except EmulatorStopping:
            return await self._drop(request, CLASSIFY)
        self.emu.metrics.record_status(CLASSIFY, "200")
        result = {"jailbreak": jailbreak, "score": score}
        if fault in (Fault.MALFORMED, Fault.INVALID_BODY):
            return _truncated_json(result)
        if fault is Fault.DUPLICATE_KEY:
            flipped = json.dumps(not jailbreak)
            text = f'{{"jailbreak": {json.dumps(jailbreak)}, "jailbreak": {flipped}, "score": {score}}}'
            return Response(text, media_type="application/json")
        return JSONResponse(result)

    async def models(self, request: Request) -> Response:
        refused = self._refuse(request, None)
        if refused is not None:
            return refused
        model = {
            "id": self.emu.config.model,
            "object": "model",
            "created": self._created,
            "owned_by": "guardcache-emulator",
        }
        return JSONResponse({"object": "list", "data": [model]})

    async def ready(self, request: Request) -> Response:
        refused = self._refuse(request, None, auth=False)
        if refused is not None:
            return refused
        return JSONResponse({"object": "health.response", "message": "Service is ready."})

    async def live(self, request: Request) -> Response:
        refused = self._refuse(request, None, auth=False)
        if refused is not None:
            return refused
        return JSONResponse({"object": "health.response", "message": "Service is live."})

    async def metrics(self, request: Request) -> Response:
        refused = self._refuse(request, None, auth=False)
        if refused is not None:
            return refused
        return Response(self.emu.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    # -- helpers --------------------------------------------------------------------------

    def _refuse(self, request: Request, endpoint: str | None, auth: bool = True) -> Response | None:
        """503 while down, 401 on a wrong or missing bearer token; None lets the request in."""
        if self.emu.down:
            return self._error(
                endpoint,
                503,
                "The emulator is down (admin switch).",
                "service_unavailable",
                "service_unavailable",
            )
        key = self.emu.config.api_key
        if auth and key is not None:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or token.strip() != key:
                response = self._error(
                    endpoint,
                    401,
                    "Incorrect or missing API key.",
                    "invalid_request_error",
                    "invalid_api_key",
                )
                response.headers["WWW-Authenticate"] = "Bearer"
                return response
        return None

    async def _early_fault(self, request: Request, endpoint: str, fault: Fault | None) -> Response | None:
        if fault is Fault.ERROR:
            return self._error(
                endpoint, 500, "Injected internal server error.", "server_error", "internal_error"
            )
        if fault is Fault.RATE_LIMIT:
            response = self._error(
                endpoint,
                429,
                "Rate limit reached (injected).",
                "rate_limit_exceeded",
                "rate_limit_exceeded",
            )
            response.headers["Retry-After"] = str(self.emu.faults.config.retry_after_seconds)
            return response
        if fault is Fault.DROP:
            return await self._drop(request, endpoint)
        return None

    def _error(
        self,
        endpoint: str | None,
        status: int,
        message: str,
        type_: str,
        code: str | None,
        param: str | None = None,
    ) -> JSONResponse:
        if endpoint is not None:
            self.emu.metrics.record_status(endpoint, str(status))
        return JSONResponse(error_body(message, type_, code, param), status_code=status)

    def _too_large(self, endpoint: str, exc: BodyTooLarge) -> JSONResponse:
        self.emu.metrics.record_status(endpoint, "413")
        body = vllm_error_body(str(exc), "RequestEntityTooLargeError", 413)
        return JSONResponse(body, status_code=413)

    def _gone(self, endpoint: str) -> Response:
        self.emu.metrics.record_status(endpoint, "disconnected")
        return Response(status_code=499)  # never reaches anyone: the client is gone

    async def _drop(self, request: Request, endpoint: str) -> Response:
        self.emu.metrics.record_status(endpoint, "dropped")
        return await drop_connection(request)

    def _usage(self, gen: Generation) -> dict[str, Any]:
        """``usage``; ``prompt_tokens_details`` per the config's ``cached_tokens_field`` (always,
        only when some prompt tokens were cached, or never), as NIM versions differ."""
        field, cached = self.emu.config.cached_tokens_field, gen.cached_tokens
        shown = field == "always" or (field == "nonzero" and cached > 0)
        return usage_body(gen.prompt_tokens, gen.completion_tokens, cached_tokens=cached if shown else None)


class _ReleasingStream(StreamingResponse):
    """A stream that frees its generation even if the body iterator never started."""

    def __init__(self, content: AsyncIterator[bytes], generation: Generation, **kw: Any) -> None:
        super().__init__(content, **kw)
        self._generation = generation

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._generation.release(completed=False)  # no-op when the stream completed


def _truncated_json(body: Any) -> Response:
    text = json.dumps(body, ensure_ascii=False)
    return Response(text[: max(1, len(text) // 2)], media_type="application/json")


def _completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def _sse(data: Mapping[str, Any] | str) -> bytes:
    """One server-sent event (``data: [DONE]`` for the string)."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {payload}\n\n".encode()
