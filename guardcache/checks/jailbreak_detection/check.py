"""The JailbreakDetect check: a JSON classifier endpoint, cached and coalesced like every check.

The request is NeMo's (``POST {"input": text}``, bearer token), sent through guardcache's client so
it gets the same pooling, deadlines, retries and typed errors as the chat checks. The key covers the
normalized text under a namespace of the endpoint's model type and URL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from guardcache.cache import CacheInterface, Namespace
from guardcache.checks.check import (
    WARM_UP_TEXTS,
    CachedLookups,
    CheckOutcome,
    TurnTexts,
    Unreadable,
    digest,
    run_cached,
)
from guardcache.checks.verdict import CachedCheck, Verdict
from guardcache.config import RailsConfig
from guardcache.config.parameters import validate_base_url
from guardcache.errors import ConfigError, ParseError
from guardcache.flows import FlowSpec
from guardcache.flows.jailbreak_detection import JAILBREAK_DETECTION, MODEL_TYPE
from guardcache.llm.client import ChatClient
from guardcache.llm.transport_contract import Reply
from guardcache.llm.types import ChatResult, Usage

MODEL = "nvidia/nemoguard-jailbreak-detect"


class ClassifyClient(ChatClient):
    """POSTs ``{"input": text}`` to a classifier URL; the answer's JSON text is the result content."""

    def __init__(self, url: str, *, api_key: str | None, **kwargs: Any) -> None:
        base = validate_base_url(url).rsplit("/", 1)[0]
        super().__init__(base, model=MODEL, api_key=api_key, provider="nim", **kwargs)
        self.url = url

    async def classify(self, text: str, deadline: float | None = None) -> ChatResult:
        return await self.send({"input": text}, deadline=deadline)

    def parse_answer(self, reply: Reply) -> ChatResult:
        """The classifier's JSON text as the result's content, read by the check's parser (which
        says whether it is a verdict); a classifier reports no token usage."""
        return ChatResult(content=reply.text, usage=Usage(0, 0, 0, 0, MODEL, "nim"), duration=0.0)


class ClassifyCheck(CachedLookups):
    """``jailbreak detection model``: allowed unless the classifier says ``jailbreak: true``."""

    def __init__(
        self,
        *,
        spec: FlowSpec,
        client: ClassifyClient,
        cache: CacheInterface | None,
        max_input_chars: int,
        parser: Callable[[str], Verdict],
        cache_version: str | None = None,
    ) -> None:
        self.spec = spec
        self.task = spec.name
        self.client = client
        self.cache = cache
        self.parser = parser
        self.texts = TurnTexts(spec.variables, max_input_chars)
        self.namespace = Namespace.of(
            "jailbreak_detection", client.url, "", {"~flow": spec.name}, version=cache_version
        )

    async def _call(self, text: str, deadline: float | None) -> CachedCheck:
        result = await self.client.classify(text, deadline)
        try:
            verdict: Verdict = self.parser(result.content)
        except ParseError as exc:
            raise Unreadable(str(exc), result.usage) from None
        return CachedCheck.shared(verdict, result.usage)

    async def run(self, variables: Mapping[str, Any], deadline: float | None = None) -> CheckOutcome:
        text = self.texts.read(variables)["user_input"]
        key = digest(self.namespace, [text])
        return await run_cached(self.task, self.cache, key, lambda: self._call(text, deadline))

    async def prime(self) -> None:
        await self.client.classify(self.texts.read(WARM_UP_TEXTS)["user_input"])


def build_classify_check(
    config: RailsConfig,
    spec: FlowSpec,
    cache: CacheInterface | None,
    max_input_chars: int,
    parser: Callable[[str], Verdict],
) -> ClassifyCheck:
    settings = config.rails.config.jailbreak_detection
    url = settings.url
    if url is None:  # validated at load; kept for safety
        raise ConfigError(
            f"{config.source or '<config>'}: rails.config.jailbreak_detection.nim_base_url is not set"
        )
    client = ClassifyClient(url, api_key=settings.api_key())
    # A jailbreak_detection model entry, when there is one, holds the NIM's cache settings.
    entry = next((m for m in config.models if m.type == MODEL_TYPE), None)
    return ClassifyCheck(
        spec=spec,
        client=client,
        cache=cache,
        max_input_chars=max_input_chars,
        parser=parser,
        cache_version=entry.cache.version if entry is not None else None,
    )


BUILDERS = {JAILBREAK_DETECTION.name: build_classify_check}
"""This folder's flows that are not chat checks, with their builder (``guardcache.checks.catalog``)."""

__all__ = ["BUILDERS", "ClassifyCheck", "ClassifyClient", "build_classify_check"]
