"""OpenTelemetry spans of guarded turns (extra ``otel``: opentelemetry-api), off and free by default.

What is traced, when an application has set a tracer provider (``trace.set_tracer_provider``, or
``OTEL_PYTHON_TRACER_PROVIDER``):
- ``guardcache.turn``: one span per turn (``generate_async``, ``check_async``, ``stream_async``),
  opened where the turn's records are (``llm.records.request_scope``), a child of the caller's
  current span; attributes ``guardcache.llm_calls`` and ``guardcache.cache.hits``;
- ``guardcache.rail``: one per rail run (``Rail.run``), a child of the turn: ``guardcache.rail``
  (the flow), ``guardcache.cache.hit``, ``guardcache.verdict`` (``allowed``/``blocked``: the rail's
  decision), ``guardcache.no_verdict`` (and ``error.type``, the failure's class, with an error
  status, when the rail decided without a verdict), ``guardcache.single_flight.joined`` when the
  check waited for another asker's backend call for the same key;
- ``{operation} {model}`` (``chat nvidia/...``): one per backend call (``ChatClient.send`` and
  ``stream``), kind CLIENT, after OpenTelemetry's GenAI semantic conventions: ``gen_ai.operation.name``
  (``chat``; ``classify`` for the JailbreakDetect classifier, which is no chat), ``gen_ai.system``
  and ``gen_ai.provider.name`` (the client's provider label), ``gen_ai.request.model``,
  ``gen_ai.response.model``, ``gen_ai.usage.input_tokens``/``output_tokens``,
  ``gen_ai.response.finish_reasons``, ``server.address``/``server.port``, and ``error.type`` with
  an error status on failure. A cache hit makes no backend call, so its rail span has no such child;
  neither has an asker that joined another's backend call (single flight): the call is a child of
  the rail span of the asker that started it, and the joiner's rail span says
  ``guardcache.single_flight.joined``.

Never any user text: no prompt, answer, message or exception message is put in a span name,
attribute, event or status description (the classes of failures only).

Off means free. Nothing of OpenTelemetry is imported by guardcache: while ``opentelemetry.trace`` is
not in ``sys.modules``, no application can have set a provider, and a turn's only cost is one
dictionary lookup. Once it is imported, each turn's start reads the global provider (a module
attribute) and compares it with the one the tracer was made for, so a provider set after
guardcache was imported is used from the next turn on. The proxy and no-op providers are off. The
hooks below that (rails, checks) read the module global :data:`TRACER` that the turn set.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from contextvars import ContextVar
from functools import lru_cache
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

_TRACE_MODULE = "opentelemetry.trace"
_UNKNOWN: Any = object()

TRACER: Any = None
"""The tracer of the provider the application set, or None: tracing is off. Read by the hooks;
updated by :func:`refresh` (at every turn's start and every backend call)."""

_provider: Any = None  # the provider TRACER was made from (or found to be a no-op)
_resolved = False  # get_tracer_provider() was called once (it loads OTEL_PYTHON_TRACER_PROVIDER)
_otel: Any = None  # (trace, context) modules, kept once tracing is on

_RAIL_SPAN: ContextVar[Any] = ContextVar("guardcache_rail_span", default=None)

R = TypeVar("R")


def refresh() -> Any:
    """The tracer to use now, or None (tracing off); updates :data:`TRACER`."""
    global TRACER, _provider, _resolved, _otel
    trace = sys.modules.get(_TRACE_MODULE)
    if trace is None:
        TRACER = _provider = None
        return None
    provider = getattr(trace, "_TRACER_PROVIDER", _UNKNOWN)  # None until an application sets one
    if provider is _UNKNOWN or (provider is None and not _resolved):
        _resolved = True
        provider = trace.get_tracer_provider()  # once: resolves a provider named in the environment
    if provider is _provider:
        return TRACER
    _provider = provider
    if provider is None or isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        TRACER = None
        return None
    from opentelemetry import context

    _otel = (trace, context)
    TRACER = provider.get_tracer("guardcache", _version())
    return TRACER


def _version() -> str | None:
    try:
        from importlib.metadata import version

        return version("guardcache")
    except Exception:  # not installed as a distribution (a source tree on the path)
        return None


# -- the turn (llm.records.request_scope) -----------------------------------------------------------


def start_turn() -> Any:
    """Open the turn's span and make it current; None (and no work) when tracing is off."""
    if TRACER is None:
        trace = sys.modules.get(_TRACE_MODULE)
        if trace is None or (_resolved and getattr(trace, "_TRACER_PROVIDER", _UNKNOWN) is _provider):
            return None  # not imported, or the provider tracing was found off for is still the one
    tracer = refresh()
    if tracer is None:
        return None
    trace, context = _otel
    span = tracer.start_span("guardcache.turn")
    return span, context.attach(trace.set_span_in_context(span))


class _Records(Protocol):
    llm_calls: list[Any]


def end_turn(handle: Any, records: _Records, exc: BaseException | None) -> None:
    """Close what :func:`start_turn` opened (in the same context)."""
    span, token = handle
    _otel[1].detach(token)
    if span.is_recording():
        calls = tuple(records.llm_calls)
        hits = sum(1 for call in calls if call.from_cache)
        span.set_attributes({"guardcache.llm_calls": len(calls), "guardcache.cache.hits": hits})
        if exc is not None:
            _failed(span, type(exc).__name__)
    span.end()


# -- a rail (rails.rail.Rail.run) -------------------------------------------------------------------


class _RailResult(Protocol):
    @property
    def allowed(self) -> bool: ...
    @property
    def from_cache(self) -> bool: ...
    @property
    def error(self) -> str | None: ...


RR = TypeVar("RR", bound=_RailResult)


async def traced_rail(name: str, run: Awaitable[RR], kind: str = "message") -> RR:
    """Await a rail's ``run`` inside its span (current while it runs, so backend calls are its
    children). Only called when :data:`TRACER` is set. ``kind``: what the rail judged (the
    message, a tool result, a tool call), the span's ``guardcache.rail.kind``."""
    tracer = TRACER
    if tracer is None:  # turned off between the caller's look and now
        return await run
    trace, context = _otel
    attributes = {"guardcache.rail": name, "guardcache.rail.kind": kind}
    span = tracer.start_span("guardcache.rail", attributes=attributes)
    token = context.attach(trace.set_span_in_context(span))
    marker = _RAIL_SPAN.set(span)
    try:
        result = await run
    except BaseException as exc:  # cancelled (a parallel group's block), or a bug in the caller
        _failed(span, type(exc).__name__)
        raise
    else:
        if span.is_recording():
            span.set_attributes(
                {
                    "guardcache.cache.hit": bool(result.from_cache),
                    "guardcache.verdict": "allowed" if result.allowed else "blocked",
                    "guardcache.no_verdict": result.error is not None,
                }
            )
            if result.error is not None:
                _failed(span, error_class(result.error))
        return result
    finally:
        _RAIL_SPAN.reset(marker)
        context.detach(token)
        span.end()


def error_class(error: str) -> str:
    """The failure class of a ``RailResult.error``: ``"BackendTimeoutError: ..."`` (or a bare class
    name) gives the class; an unreadable answer's reason (a sentence) is a ``ParseError``. Only the
    class goes into a span: the rest is a message."""
    head = error.partition(":")[0]
    return head if head.isidentifier() and head[:1].isupper() else "ParseError"


def joined_flight() -> None:
    """Mark the current rail's span: its check waits for another asker's backend call."""
    span = _RAIL_SPAN.get()
    if span is not None:
        span.set_attribute("guardcache.single_flight.joined", True)


# -- a backend call (llm.client.ChatClient.send / stream) -------------------------------------------


class _Client(Protocol):
    url: str
    model: str
    provider: str


class _Usage(Protocol):
    prompt_tokens: int
    completion_tokens: int
    model: str | None


@lru_cache(maxsize=256)
def _server(url: str) -> tuple[str | None, int | None]:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.hostname, port


_REQUEST_PARAMS = {
    "max_tokens": "gen_ai.request.max_tokens",
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
}


def _start_call(tracer: Any, client: _Client, body: Mapping[str, Any]) -> Any:
    operation = "chat" if "messages" in body else "classify"
    model = body.get("model")
    model = model if isinstance(model, str) else client.model
    host, port = _server(client.url)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.system": client.provider,
        "gen_ai.provider.name": client.provider,
        "gen_ai.request.model": model,
    }
    if host is not None:
        attributes["server.address"] = host
    if port is not None:
        attributes["server.port"] = port
    for name, attribute in _REQUEST_PARAMS.items():
        value = body.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            attributes[attribute] = value
    kind = _otel[0].SpanKind.CLIENT
    return tracer.start_span(f"{operation} {model}", kind=kind, attributes=attributes)


