"""Client keys: ``--api-key-env`` on ``/v1/*`` and every body route, ``--admin-key-env`` on the
admin route, each compared in constant time; a request without the key is refused with 401.

Why two keys that do not open each other's routes: the client key is handed to every application
(and LiteLLM's proxy), the admin key empties every worker's caches; a leaked client key must not
clear the caches, nor the admin key serve turns.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from guardcache.openai_wire import RequestError
from guardcache.server.answers import error_response
from guardcache.server.metrics import ServerMetrics


class ClientKeys:
    """Pure ASGI: requests to ``/v1/*`` and to ``protected`` paths need the client key (as
    ``Authorization: Bearer <key>`` or LiteLLM's ``x-api-key: <key>``) when there is one; the
    request to ``admin_path`` always needs the admin key (its route exists only with one).
    Called, it returns what to await (the app's coroutine, or the refusal's): no coroutine of its
    own per request."""

    __slots__ = ("admin_auth", "admin_path", "app", "auth", "key", "metrics", "protected")

    def __init__(
        self,
        app: ASGIApp,
        metrics: ServerMetrics,
        *,
        api_key: str | None,
        protected: Iterable[str] = (),
        admin_key: str | None = None,
        admin_path: str | None = None,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.auth = f"Bearer {api_key}".encode() if api_key else None
        self.key = api_key.encode() if api_key else None
        self.protected = frozenset(protected)
        self.admin_auth = f"Bearer {admin_key}".encode() if admin_key else None
        self.admin_path = admin_path if admin_key else None

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] == "http":
            path: str = scope["path"]
            if path == self.admin_path:
                if not hmac.compare_digest(_header(scope, b"authorization") or b"", self.admin_auth or b""):
                    return self._refuse(
                        "Incorrect or missing admin key: send 'Authorization: Bearer <admin key>'.",
                        "invalid_admin_key",
                        send,
                        receive,
                    )
            elif (
                self.auth is not None
                and (path.startswith("/v1/") or path in self.protected)
                and not self._authorized(scope)
            ):
                return self._refuse(
                    "Incorrect or missing API key: send 'Authorization: Bearer <key>' "
                    "(or 'x-api-key: <key>').",
                    "invalid_api_key",
                    send,
                    receive,
                )
        return self.app(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        """Whether the request carries the client key (compared in constant time)."""
        assert self.auth is not None and self.key is not None
        authorization = _header(scope, b"authorization")
        if authorization is not None and hmac.compare_digest(authorization, self.auth):
            return True
        api_key = _header(scope, b"x-api-key")
        return api_key is not None and hmac.compare_digest(api_key, self.key)

    def _refuse(self, message: str, code: str, send: Send, receive: Receive) -> Awaitable[None]:
        self.metrics.reject("auth")
        refusal = RequestError(message, status=401, code=code, headers={"WWW-Authenticate": "Bearer"})
        return error_response(refusal).write(send, receive)


def _header(scope: Scope, name: bytes) -> bytes | None:
    value: bytes
    for key, value in scope["headers"]:
        if key == name:
            return value
    return None


__all__ = ["ClientKeys"]
