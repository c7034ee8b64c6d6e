"""A cached LLM check: normalize the turn's texts, key them, ask the cache, call the model on a miss.

This is the only place that joins prompts, the cache and the LLM client (see docs/architecture.md):
the cache knows nothing of LLMs and the client nothing of caching. One :class:`LLMCheck` exists per
(flow, model); it is built once at start-up, so the per-request path does no config work.

Why the pieces are where they are:
- **The key stands for exactly what the model judges.** The texts are normalized once
  (``normalize_text``: layout whitespace only), and that normalized text is both keyed and rendered
  into the prompt. Nothing the model could read differently is folded, so no user can make their
  variant of a text answer for another's.
- The namespace digests the model type and name, the flow, the template fingerprint (with the
  settings the template reads, e.g. ``reasoning_enabled``) and the generation parameters, so a
  changed template or temperature never serves an old verdict. A hit renders nothing: the prompt is
  built only for a backend call.
- The backend sees the rendered template: static prefix first and byte-identical, user text last,
  fixed parameters, so a server with KV-cache reuse reuses the prefix on every request.
- **An input the guard cannot judge is unsafe**: text that is not valid Unicode or longer than
  ``max_input_chars`` raises ``InputRejectedError`` before any call; the rail blocks, whatever its
  ``on_error``. So do images given to a check whose prompt cannot carry them (the runtime refuses
  such a turn before any rail runs; this is the check's own guard).
- **Images are keyed by digest.** A vision check (its prompt passes ``{{ user_input }}`` whole, so
  the model gets the user's content parts: ``prompts.takes_image_parts``) keys a message with images
  on its normalized text parts and each image's SHA-256 (of the decoded bytes of a ``data:`` URL, of
  an https URL's string), in order; the model is sent those text parts and the images as read.
- **An answer that cannot be read as a verdict blocks and is not cached**: the user's text may have
  made the model answer that way (or the backend misbehaved), so it must neither pass nor stick.
- A failed call (transport, status, timeout, cancellation) raises through ``get_or_compute`` and is
  never stored; the rail's ``on_error`` decides (see rails).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, NamedTuple, Protocol

from guardcache import tracing
from guardcache.cache import MISSING, CacheInterface, Namespace
from guardcache.cache.keys import normalize_text
from guardcache.checks.verdict import CachedCheck, Verdict
from guardcache.config.parameters import GenerationSettings
from guardcache.config.prompts import TaskPrompt, fixed_variables
from guardcache.errors import BackendDeclinedError, InputRejectedError, ParseError
from guardcache.flows import DEFAULT_MAX_INPUT_CHARS, FlowSpec
from guardcache.llm.client import ChatClient
from guardcache.llm.records import LLMCallInfo, record_call
from guardcache.llm.types import Usage
from guardcache.prompts import fingerprint, render_messages, takes_image_parts
from guardcache.prompts.jinja import Settings
from guardcache.prompts.parts import ContentParts

#: Texts a warm-up request renders the templates around (neutral, so the answers do not matter).
WARM_UP_TEXTS: Mapping[str, Any] = {
    "user_input": "Hello!",
    "bot_response": "Hello! How can I help you today?",
    "history": (),
}


class CheckOutcome(NamedTuple):
    """One check's verdict and how it was obtained (made on every check: a cheap immutable record).

    ``error`` is set when the model's answer could not be read as a verdict: ``verdict`` is then a
    block and nothing was cached.
    """

    verdict: Verdict
    from_cache: bool
    duration: float  # seconds the caller waited: backend call, or cache lookup (incl. joining a flight)
    error: str | None = None


class Check(Protocol):
    """What a rail runs: one flow on one backend, with its cache."""

    task: str

    async def run(self, variables: Mapping[str, Any], deadline: float | None = None) -> CheckOutcome: ...

    def cached(self, variables: Mapping[str, Any]) -> bool:
        """Whether :meth:`run` would be answered from the cache right now, without counting a
        lookup (the runtime skips running parallel checks as tasks when all of them are)."""
        ...

    def hit(self, variables: Mapping[str, Any]) -> CheckOutcome | None:
        """:meth:`run`'s outcome when the verdict is cached (recorded as :meth:`run` records it),
        without awaiting; None, counting no lookup, sends the caller to :meth:`run`. Optional: the
        runtime calls it when a check has it."""
        ...

    async def prime(self) -> None: ...


def in_cache(cache: CacheInterface | None, key: bytes) -> bool:
    """``key`` is stored in ``cache``, asked without counting a lookup; False for a cache that can
    only answer by counting one (a ``CacheInterface`` that keeps the default ``contains``)."""
    if cache is None or type(cache).contains is CacheInterface.contains:
        return False
    return cache.contains(key)


class Unreadable(Exception):
    """No verdict could be read from an answer. Raised out of ``get_or_compute`` so that nothing is
    stored; carries the usage the call spent, for the request's records."""

    def __init__(self, reason: str, usage: Usage) -> None:
        super().__init__(reason)
        self.usage = usage


