"""The ASGI app of ``guardcache serve``: its middlewares and routes put together, start-up and shutdown.

- Start-up (lifespan, per worker): every config's rails are built when the app is made (a bad
  config, or an ``api_key_env_var`` naming an unset variable, fails before the port opens), then
  the first readiness round sends each guard and the main model a real request (which primes each
  guard's prompt prefix too); the probes go on in the background (``server/readiness.py``) and
  ``/health/ready`` reads their cached result.
- Shutdown: uvicorn stops accepting, lets in-flight requests (streams included) finish within
  ``shutdown_timeout``, then the lifespan closes the rails (Redis tier flushed, HTTP pools closed).
- Every request: its id (``server/request_id.py``), then the keys (``server/auth.py``, when the
  server has a client or an admin key);
  then a body route's ``POST`` goes down its stack of limits (``server/body_routes.py``), and
  everything else through Starlette's router. Each middleware is pure ASGI and does one job.
- The connection-level limits (the request head's size and time, idle keep-alive) are uvicorn's
  protocol's: ``server/connections.py``.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp

from guardcache.rails.llmrails import LLMRails
from guardcache.server.admin import CacheClearing
from guardcache.server.answers import method_not_allowed, not_found
from guardcache.server.auth import ClientKeys
from guardcache.server.body_routes import (
    ADMIN_CLEAR_PATH,
    BODY_ROUTES,
    CHAT_PATH,
    CHECKS_PATH,
    LITELLM_PATH,
    RESPONSES_PATH,
    BodyHandler,
    BodyRouter,
    body_stack,
)
from guardcache.server.checks_api import ChecksHandler
from guardcache.server.litellm_api import LiteLLMHandler
from guardcache.server.request_id import RequestIdMiddleware, configure_logging
from guardcache.server.responses_api import ResponsesHandler
from guardcache.server.routes import Handlers
from guardcache.server.settings import ServeSettings, load_configs
from guardcache.server.state import ServerState

log = logging.getLogger("guardcache.server")


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
    if clearing is not None:  # with every limit of a body route
        body_routes[ADMIN_CLEAR_PATH] = clearing.handle

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
        Route("/v1/models", handlers.models, methods=["GET"]),
        Route("/v1/rails/configs", handlers.configs, methods=["GET"]),
        Route("/health/live", handlers.live, methods=["GET"]),
        Route("/health/ready", handlers.ready, methods=["GET"]),
        Route("/metrics", handlers.metrics, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: _not_found, 405: _not_allowed})
    app.state.guardcache = state
    stacks = {path: body_stack(handler, state) for path, handler in body_routes.items()}
    served: ASGIApp = BodyRouter(app, stacks)
    if state.api_key or admin_key:  # (without either, the keys' middleware has nothing to do)
        served = ClientKeys(
            served,
            state.metrics,
            api_key=state.api_key,
            protected=BODY_ROUTES,
            admin_key=admin_key,
            admin_path=ADMIN_CLEAR_PATH,
        )
    return RequestIdMiddleware(served)


async def _not_found(request: Any, exc: Exception) -> Any:
    return not_found(request.url.path)


async def _not_allowed(request: Any, exc: Exception) -> Any:
    return method_not_allowed(request.method)


def served_state(app: ASGIApp) -> ServerState:
    """The :class:`ServerState` of an app :func:`create_app` made (its in-flight count, metrics and
    rails): found under its middlewares, on the Starlette app at the bottom."""
    while not isinstance(app, Starlette):
        app = app.app  # type: ignore[attr-defined]
    state: ServerState = app.state.guardcache
    return state


def app_from_env() -> ASGIApp:
    """The uvicorn app factory of worker processes (``--workers N``): settings from the environment."""
    settings = ServeSettings.from_env()
    configure_logging(settings.log_level)
    return create_app(settings, own_process=True)


__all__ = ["app_from_env", "create_app", "served_state"]
