"""A model's ``parameters:`` read once, at validation: how to reach its server, and what to ask it.

Why one place: a model's ``parameters:`` mixes how to reach the server (``base_url``, ``timeout``,
``max_retries``, ``default_headers``, and the API key NeMo configs may write there: ``api_key``,
``openai_api_key``, ``nvidia_api_key``) with what to ask it (``temperature``, ``max_tokens``...). The
second set goes into every request body and into the cache namespace (a changed temperature must
not serve an old verdict); the first must go into neither: a transport key in the body can make a
strict server answer 400, and in the namespace a changed timeout (or a rotated key) would empty the
cache for nothing. A key in the body or the namespace would also be sent to the model or derivable
from the cache: it is a transport setting, sent only as ``Authorization: Bearer``.

Why at validation: the split and its checks used to run in four places (the config, the runtime
builder, the check, the turn runner), each reading the raw dict, and the client's own module raised
``ConfigError`` below the config boundary. Now :func:`parse_parameters` runs once, when
``ModelConfig`` is validated, so a typo fails at load naming the file and field
(``config.yml: models[1].parameters.timeout: ...``), and every consumer reads typed values:
``ModelConfig.transport`` (a :class:`~guardcache.llm.settings.TransportSettings`, the client's
type: rails/builder.py builds the client from it) and ``ModelConfig.generation`` (a
:class:`GenerationSettings`: the request body fields checks/check.py and rails/runner.py send).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from guardcache.config.errors import FieldError, Problem, show
from guardcache.config.keys import written_key
from guardcache.errors import ConfigError
from guardcache.generation import expected_instead
from guardcache.llm.settings import MANAGED_HEADERS, TransportSettings, check_base_url

API_KEY_KEYS: tuple[str, ...] = ("api_key", "openai_api_key", "nvidia_api_key")
"""Keys of ``parameters`` that hold the API key (NeMo hands them to the LangChain client)."""

TRANSPORT_KEYS: frozenset[str] = frozenset(
    {"base_url", "openai_api_base", "timeout", "max_retries", "default_headers", *API_KEY_KEYS}
)
"""Keys of a model's ``parameters`` that configure the transport; every other key is a body field."""

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP field name (RFC 9110 token)

_NO_EXTRAS: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class GenerationSettings:
    """What to ask a model: every ``parameters`` key that is not a transport setting, checked.

    The typed fields are the ones guardcache reads or checks; values keep the type they were written
    with (``temperature: 0`` stays the int 0), so the request body and the cache namespace, which
    digests them, are what they were before the parameters were typed.

    Attributes:
        max_tokens: a whole number > 0, or None (not given).
        temperature: a number from 0 to 2, or None.
        top_p: a number from 0 to 1, or None.
        stop: a string or a tuple of up to 4 strings (one string stays one string), or None.
        (The rules are :mod:`guardcache.generation`'s, the ones ``guardcache serve`` applies.)
        extras: the other keys, passed to the model as they are, in the order written (read-only).
    """

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: str | tuple[str, ...] | None = None
    extras: Mapping[str, Any] = field(default_factory=lambda: _NO_EXTRAS, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.extras, MappingProxyType):  # read-only, whatever it was given as
            object.__setattr__(self, "extras", MappingProxyType(dict(self.extras)))

    def __reduce__(self) -> tuple[Any, ...]:  # a mappingproxy neither pickles nor deep-copies
        return (
            GenerationSettings,
            (self.max_tokens, self.temperature, self.top_p, self.stop, dict(self.extras)),
        )

    def as_body(self) -> dict[str, Any]:
        """The request body fields: the typed ones that are set, then the extras; a new dict (the
        caller merges its own fields into it)."""
        body: dict[str, Any] = {}
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.top_p is not None:
            body["top_p"] = self.top_p
        if self.stop is not None:
            body["stop"] = self.stop
        body.update(self.extras)
        return body


class Parameters(dict[str, Any]):
    """A model's ``parameters`` as written (a dict, equal to the file's: NeMo's field, what a NeMo
    user reads; an API key excepted), carrying what :func:`parse_parameters` made of them.

    Why the typed values travel with the dict instead of beside it on the model: a copy of a model
    with other parameters (``model_copy(update={"parameters": ...})``) can then never pair new
    parameters with old settings; ``ModelConfig`` parses a plain dict it finds there again.
    """

    __slots__ = ("generation", "transport")

    def __init__(
        self, params: Mapping[str, Any], transport: TransportSettings, generation: GenerationSettings
    ) -> None:
        super().__init__(params)
        self.transport = transport
        self.generation = generation

    def __reduce__(self) -> tuple[Any, ...]:  # copy, deepcopy and pickle keep the parsed values
        return (Parameters, (dict(self), self.transport, self.generation))


def validate_base_url(url: object, *, field_name: str = "base_url") -> str:
    """Check an API root (:func:`~guardcache.llm.settings.check_base_url`: the one rule) and return
    it normalized.

    Raises:
        ConfigError: ``<field_name>: <what is wrong>``, with an example of a valid value.
    """
    try:
        return check_base_url(url)
    except ValueError as exc:
        raise ConfigError(f"{field_name}: {exc}") from None


