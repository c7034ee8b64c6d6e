"""The ASGI app of ``guardcache serve``: routes, the operations middleware, start-up and shutdown.

- Start-up (lifespan, per worker): every config's rails are built when the app is made (a bad
  config, or an ``api_key_env_var`` naming an unset variable, fails before the port opens), then
  the first readiness round sends each guard and the main model a real request (which primes each
  guard's prompt prefix too); the probes go on in the background (``server/readiness.py``) and
  ``/health/ready`` reads their cached result.
- Shutdown: uvicorn stops accepting, lets in-flight requests (streams included) finish within
  ``shutdown_timeout``, then the lifespan closes the rails (Redis tier flushed, HTTP pools closed).
- :class:`OperationsMiddleware` (pure ASGI, a few small objects per request, no wrappers): a request id
  for every request (the client's ``X-Request-Id`` when it is sane, else a new one), in the response
  header and in every log line written while serving it; client API keys on ``/v1/*`` and every
  body route; the body of every route in ``server/body_routes.py`` (chat, checks, LiteLLM's
  guardrail API...) read whole first, within ``body_timeout`` (408) and ``max_body_bytes`` (413
  from ``Content-Length`` before reading, and while reading); then the concurrency limit (503 with
  ``Retry-After``) and the in-flight gauge, shared by all of them; then the route's handler, under a
  :class:`ClientWatch` that cancels it when the client leaves.
- The connection-level limits (the request head's size and time, idle keep-alive) are uvicorn's
  protocol's: ``server/connections.py``.
"""

from __future__ import annotations

import contextlib
import gc
import hmac
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from guardcache import tracing
from guardcache.llm.cancel import CancelAfter
from guardcache.rails.llmrails import LLMRails
from guardcache.server.admin import ADMIN_CLEAR_PATH, CacheClearing
from guardcache.server.body_routes import BODY_ROUTES, CHAT_PATH, CHECKS_PATH, LITELLM_PATH, RESPONSES_PATH
from guardcache.server.checks_api import ChecksHandler
from guardcache.server.ids import new_id
from guardcache.server.intake import json_response, read_body, reject_reason, too_large
from guardcache.server.litellm_api import LiteLLMHandler
from guardcache.server.protocol import RequestError, error_body
from guardcache.server.responses import DISCONNECT, EventStream, HookWatch, JSONResponse, TaskWatch
from guardcache.server.responses_api import ResponsesHandler
from guardcache.server.routes import Handlers
from guardcache.server.settings import ServeSettings, load_configs
from guardcache.server.state import ServerState

log = logging.getLogger("guardcache.server")