def _answered(span: Any, usage: _Usage | None, finish_reason: str | None, attempts: int = 1) -> None:
    if not span.is_recording():
        return
    if usage is not None:
        if usage.model:
            span.set_attribute("gen_ai.response.model", usage.model)
        span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
    if finish_reason:
        span.set_attribute("gen_ai.response.finish_reasons", (finish_reason,))
    if attempts != 1:
        span.set_attribute("guardcache.attempts", attempts)


def _call_failed(span: Any, exc: BaseException) -> None:
    status = getattr(exc, "status", None)
    if isinstance(status, int) and not isinstance(status, bool) and span.is_recording():
        span.set_attribute("http.response.status_code", status)
    _failed(span, type(exc).__name__)


def _failed(span: Any, error_type: str) -> None:
    if span.is_recording():
        span.set_attribute("error.type", error_type)
    span.set_status(_otel[0].Status(_otel[0].StatusCode.ERROR, error_type))


class _Result(Protocol):
    @property
    def usage(self) -> Any: ...
    @property
    def finish_reason(self) -> str | None: ...
    @property
    def attempts(self) -> int: ...


RT = TypeVar("RT", bound=_Result)


async def traced_call(client: _Client, body: Mapping[str, Any], call: Awaitable[RT]) -> RT:
    """Await one backend call (``ChatClient.send``) inside its span, a child of the current one."""
    tracer = TRACER
    if tracer is None:
        return await call
    span = _start_call(tracer, client, body)
    try:
        result = await call
    except BaseException as exc:
        _call_failed(span, exc)
        raise
    else:
        _answered(span, result.usage, result.finish_reason, result.attempts)
        return result
    finally:
        span.end()


