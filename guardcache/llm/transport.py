"""Transport settings of a model, apart from its generation parameters, and the one base-URL check.

Why one place: a model's ``parameters:`` mixes how to reach the server (``base_url``, ``timeout``,
``max_retries``, ``default_headers``, and the API key NeMo configs may write there: ``api_key``,
``openai_api_key``, ``nvidia_api_key``) with what to ask it (``temperature``, ``max_tokens``...). The
second set goes into every request body and into the cache namespace (a changed temperature must
not serve an old verdict); the first must go into neither: a transport key in the body can make a
strict server answer 400, and in the namespace a changed timeout (or a rotated key) would empty the
cache for nothing. A key in the body or the namespace would also be sent to the model or derivable
from the cache: it is a transport setting, sent only as ``Authorization: Bearer``.
Splitting once, here, is what keeps the client, the check and the runtime builder agreeing on which
key is which.
"""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from guardcache.errors import ConfigError

API_KEY_KEYS: tuple[str, ...] = ("api_key", "openai_api_key", "nvidia_api_key")
"""Keys of ``parameters`` that hold the API key (NeMo hands them to the LangChain client)."""

TRANSPORT_KEYS: frozenset[str] = frozenset(
    {"base_url", "openai_api_base", "timeout", "max_retries", "default_headers", *API_KEY_KEYS}
)
"""Keys of a model's ``parameters`` that configure the transport; every other key is a body field."""

MANAGED_HEADERS: frozenset[str] = frozenset(
    {"authorization", "content-type", "content-length", "host", "transfer-encoding"}
)
"""Headers ``default_headers`` may not set: the client derives them (Authorization from the model's
API key: ``api_key_env_var``, or ``parameters.api_key``)."""

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP field name (RFC 9110 token)


@dataclass(frozen=True, slots=True)
class TransportSettings:
    """How to reach one model's server; None means "the client's default".

    Attributes:
        base_url: the API root (``http://nim:8000/v1``), validated and without a trailing slash;
            None: the engine's default (the caller supplies it, see ``ChatClient.from_settings``).
        timeout: seconds for the WHOLE call (connect, queueing for a connection, every attempt,
            backoff and Retry-After waits); see ``ChatClient``.
        max_retries: retries after the first attempt (0: one request only).
        default_headers: extra request headers, as ``(name, value)`` pairs so the value stays
            hashable; values are kept out of ``repr`` (they may be tokens for a proxy).
        api_key: the bearer token written in ``parameters`` (``api_key`` or NeMo's aliases); kept
            out of ``repr``. None: the caller's (``ChatClient.from_settings``' ``api_key``).
    """

    base_url: str | None = None
    timeout: float | None = None
    max_retries: int | None = None
    default_headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    api_key: str | None = field(default=None, repr=False)

    @property
    def headers(self) -> dict[str, str]:
        return dict(self.default_headers)


def validate_base_url(url: object, *, field_name: str = "base_url") -> str:
    """Check an API root once, at start-up, and return it normalized (stripped, no trailing ``/``).

    Why strict: requests go to ``{base_url}/chat/completions``, and the URL is written into every
    error message and log line. So it must be http(s) with a host, must carry no query or fragment
    (the path would be appended after them), and no ``user:password@`` (a secret in a config file
    that every log line would then repeat; use ``api_key_env_var``).

    Raises:
        ConfigError: what is wrong, with an example of a valid value.
    """
    example = "e.g. http://localhost:8000/v1"
    if not isinstance(url, str):
        raise ConfigError(f"{field_name}: expected an http(s) URL, {example} (got {type(url).__name__})")
    text = url.strip()
    if any(ch.isspace() or ord(ch) < 32 for ch in text):
        raise ConfigError(f"{field_name}: {url!r} contains whitespace or control characters; {example}")
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port  # raises on a port that is not a number in range
    except ValueError as exc:
        raise ConfigError(f"{field_name}: {url!r} is not a valid URL ({exc}); {example}") from None
    del port
    if parts.scheme.lower() not in ("http", "https"):
        raise ConfigError(f"{field_name}: {url!r} must start with http:// or https://, {example}")
    if not parts.hostname:
        raise ConfigError(f"{field_name}: {url!r} has no host, {example}")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            f"{field_name}: credentials in the URL would be written into every log line; remove "
            "them and give the API key with api_key_env_var (e.g. api_key_env_var: NVIDIA_API_KEY)"
        )
    if parts.query or parts.fragment or text.endswith(("?", "#")):
        raise ConfigError(f"{field_name}: {url!r} has a query or fragment; give the API root only, {example}")
    return text.rstrip("/")