def parse_parameters(params: Mapping[str, Any]) -> Parameters:
    """Split a model's ``parameters`` into transport and generation settings, checking both.

    Every problem is reported, each at its key (relative to ``parameters``: pydantic adds the
    model's path and the loader the file). Values of API keys and headers are never shown (secrets,
    or a secret's typo).

    Raises:
        FieldError: the problems, e.g. ``timeout: expected seconds for the whole check, a number
            > 0 (got 0)``.
    """
    problems: list[Problem] = []
    transport = _transport(params, problems)
    generation = _generation(params, problems)
    if problems:
        raise FieldError("", problems=problems)
    # A key written here lives on in ``transport.api_key`` only (kept out of every repr).
    written = {k: v for k, v in params.items() if k not in API_KEY_KEYS} if transport.api_key else params
    return Parameters(written, transport, generation)


def _transport(params: Mapping[str, Any], problems: list[Problem]) -> TransportSettings:
    base_url = None
    for key in ("base_url", "openai_api_base"):
        if key in params:
            try:
                url = check_base_url(params[key])
            except ValueError as exc:
                problems.append(((key,), str(exc)))
                continue
            if base_url is not None and url != base_url:
                servers = f"({base_url!r}, {url!r})"
                problems.append(
                    ((key,), f"base_url and openai_api_base name different servers {servers}; keep one")
                )
            base_url = url
    timeout = None
    if "timeout" in params:
        value = params["timeout"]
        number = _number(value)
        if number is None or not number > 0:
            problems.append(
                (("timeout",), f"expected seconds for the whole check, a number > 0 (got {value!r})")
            )
        else:
            timeout = number
    max_retries = None
    if "max_retries" in params:
        value = params["max_retries"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            problems.append((("max_retries",), f"expected a whole number >= 0 (got {value!r})"))
        else:
            max_retries = value
    headers: tuple[tuple[str, str], ...] = ()
    if "default_headers" in params:
        headers = _headers(params["default_headers"], problems)
    return TransportSettings(base_url, timeout, max_retries, headers, _api_key(params, problems))


def _api_key(params: Mapping[str, Any], problems: list[Problem]) -> str | None:
    """The key written under ``api_key`` / ``openai_api_key`` / ``nvidia_api_key``, by the one rule
    for a written key (:func:`~guardcache.config.keys.written_key`). ``ModelConfig`` takes these out
    before parsing (it keeps the key apart and warns); a direct caller gets the key as a transport
    setting, never a body field."""
    try:
        found = written_key(params, API_KEY_KEYS)
    except FieldError as exc:
        problems.extend(exc.problems)
        return None
    return found[1] if found is not None else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _headers(value: object, problems: list[Problem]) -> tuple[tuple[str, str], ...]:
    where = "default_headers"
    if not isinstance(value, Mapping):
        kind = type(value).__name__
        problems.append(((where,), f"expected a mapping of header names to strings (got {kind})"))
        return ()
    pairs: list[tuple[str, str]] = []
    for name, text in value.items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            problems.append(((where,), f"{name!r} is not a valid header name"))
        elif name.lower() in MANAGED_HEADERS:
            hint = (
                "; give the API key with api_key_env_var (e.g. api_key_env_var: NVIDIA_API_KEY)"
                if name.lower() == "authorization"
                else ""
            )
            problems.append(((where, name), f"set by the client itself, not configurable{hint}"))
        elif not isinstance(text, str) or any(ch in text for ch in "\r\n\0"):
            # The value is not shown: a header can hold a token.
            problems.append(((where, name), "expected a one-line string"))
        else:
            pairs.append((name, text))
    return tuple(pairs)


def _generation(params: Mapping[str, Any], problems: list[Problem]) -> GenerationSettings:
    """The body fields, checked by the rule ``guardcache serve`` checks a request's by
    (:mod:`guardcache.generation`): a value the server would refuse fails every call, each turn
    blocked as an unjudgeable input."""
    typed: dict[str, Any] = {}
    extras: dict[str, Any] = {}
    for key, value in params.items():
        if key in TRANSPORT_KEYS:
            continue
        expected = expected_instead(key, value)
        if expected is not None:
            problems.append(((key,), f"expected {expected} (got {show(value)})"))
        elif key in _TYPED:
            typed[key] = tuple(value) if key == "stop" and isinstance(value, list) else value
        else:
            extras[key] = value
    return GenerationSettings(**typed, extras=MappingProxyType(extras) if extras else _NO_EXTRAS)


_TYPED = frozenset({"max_tokens", "temperature", "top_p", "stop"})
"""The body fields :class:`GenerationSettings` holds as its own (guardcache reads them)."""


__all__ = [
    "API_KEY_KEYS",
    "TRANSPORT_KEYS",
    "GenerationSettings",
    "Parameters",
    "parse_parameters",
    "validate_base_url",
]
