"""The routes of ``guardcache serve`` whose request carries a JSON body, listed in one place.

Why one list: every such route gets the same limits from the middleware (client key, body size and
time, concurrency; each handler parses with the same JSON depth), so a route added here cannot be
served with fewer of them, and the tests read this list to prove each limit per route
(``tests/integration/test_serve_limits.py``). ``create_app`` refuses to start when its handlers and
this list differ. A new body route is a path here, a handler in ``create_app``, and an example body
in that test.

``POST /admin/cache/clear`` (``server/admin.py``) is served by the same middleware with the same
body limits but is not listed: it exists only with ``--admin-key-env`` and takes its own key.
"""

from __future__ import annotations

CHAT_PATH = "/v1/chat/completions"
"""OpenAI's chat completions: one guarded turn (``server/routes.py``)."""

CHECKS_PATH = "/v1/checks"
"""NeMo Guardrails' server's checks: the rails only, on messages (``server/checks_api.py``)."""

LITELLM_PATH = "/beta/litellm_basic_guardrail_api"
"""LiteLLM's Generic Guardrail API: the rails only, on texts (``server/litellm_api.py``)."""

RESPONSES_PATH = "/v1/responses"
"""OpenAI's Responses API: one guarded turn, as a chat turn (``server/responses_api.py``)."""

BODY_ROUTES: tuple[str, ...] = (CHAT_PATH, CHECKS_PATH, LITELLM_PATH, RESPONSES_PATH)
"""Every ``POST`` route with a JSON body."""

__all__ = ["BODY_ROUTES", "CHAT_PATH", "CHECKS_PATH", "LITELLM_PATH", "RESPONSES_PATH"]