def split_parameters(params: Mapping[str, Any]) -> tuple[TransportSettings, dict[str, Any]]:
    """Split a model's ``parameters`` into transport settings and generation parameters.

    The generation dict is a new dict holding every key not in :data:`TRANSPORT_KEYS`, unchanged
    and in order. Transport values are validated here, so a typo fails at start-up, not on the
    first user request.

    Raises:
        ConfigError: ``parameters.<key>: <what was expected> (got ...)``.
    """
    generation = {key: value for key, value in params.items() if key not in TRANSPORT_KEYS}
    base_url = None
    for key in ("base_url", "openai_api_base"):
        if key in params:
            url = validate_base_url(params[key], field_name=f"parameters.{key}")
            if base_url is not None and url != base_url:
                raise ConfigError(
                    "parameters: base_url and openai_api_base name different servers "
                    f"({base_url!r}, {url!r}); keep one"
                )
            base_url = url
    timeout = None
    if "timeout" in params:
        value = params["timeout"]
        number = _number(value)
        if number is None or not number > 0:
            raise ConfigError(
                f"parameters.timeout: expected seconds for the whole check, a number > 0 (got {value!r})"
            )
        timeout = number
    max_retries = None
    if "max_retries" in params:
        value = params["max_retries"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"parameters.max_retries: expected a whole number >= 0 (got {value!r})")
        max_retries = value
    headers: tuple[tuple[str, str], ...] = ()
    if "default_headers" in params:
        headers = _headers(params["default_headers"])
    return TransportSettings(base_url, timeout, max_retries, headers, _api_key(params)), generation


def _api_key(params: Mapping[str, Any]) -> str | None:
    """The key written under ``api_key`` / ``openai_api_key`` / ``nvidia_api_key``; messages never
    show a value (it is a secret, or a typo of one)."""
    given: dict[str, str] = {}
    for key in API_KEY_KEYS:
        value = params.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip() or any(ch in value for ch in "\r\n\0"):
            raise ConfigError(
                f"parameters.{key}: expected the key as one line of text (the value is not shown)"
            )
        given[key] = value
    if len(set(given.values())) > 1:
        raise ConfigError(
            f"parameters: the API key is given twice, with different values ({', '.join(given)})"
        )
    return next(iter(given.values()), None)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _headers(value: object) -> tuple[tuple[str, str], ...]:
    where = "parameters.default_headers"
    if not isinstance(value, Mapping):
        kind = type(value).__name__
        raise ConfigError(f"{where}: expected a mapping of header names to strings (got {kind})")
    pairs: list[tuple[str, str]] = []
    for name, text in value.items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            raise ConfigError(f"{where}: {name!r} is not a valid header name")
        if name.lower() in MANAGED_HEADERS:
            hint = (
                "; give the API key with api_key_env_var (e.g. api_key_env_var: NVIDIA_API_KEY)"
                if name.lower() == "authorization"
                else ""
            )
            raise ConfigError(f"{where}.{name}: set by the client itself, not configurable{hint}")
        if not isinstance(text, str) or any(ch in text for ch in "\r\n\0"):
            # The value is not shown: a header can hold a token.
            raise ConfigError(f"{where}.{name}: expected a one-line string")
        pairs.append((name, text))
    return tuple(pairs)


__all__ = [
    "API_KEY_KEYS",
    "MANAGED_HEADERS",
    "TRANSPORT_KEYS",
    "TransportSettings",
    "split_parameters",
    "validate_base_url",
]