class _Totals(Protocol):
    usage: Any
    finish_reason: str | None


async def traced_stream(
    client: _Client, body: Mapping[str, Any], totals: _Totals, deltas: AsyncIterator[str]
) -> AsyncIterator[str]:
    """Yield a streamed backend call's deltas inside its span (opened at the first read, ended when
    the stream ends, fails or is closed). The span is never made current: a generator's context
    is its reader's."""
    tracer = TRACER
    span = None if tracer is None else _start_call(tracer, client, body)
    try:
        async for delta in deltas:
            yield delta
    except GeneratorExit:  # the reader stopped (a blocked window, a client that left): no error
        raise
    except BaseException as exc:
        if span is not None:
            _call_failed(span, exc)
        raise
    else:
        if span is not None:
            _answered(span, totals.usage, totals.finish_reason)
    finally:
        close = getattr(deltas, "aclose", None)
        if close is not None:
            await close()
        if span is not None:
            span.end()


def backend_traced() -> bool:
    """Whether a backend call starting now gets a span (a full look at the provider: a call is
    rare beside a cached check, and may happen outside any turn, e.g. a warm-up)."""
    if TRACER is None:
        trace = sys.modules.get(_TRACE_MODULE)
        if trace is None or (_resolved and getattr(trace, "_TRACER_PROVIDER", _UNKNOWN) is _provider):
            return False  # not imported, or the provider tracing was found off for is still the one
    return refresh() is not None


# -- an incoming request (guardcache serve) ---------------------------------------------------------


def _carrier(headers: Mapping[str, str] | Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    if isinstance(headers, Mapping):
        return {str(k).lower(): str(v) for k, v in headers.items()}
    carrier: dict[str, str] = {}
    for name, value in headers:  # ASGI: (lower-case name, value) byte pairs
        key = name.decode("latin-1").lower()
        carrier[key] = (
            value.decode("latin-1") if key not in carrier else f"{carrier[key]},{value.decode('latin-1')}"
        )
    return carrier


def extract_context(headers: Mapping[str, str] | Iterable[tuple[bytes, bytes]]) -> Any:
    """The OpenTelemetry context an incoming request's headers carry (``traceparent``,
    ``tracestate``, baggage: whatever the global propagator reads), or None when tracing is off.
    ``headers`` is a mapping or ASGI's ``scope["headers"]``."""
    if not backend_traced():
        return None
    from opentelemetry import propagate

    return propagate.extract(_carrier(headers))


def attach_incoming(headers: Iterable[tuple[bytes, bytes]]) -> Any:
    """Make the trace an incoming request's ASGI headers carry current; a token for :func:`detach`,
    or None when tracing is off. (``continue_trace`` as two calls, for a server's hot path: when
    tracing is off this is one call and two lookups.)"""
    if TRACER is None:
        trace = sys.modules.get(_TRACE_MODULE)
        if trace is None or (_resolved and getattr(trace, "_TRACER_PROVIDER", _UNKNOWN) is _provider):
            return None
    context = extract_context(headers)
    return None if context is None else _otel[1].attach(context)


def detach(token: Any) -> None:
    """Undo :func:`attach_incoming`."""
    _otel[1].detach(token)


class continue_trace:  # lower case: used like a function, ``with continue_trace(scope["headers"]):``
    """Make the trace an incoming request's headers carry current for the block, so the turns run
    in it are children of the caller's span. Free when tracing is off (one lookup)."""

    __slots__ = ("_headers", "_token")

    def __init__(self, headers: Mapping[str, str] | Iterable[tuple[bytes, bytes]]) -> None:
        self._headers = headers
        self._token: Any = None

    def __enter__(self) -> None:
        context = extract_context(self._headers)
        if context is not None:
            self._token = _otel[1].attach(context)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _otel[1].detach(self._token)
            self._token = None


__all__ = [
    "TRACER",
    "attach_incoming",
    "backend_traced",
    "continue_trace",
    "detach",
    "end_turn",
    "error_class",
    "extract_context",
    "joined_flight",
    "refresh",
    "start_turn",
    "traced_call",
    "traced_rail",
    "traced_stream",
]