def normalized_text(value: Any, limit: int) -> str:
    """A turn's text, checked and normalized; the one gate every checked text goes through."""
    if not isinstance(value, str):
        raise TypeError(f"a checked text must be a str, not {type(value).__name__}")
    if len(value) > limit:
        raise InputRejectedError(
            f"the text is {len(value)} characters long, over max_input_chars={limit}: too long to judge whole"
        )
    return normalize_text(value)


def key_fields(texts: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    """The texts in key order; a history is its length then each (role, content), and content parts
    their own header then each part (``ContentParts.key_fields``), so no choice of texts can shift a
    boundary between variables or pass for an image."""
    fields: list[str] = []
    for name in names:
        value = texts[name]
        if isinstance(value, str):
            fields.append(value)
        elif isinstance(value, ContentParts):
            fields += value.key_fields()
        else:
            fields.append(f"history:{len(value)}")
            for message in value:
                fields += (message["role"], message["content"])
    return fields


def digest(namespace: Namespace, fields: Sequence[str]) -> bytes:
    """The cache key; text that is not valid Unicode (a lone surrogate) cannot be judged."""
    try:
        return namespace.digest_fields(fields)
    except UnicodeEncodeError:
        raise InputRejectedError(
            "the text is not valid Unicode (it holds a lone surrogate) and cannot be sent to a model"
        ) from None


def normalized_parts(value: ContentParts, limit: int) -> ContentParts:
    """A message's content parts with each text part normalized; their text, together, within
    ``limit`` characters (the images are checked already: ``prompts.parts``)."""
    length = value.text_length()
    if length > limit:
        raise InputRejectedError(
            f"the text parts are {length} characters long together, over max_input_chars={limit}: "
            "too long to judge whole"
        )
    return value.map_text(normalize_text)


class TurnTexts:
    """Reads and normalizes the variables a check needs from a turn's variables, once per check.

    ``images``: the check can judge a user message's images (content parts); otherwise parts are an
    input it cannot judge."""

    __slots__ = ("images", "limit", "names", "plain")

    def __init__(self, names: Sequence[str], limit: int, images: bool = False) -> None:
        self.names = tuple(sorted(names))
        self.limit = limit
        self.images = images
        #: Every variable is one text (no history): :meth:`key` may key them as they come.
        self.plain = "history" not in self.names

    def key(self, variables: Mapping[str, Any], namespace: Namespace) -> bytes:
        """``digest(namespace, key_fields(self.read(variables), self.names))``: the cache key of a
        turn's variables. The hit path: when every variable is a plain ``str`` it hashes each as
        it is normalized, without the dict and the field list (the same bytes: the fields of
        :func:`key_fields` for texts, fed as ``digest_fields`` feeds them); anything else is read
        as :meth:`read` reads it, raising what it raises."""
        if self.plain:
            h = namespace.fields_hash()
            limit = self.limit
            try:
                for name in self.names:
                    value = variables.get(name, "")
                    if value.__class__ is not str or len(value) > limit:
                        break  # content parts, another type, too long: read() says what it is
                    data = normalize_text(value).encode("utf-8")
                    h.update(len(data).to_bytes(8, "little"))
                    h.update(data)
                else:
                    return h.digest()
            except UnicodeEncodeError:
                pass  # not valid Unicode: digest() below names it
        return digest(namespace, key_fields(self.read(variables), self.names))

    def read(self, variables: Mapping[str, Any]) -> dict[str, Any]:
        texts: dict[str, Any] = {}
        limit = self.limit
        for name in self.names:
            value = variables.get(name, "")
            if name == "history":
                texts[name] = tuple(
                    {"role": str(m["role"]), "content": normalized_text(m["content"], limit)}
                    for m in (value or ())
                )
            elif value.__class__ is ContentParts:
                if not self.images:
                    raise InputRejectedError(
                        "the message holds images and this rail judges text only (its prompt does not "
                        "pass '{{ user_input }}' whole to the model)"
                    )
                texts[name] = normalized_parts(value, limit)
            else:
                texts[name] = normalized_text(value, limit)
        return texts


class CachedLookups:
    """``Check.cached`` and ``Check.hit`` for a check keyed by its ``texts`` in its ``namespace``:
    what every cached check shares (:class:`LLMCheck`, the classifier's check)."""

    task: str
    cache: CacheInterface | None
    texts: TurnTexts
    namespace: Namespace

    def cached(self, variables: Mapping[str, Any]) -> bool:
        return in_cache(self.cache, self.texts.key(variables, self.namespace))

    def hit(self, variables: Mapping[str, Any]) -> CheckOutcome | None:
        """The cached outcome, without awaiting; raises what ``run`` raises for a text it cannot
        judge."""
        cache = self.cache
        if cache is None:
            return None
        return cached_outcome(self.task, cache, self.texts.key(variables, self.namespace))


class LLMCheck(CachedLookups):
    """One task prompt on one chat model, with its cache. Safe to share across requests and tasks."""

    def __init__(
        self,
        *,
        spec: FlowSpec,
        prompt: TaskPrompt,
        parser: Callable[[str], Verdict],
        client: ChatClient,
        cache: CacheInterface | None,
        model_type: str,
        model_name: str,
        generation: GenerationSettings | None = None,
        settings: Mapping[str, Any] | None = None,
        max_input_chars: int = DEFAULT_MAX_INPUT_CHARS,
        cache_version: str | None = None,
    ) -> None:
        # The model's generation settings (ModelConfig.generation: parsed at validation, transport
        # settings apart, they are the client's) over the flow's defaults, under the prompt's own.
        body = generation.as_body() if generation is not None else {}
        self.params: dict[str, Any] = {**spec.params, **body}
        if prompt.max_tokens is not None:
            self.params["max_tokens"] = prompt.max_tokens
        if prompt.stop:
            self.params["stop"] = list(prompt.stop)
        self.spec = spec
        self.prompt = prompt
        self.task = prompt.task
        self.parser = parser
        self.client = client
        self.cache = cache
        self.settings = Settings.of(settings)  # validated once; the fingerprint covers what is read
        # A vision check: its prompt hands the user's content parts (images included) to the model.
        self.judges_images = "user_input" in spec.variables and takes_image_parts(prompt)
        self.texts = TurnTexts(spec.variables, max_input_chars, images=self.judges_images)
        # What the template may read beside the texts with one value (history: None outside topic
        # control, as NeMo renders it); constant, so not keyed.
        self.fixed: dict[str, Any] = fixed_variables(spec.variables)
        # cache.version joins it: bumping it (a guard upgrade) leaves every old verdict unreachable.
        self.namespace = Namespace.of(
            model_type,
            model_name,
            fingerprint(prompt, self.settings),
            {**self.params, "~flow": spec.name},
            version=cache_version,
        )

    def messages(self, texts: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The exact request messages for these (normalized) texts."""
        variables = {**texts, **self.fixed} if self.fixed else texts
        rendered = render_messages(self.prompt, variables, self.settings)
        build = self.spec.build_messages
        return rendered if build is None else build(rendered, texts)

    def key(self, texts: Mapping[str, Any]) -> bytes:
        """The cache key of normalized texts: the namespace fixes everything else the model sees."""
        return digest(self.namespace, key_fields(texts, self.texts.names))

    async def _call(self, texts: Mapping[str, Any], deadline: float | None) -> CachedCheck:
        result = await self.client.complete(self.messages(texts), deadline=deadline, **self.params)
        if not result.content.strip():
            # No text is no verdict: declined (blocks whatever on_error says), not an outage.
            raise BackendDeclinedError(
                f"{self.client.url} (model {self.client.model!r}) answered with no text; the text "
                "is treated as unsafe",
                status=200,
                url=self.client.url,
            )
        try:
            verdict = self.parser(result.content)
        except ParseError as exc:
            raise Unreadable(str(exc), result.usage) from None
        return CachedCheck.shared(verdict, result.usage)

    async def run(self, variables: Mapping[str, Any], deadline: float | None = None) -> CheckOutcome:
        """Decide; records the call (or its cached stand-in) in the current request's stats.

        ``deadline`` (a ``time.monotonic()`` value) bounds a backend call, with the client's own
        per-check budget; askers joining another's call wait on that call's deadline. Raises
        ``InputRejectedError`` for a text that cannot be judged, ``BackendError`` when the backend
        gave no answer; an unreadable answer is a blocking outcome with ``error`` set.
        """
        texts = self.texts.read(variables)
        key = self.key(texts)
        return await run_cached(self.task, self.cache, key, lambda: self._call(texts, deadline))

    async def prime(self) -> None:
        """One uncached request around neutral texts: the server computes the static prefix."""
        await self.client.complete(self.messages(self.texts.read(WARM_UP_TEXTS)), **self.params)


BACKEND_CALL_SIGNAL: ContextVar[Callable[[], None] | None] = ContextVar(
    "guardcache_backend_call_signal", default=None
)
"""Called, when set in the request's context, as a check of that request starts a backend call (a
miss), or joins another request's backend call for the same key (it waits for that call just the
same). The runtime uses it to start the main model early only when a verdict is not known yet; a
hit never fires it."""


class _BackendCalls:
    """Keys whose value is being computed by a backend call right now, so that an asker joining that
    call (single flight) knows it waits for a backend too. Without this, a turn that joined another
    turn's input check got no early start although it waited as long as a miss. A count per key,
    under a lock: two caches (two ``LLMRails`` of one config) may compute one key at once, from
    different threads. Touched on misses only; a hit reads it only when the signal is set."""

    __slots__ = ("_counts", "_lock")

    def __init__(self) -> None:
        self._counts: dict[bytes, int] = {}
        self._lock = threading.Lock()

    def __contains__(self, key: bytes) -> bool:
        return key in self._counts

    def enter(self, key: bytes) -> None:
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    def leave(self, key: bytes) -> None:
        with self._lock:
            left = self._counts[key] - 1
            if left:
                self._counts[key] = left
            else:
                del self._counts[key]


_IN_BACKEND = _BackendCalls()


def cached_outcome(task: str, cache: CacheInterface, key: bytes) -> CheckOutcome | None:
    """A hit of :func:`run_cached`, decided without a coroutine: the verdict, and its call's record
    restored with the lookup's time as the duration; None (nothing counted) when ``key`` is not
    stored, and the caller runs :func:`run_cached`, which counts the miss and computes.

    Most checks are hits: this spares each of them the awaits of ``get_or_compute`` (a coroutine
    per layer) and the closure a miss needs."""
    started = _monotonic()
    value = cache.hit(key)
    if value is MISSING:
        return None
    duration = _monotonic() - started
    verdict, info = value.replay(task, duration, True)
    record_call(info)
    return _new_outcome(CheckOutcome, (verdict, True, duration, None))


_monotonic = time.monotonic
_new_outcome = tuple.__new__


async def run_cached(
    task: str, cache: CacheInterface | None, key: bytes, call: Callable[[], Any]
) -> CheckOutcome:
    """Serve ``key`` from the cache or compute it with ``call`` (single flight), and record it."""
    computed = False
    signal = BACKEND_CALL_SIGNAL.get()

    async def compute() -> CachedCheck:
        nonlocal computed
        computed = True
        if signal is not None:
            signal()
        _IN_BACKEND.enter(key)
        try:
            value: CachedCheck = await call()
        finally:
            _IN_BACKEND.leave(key)
        return value

    if signal is not None and key in _IN_BACKEND:
        signal()  # this asker will join a backend call already under way
    if tracing.TRACER is not None and key in _IN_BACKEND:
        tracing.joined_flight()
    started = time.monotonic()
    try:
        value = await compute() if cache is None else await cache.get_or_compute(key, compute)
    except Unreadable as exc:
        duration = time.monotonic() - started
        record_call(LLMCallInfo.from_usage(task, exc.usage, duration=duration, from_cache=not computed))
        return CheckOutcome(Verdict(False, (), label="unreadable"), False, duration, str(exc))
    duration = time.monotonic() - started
    verdict, info = value.replay(task, duration, not computed)
    record_call(info)
    return CheckOutcome(verdict, not computed, duration)


__all__ = [
    "BACKEND_CALL_SIGNAL",
    "CachedLookups",
    "Check",
    "CheckOutcome",
    "LLMCheck",
    "TurnTexts",
    "Unreadable",
    "cached_outcome",
    "digest",
    "in_cache",
    "key_fields",
    "normalized_parts",
    "normalized_text",
    "run_cached",
]