BodyHandler = Callable[[bytes], Awaitable[ASGIApp]]
"""A body route's handler: the request body (read within the limits) in, the answer to send out."""
ChatHandler = BodyHandler
REQUEST_ID: ContextVar[str] = ContextVar("guardcache_request_id", default="-")
_SANE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` to every record (``-`` outside a request) for the log format."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        return True


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"


def configure_logging(level: str = "info") -> None:
    """Root logging with the request id in every line (the CLI and each worker process)."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig()
    for handler in root.handlers:
        if not any(isinstance(f, RequestIdFilter) for f in handler.filters):
            handler.addFilter(RequestIdFilter())
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpx2"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class OperationsMiddleware:
    """Request ids, client auth, body limit, concurrency limit (see the module docstring).

    ``routes`` (path -> handler of the body, ``server/body_routes.py``) are called directly for
    ``POST`` to their path rather than through Starlette's middleware stack and router: that stack
    (error and exception middleware, route matching, the request/response wrapper) was ~8% of the
    server's CPU per request at 100% hits, for routes that need none of it. ``chat`` is the chat
    route's handler (the same as ``routes={CHAT_PATH: chat}``). Other routes and methods (405) go
    through Starlette.

    The order for a body route's request is what keeps slow and leaving clients cheap: its body is
    read before it counts as in flight (a thousand clients stalling mid-body hold connections until
    ``body_timeout``, never the places of ``max_concurrency``), and once read, one watch covers the
    handler and its answer (a client that leaves cancels the turn and its main call). Every body
    route gets all of it, so no route is a way around a limit.
    """

    def __init__(
        self,
        app: ASGIApp,
        state: ServerState,
        chat: BodyHandler | None = None,
        *,
        routes: Mapping[str, BodyHandler] | None = None,
        admin_key: str | None = None,
    ) -> None:
        self.app = app
        self.routes: dict[str, BodyHandler] = dict(routes or {})
        if chat is not None:
            self.routes[CHAT_PATH] = chat
        self.state = state
        self.limit = state.settings.max_concurrency
        self.max_body = state.settings.max_body_bytes
        self.body_timeout = state.settings.body_timeout
        self.auth = f"Bearer {state.api_key}".encode() if state.api_key else None
        # LiteLLM's Generic Guardrail API sends its configured key as ``x-api-key``.
        self.key = state.api_key.encode() if state.api_key else None
        # The admin route (server/admin.py) takes its own key, and only that one.
        self.admin_auth = f"Bearer {admin_key}".encode() if admin_key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = None
        authorization = None
        api_key = None
        length = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                request_id = value.decode("latin-1")
            elif name == b"authorization":
                authorization = value
            elif name == b"x-api-key":
                api_key = value
            elif name == b"content-length":
                length = value
        if request_id is None or not _SANE_ID.fullmatch(request_id):
            request_id = new_id()
        token = REQUEST_ID.set(request_id)
        id_header = (b"x-request-id", request_id.encode())
        send_with_id = _adding_header(send, id_header)

        try:
            path: str = scope["path"]
            handler = self.routes.get(path)
            if path == ADMIN_CLEAR_PATH and handler is not None:
                if authorization is None or not hmac.compare_digest(authorization, self.admin_auth or b""):
                    self.state.metrics.reject("auth")
                    refusal = RequestError(
                        "Incorrect or missing admin key: send 'Authorization: Bearer <admin key>'.",
                        status=401,
                        code="invalid_admin_key",
                        headers={"WWW-Authenticate": "Bearer"},
                    )
                    await _refuse(send_with_id, refusal, scope, receive)
                    return
            elif (
                self.auth is not None
                and (handler is not None or path.startswith("/v1/"))
                and not self._authorized(authorization, api_key)
            ):
                self.state.metrics.reject("auth")
                await _refuse(
                    send_with_id,
                    RequestError(
                        "Incorrect or missing API key: send 'Authorization: Bearer <key>' "
                        "(or 'x-api-key: <key>').",
                        status=401,
                        code="invalid_api_key",
                        headers={"WWW-Authenticate": "Bearer"},
                    ),
                    scope,
                    receive,
                )
                return
            if handler is None or scope["method"] != "POST":
                await self.app(scope, receive, send_with_id)
                return
            if length is not None:
                try:
                    too_long = int(length) > self.max_body
                except ValueError:
                    too_long = False
                if too_long:
                    self.state.metrics.reject("body_too_large")
                    await _refuse(send_with_id, too_large(self.max_body), scope, receive)
                    return
            extensions = scope.get("extensions")
            hook = extensions.get(DISCONNECT) if extensions else None
            if hook is not None and hook.complete:  # the whole request is here: no wait, no timer
                message = await receive()
                raw = message.get("body") if not message.get("more_body") else None
                if raw is None or len(raw) > self.max_body:  # (or the client left: the slow way says)
                    raw = await self._read_body(receive, send_with_id, scope, message)
            else:
                raw = await self._read_body(receive, send_with_id, scope)
            if raw is None:
                return
            state = self.state
            if state.in_flight >= self.limit:
                state.metrics.reject("overloaded")
                retry = str(state.settings.retry_after)
                await _refuse(
                    send_with_id,
                    RequestError(
                        f"The server is at its concurrency limit ({self.limit} requests); retry later.",
                        status=503,
                        type="server_overloaded",
                        code="overloaded",
                        headers={"Retry-After": retry},
                    ),
                    scope,
                    receive,
                )
                return
            trace = tracing.attach_incoming(scope["headers"])  # None (one check) when off
            state.in_flight += 1
            try:
                with HookWatch(hook) if hook is not None else TaskWatch(receive):
                    response = await handler(raw)
                    if isinstance(response, JSONResponse | EventStream):  # no wrapper on send
                        await response.write(send, receive, id_header)
                    else:
                        await response(scope, receive, send_with_id)
            finally:
                state.in_flight -= 1
                if trace is not None:
                    tracing.detach(trace)
        finally:
            REQUEST_ID.reset(token)

    def _authorized(self, authorization: bytes | None, api_key: bytes | None) -> bool:
        """Whether the request carries the client key, as ``Authorization: Bearer <key>`` or as
        ``x-api-key: <key>`` (compared in constant time)."""
        assert self.auth is not None and self.key is not None
        if authorization is not None and hmac.compare_digest(authorization, self.auth):
            return True
        return api_key is not None and hmac.compare_digest(api_key, self.key)

    async def _read_body(
        self, receive: Receive, send: Send, scope: Scope, first: Message | None = None
    ) -> bytes | None:
        """A body route's request body, read before the request counts against the concurrency limit
        (a client that sends its body slowly holds a connection, not a turn's place) and within
        ``body_timeout``. None when it was refused (413, 408: answered) or the client left.
        ``first``: a message the caller already received. (When the whole request has arrived,
        which guardcache's HTTP protocol tells and a small JSON request nearly always has, the
        caller reads it itself without a timer: then reading cannot wait.)"""
        try:
            return await self._read_body_timed(receive, first)
        except RequestError as exc:
            self.state.metrics.reject(reject_reason(exc))
            await _refuse(send, exc, scope, receive)
        except _BodyTimeout:
            self.state.metrics.reject("body_timeout")
            log.debug("the request body did not arrive within %gs", self.body_timeout)
            refusal = RequestError(
                f"The request body did not arrive within {self.body_timeout:g} seconds.",
                status=408,
                code="request_timeout",
                headers={"Connection": "close"},
            )
            await _refuse(send, refusal, scope, receive)
        except ClientDisconnect:  # common and harmless: no traceback, no warning anyone can flood
            self.state.metrics.reject("client_left")
            log.debug("the client left before its request body was read")
        return None

    async def _read_body_timed(self, receive: Receive, first: Message | None) -> bytes:
        """The body within ``body_timeout``, else :class:`_BodyTimeout`."""
        scope = CancelAfter(self.body_timeout)
        try:
            async with scope:
                return await read_body(receive, self.max_body, first)
        except TimeoutError:
            if not scope.expired():
                raise
            raise _BodyTimeout from None


class _BodyTimeout(Exception):
    """The request body did not arrive within ``body_timeout``."""


def _adding_header(send: Send, header: tuple[bytes, bytes]) -> Send:
    """``send`` with ``header`` added to the response's headers."""

    async def send_with_header(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", ()), header]
        await send(message)

    return send_with_header


async def _refuse(send: Send, exc: RequestError, scope: Scope, receive: Receive) -> None:
    response = json_response(exc.body(), exc.status, exc.headers or None)
    await response(scope, receive, send)


def create_app(
    settings: ServeSettings, rails: Mapping[str, LLMRails] | None = None, *, own_process: bool = False
) -> ASGIApp:
    """The app serving ``settings.config`` (or the given rails, by config id).

    ``own_process`` (``guardcache serve`` and its workers): the process is this server's alone, so
    once started, everything built so far is frozen out of the garbage collector's reach
    (``gc.freeze()``): the modules, configs and rails live as long as the process, and every full
    collection under load walked them again. Not for an app mounted in someone else's process.
    """
    if rails is None:
        rails = {config_id: LLMRails(config) for config_id, config in load_configs(settings.config).items()}
    state = ServerState(settings, rails)
    handlers = Handlers(state)
    body_routes: dict[str, BodyHandler] = {
        CHAT_PATH: handlers.turn,
        CHECKS_PATH: ChecksHandler(state).handle,
        LITELLM_PATH: LiteLLMHandler(state).handle,
        RESPONSES_PATH: ResponsesHandler(handlers).handle,
    }
    if tuple(body_routes) != BODY_ROUTES:  # one list of body routes (server/body_routes.py)
        raise RuntimeError(f"body routes {list(body_routes)} differ from BODY_ROUTES {list(BODY_ROUTES)}")
    admin_key = settings.admin_key()
    clearing = CacheClearing(state, settings.runtime_dir) if admin_key else None
    served_routes = dict(body_routes)
    if clearing is not None:  # with every limit of a body route (the middleware serves it)
        served_routes[ADMIN_CLEAR_PATH] = clearing.handle

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await state.start()
        if clearing is not None:
            await clearing.start()
        if own_process:
            gc.collect()
            gc.freeze()
        log.info(
            "serving %s (configs: %s)",
            settings.config,
            ", ".join(f"{k} ({v})" for k, v in state.main_models.items()),
        )
        yield
        if clearing is not None:
            await clearing.stop()
        await state.stop()

    routes = [
        Route(CHAT_PATH, handlers.chat, methods=["POST"]),
        *(
            Route(path, _through_router(handler, state), methods=["POST"])
            for path, handler in body_routes.items()
            if path != CHAT_PATH
        ),
        Route("/v1/models", handlers.models, methods=["GET"]),
        Route("/v1/rails/configs", handlers.configs, methods=["GET"]),
        Route("/health/live", handlers.live, methods=["GET"]),
        Route("/health/ready", handlers.ready, methods=["GET"]),
        Route("/metrics", handlers.metrics, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: _not_found, 405: _not_allowed})
    app.state.guardcache = state
    return OperationsMiddleware(app, state, routes=served_routes, admin_key=admin_key)


def _through_router(handler: BodyHandler, state: ServerState) -> Callable[[Any], Awaitable[ASGIApp]]:
    """A body route as a Starlette endpoint, for an app mounted without the middleware (which
    serves these routes itself, with every limit): the body read within ``max_body_bytes``."""

    async def endpoint(request: Any) -> ASGIApp:
        try:
            raw = await read_body(request.receive, state.settings.max_body_bytes)
        except RequestError as exc:
            state.metrics.reject(reject_reason(exc))
            return json_response(exc.body(), exc.status, exc.headers or None)
        return await handler(raw)

    return endpoint


async def _not_found(request: Any, exc: Exception) -> Any:
    return json_response(
        error_body(f"No route {request.url.path}.", "invalid_request_error", "not_found"), 404
    )


async def _not_allowed(request: Any, exc: Exception) -> Any:
    return json_response(
        error_body(
            f"Method {request.method} is not allowed here.", "invalid_request_error", "method_not_allowed"
        ),
        405,
    )


def app_from_env() -> ASGIApp:
    """The uvicorn app factory of worker processes (``--workers N``): settings from the environment."""
    settings = ServeSettings.from_env()
    configure_logging(settings.log_level)
    return create_app(settings, own_process=True)


__all__ = [
    "CHAT_PATH",
    "REQUEST_ID",
    "BodyHandler",
    "OperationsMiddleware",
    "RequestIdFilter",
    "ServerState",
    "app_from_env",
    "configure_logging",
    "create_app",
]
