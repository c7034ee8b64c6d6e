"""What the client needs to know to reach a model's server, as values, and its one base-URL rule.

A model's ``parameters:`` are read at validation, behind the config boundary
(:mod:`guardcache.config.parameters`), into a :class:`TransportSettings` (how to reach the server)
and generation settings (what to ask it); the client takes the first as it is and validates
nothing of the config. Why the types live here, below the config: :meth:`ChatClient.from_settings
<guardcache.llm.client.ChatClient.from_settings>` reads them, and the client must not import the
config (docs/architecture.md, "Layers").

:func:`check_base_url` is the one rule for an API root. The config applies it to
``parameters.base_url`` (its ``ConfigError`` names the file and field) and ``ChatClient`` to the
URL it is given; here it raises a plain ``ValueError``, the client's own error, not the config's.

Settings, not a transport (the module was ``transport.py``): it holds values and opens nothing; the
transports are :mod:`guardcache.llm.h1_pool` and :mod:`guardcache.llm.httpx_pool`.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field

MANAGED_HEADERS: frozenset[str] = frozenset(
    {"authorization", "content-type", "content-length", "host", "transfer-encoding"}
)
"""Headers a model's ``default_headers`` may not set: the client derives them (Authorization from
the model's API key: ``api_key_env_var``, or ``parameters.api_key``)."""


@dataclass(frozen=True, slots=True)
class TransportSettings:
    """How to reach one model's server; None means "the client's default".

    Built from a model's ``parameters`` by the config (``ModelConfig.transport``), already valid;
    the client reads it in :meth:`~guardcache.llm.client.ChatClient.from_settings`.

    Attributes:
        base_url: the API root (``http://nim:8000/v1``), valid and without a trailing slash;
            None: the caller's default (``ChatClient.from_settings``' ``default_base_url``).
        timeout: seconds for the WHOLE call (connect, queueing for a connection, every attempt,
            backoff and Retry-After waits); see ``ChatClient``.
        max_retries: retries after the first attempt (0: one request only).
        default_headers: extra request headers, as ``(name, value)`` pairs so the value stays
            hashable; values are kept out of ``repr`` (they may be tokens for a proxy).
        api_key: a bearer token given with the settings; kept out of ``repr``. None: the caller's
            (``ChatClient.from_settings``' ``api_key``). A config's key is never put here: it is
            read when the client is built (``ModelConfig.api_key()``; keys rotate).
    """

    base_url: str | None = None
    timeout: float | None = None
    max_retries: int | None = None
    default_headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    api_key: str | None = field(default=None, repr=False)

    @property
    def headers(self) -> dict[str, str]:
        return dict(self.default_headers)


def check_base_url(url: object) -> str:
    """Check an API root and return it normalized (stripped, no trailing ``/``).

    Why strict: requests go to ``{base_url}/chat/completions``, and the URL is written into every
    error message and log line. So it must be http(s) with a host, must carry no query or fragment
    (the path would be appended after them), and no ``user:password@`` (a secret in a config file
    that every log line would then repeat; use ``api_key_env_var``).

    Raises:
        ValueError: what is wrong, with an example of a valid value (credentials never shown).
    """
    example = "e.g. http://localhost:8000/v1"
    if not isinstance(url, str):
        raise ValueError(f"expected an http(s) URL, {example} (got {type(url).__name__})")
    text = url.strip()
    if any(ch.isspace() or ord(ch) < 32 for ch in text):
        raise ValueError(f"{url!r} contains whitespace or control characters; {example}")
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port  # raises on a port that is not a number in range
    except ValueError as exc:
        raise ValueError(f"{url!r} is not a valid URL ({exc}); {example}") from None
    del port
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"{url!r} must start with http:// or https://, {example}")
    if not parts.hostname:
        raise ValueError(f"{url!r} has no host, {example}")
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            "credentials in the URL would be written into every log line; remove them and give "
            "the API key with api_key_env_var (e.g. api_key_env_var: NVIDIA_API_KEY)"
        )
    if parts.query or parts.fragment or text.endswith(("?", "#")):
        raise ValueError(f"{url!r} has a query or fragment; give the API root only, {example}")
    return text.rstrip("/")


__all__ = ["MANAGED_HEADERS", "TransportSettings", "check_base_url"]
