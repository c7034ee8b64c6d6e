"""The error hierarchy: one base, a few families a caller can branch on.

Messages say what was wrong, where (file, field, URL) and what to do, because the person reading them
is usually an operator looking at a log line, not the code.
"""

from __future__ import annotations


class GuardcacheError(Exception):
    """Base of every error guardcache raises on purpose."""


class ConfigError(GuardcacheError, ValueError):
    """A config file or value is invalid. The message names the file and the field."""


class BackendError(GuardcacheError):
    """A model backend could not give a usable answer (after retries, where they apply).

    Never cached: the rail that sees it decides by its ``on_error`` policy.
    """

    def __init__(self, message: str, *, status: int | None = None, url: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.url = url


class BackendTimeoutError(BackendError):
    """The backend did not answer within the configured timeout."""


class BackendConnectionError(BackendError):
    """The backend could not be reached (refused, reset, DNS)."""


class BackendStatusError(BackendError):
    """The backend answered with an HTTP error status (4xx/5xx) after the last try."""


class BackendProtocolError(BackendError):
    """The backend answered 200 with a body that is not the expected OpenAI shape."""


class InputRejectedError(GuardcacheError):
    """The guard cannot judge this input because of the input itself, so the input is unsafe.

    Raised for text that cannot be encoded (lone surrogates), text over ``max_input_chars``, and a
    backend that refuses the request as bad (HTTP 400/413/422: too long for its context, undecodable).
    A user can produce any of these at will, so treating them as an outage would let ``on_error:
    allow`` switch the check off: a rail turns this error into a block, whatever ``on_error`` says.
    """


class BackendInputRejectedError(BackendStatusError, InputRejectedError):
    """The backend refused the request because of its content (HTTP 400/413/422): an unsafe input."""


class BackendDeclinedError(BackendError, InputRejectedError):
    """The guard model answered but declined to judge: ``content: null`` with a ``refusal``,
    ``finish_reason: "content_filter"``, or no text at all.

    The user's text caused that answer (a provider's filter, a safety-tuned model refusing to
    repeat it), so it is no verdict and no outage: the rail blocks whatever ``on_error`` says, and
    nothing is cached.
    """


class BackendMisconfiguredError(BackendError):
    """The backend can never answer as configured: a redirect (3xx: guardcache follows none, so
    the API key never reaches another host), 401/403 (the key), 404 (base_url or model name), or a
    TLS certificate that does not verify.

    A class of its own, beside outages: a guard that can never answer must not become no guard, so
    the rail blocks whatever ``on_error`` says, and logs it at ERROR (rate-limited). Never retried.
    """


class BackendRefusedConfigError(BackendStatusError, BackendMisconfiguredError):
    """A 3xx, 401, 403 or 404 answer (``.status``): see :class:`BackendMisconfiguredError`."""


class BackendTLSError(BackendConnectionError, BackendMisconfiguredError):
    """The server's TLS certificate did not verify (wrong CA, name or date): see
    :class:`BackendMisconfiguredError`; ``SSL_CERT_FILE`` names a private CA."""


class BackendProxyError(BackendConnectionError, BackendMisconfiguredError):
    """The environment's proxy cannot be used as set up (not an ``http://`` proxy, or it wants
    credentials): see :class:`BackendMisconfiguredError`."""


class ParseError(GuardcacheError):
    """A model's completion could not be read as a verdict (e.g. invalid JSON, missing key)."""


__all__ = [
    "BackendConnectionError",
    "BackendDeclinedError",
    "BackendError",
    "BackendInputRejectedError",
    "BackendMisconfiguredError",
    "BackendProtocolError",
    "BackendProxyError",
    "BackendRefusedConfigError",
    "BackendStatusError",
    "BackendTLSError",
    "BackendTimeoutError",
    "ConfigError",
    "GuardcacheError",
    "InputRejectedError",
    "ParseError",
]
