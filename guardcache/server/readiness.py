"""Readiness that tells the truth: every model of every served config answers a real request.

``/health/ready`` used to open a TCP connection to each guard backend, so it said 200 while every
guard call got 401 (a missing key) and while the main model was down. Now a background task probes,
at start and then periodically, through the same clients, prompts and parsers the turns use:

- each guard rail sends its rendered prompt around neutral texts (``WARM_UP_TEXTS``, the texts
  ``warm_up_async`` primes with) and its answer must parse as a verdict. The request goes straight
  to the rail's client: never through its cache (nothing is looked up, nothing stored), never
  recorded as a turn (probes are in no metric);
- the main model answers a 1-token completion (``max_tokens: 1``: the one request every
  OpenAI-compatible server supports; it costs one prompt of a few tokens and one output token per
  probe, per worker), or ``GET {base_url}/models`` must list it (``ready_main: models``: free, but
  not every server has the route), or it is not probed (``off``).

Results are cached between rounds (``ready_interval`` seconds while everything is ok; after a
failure the next round comes after ``ready_retry`` seconds, doubling up to ``ready_interval``), so
``/health/ready`` only reads them: a load balancer asking often costs nothing and never waits on a
backend. A failing model is named with why: ``401 Unauthorized: check the API key``, ``404: model
unknown / base_url``, ``unreachable``, ``no verdict: unparseable answer``...; details (URLs) go to
the log, once per change, not to the open health route.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from guardcache.checks.check import WARM_UP_TEXTS, Unreadable
from guardcache.errors import (
    BackendConnectionError,
    BackendDeclinedError,
    BackendError,
    BackendProtocolError,
    BackendTimeoutError,
    BackendTLSError,
    ParseError,
)

if TYPE_CHECKING:
    from guardcache.config.models import ModelConfig
    from guardcache.rails.llmrails import LLMRails

log = logging.getLogger("guardcache.server")

MAIN_PROBES = ("completion", "models", "off")
OK = "ok"


class NoVerdict(Exception):
    """A probe's answer could not be read as a verdict."""


@dataclass(frozen=True, slots=True)
class Target:
    """One probe: ``name`` is ``config_id/model type`` (several rails on one model share it)."""

    name: str
    what: str  # for the log: the rail's flow, or "main model"
    model: ModelConfig | None
    probe: Callable[[float], Awaitable[None]]  # takes the absolute deadline (time.monotonic())


async def probe_check(check: Any, deadline: float) -> None:
    """One uncached check of neutral texts, through the check's own client, prompt and parser.

    Raises the client's ``BackendError`` or :class:`NoVerdict`. Goes around the cache on purpose:
    a probe must reach the backend every time, and its verdict must never answer a user."""
    texts = check.texts.read(WARM_UP_TEXTS)
    classify = getattr(check.client, "classify", None)
    if classify is not None:  # the JailbreakDetect NIM: {"input": text} to its own URL
        result = await classify(texts["user_input"], deadline)
    elif hasattr(check, "messages"):
        result = await check.client.complete(check.messages(texts), deadline=deadline, **check.params)
    else:  # a check of another kind: its own priming request (no verdict read)
        await check.prime()
        return
    if not result.content.strip():
        raise NoVerdict("no verdict: empty answer")
    try:
        check.parser(result.content)
    except (ParseError, Unreadable) as exc:
        raise NoVerdict(f"no verdict: unparseable answer ({exc})") from None


def describe(exc: BaseException, model: ModelConfig | None) -> str:
    """Why a probe failed, in a few words for ``/health/ready`` (no URL: the route is open)."""
    status = getattr(exc, "status", None)
    if isinstance(exc, NoVerdict):
        return str(exc).split(" (", 1)[0]
    if isinstance(exc, BackendError) and status in (401, 403):
        reason = "401 Unauthorized" if status == 401 else "403 Forbidden"
        text = f"{reason}: check the API key"
        note = model.unsent_key_note() if model is not None else None
        if note is not None:
            text += f" ({note})"
        elif model is not None and model.api_key() is None:
            text += " (no key is sent for this model: name its variable with api_key_env_var)"
        return text
    if isinstance(exc, BackendError) and status == 404:
        name = f" {model.model!r}" if model is not None else ""
        return f"404: model{name} unknown / base_url"
    if isinstance(exc, BackendTLSError):
        return "unreachable (the TLS certificate does not verify)"
    if isinstance(exc, BackendTimeoutError | TimeoutError):
        return "unreachable (no answer in time)"
    if isinstance(exc, BackendConnectionError | OSError):
        return "unreachable (connection failed)"
    if isinstance(exc, BackendDeclinedError):
        return "no verdict: the answer was empty or declined"
    if isinstance(exc, BackendProtocolError):
        return "no verdict: the answer is not an OpenAI chat completion"
    if isinstance(exc, BackendError) and status is not None:
        return f"{status}: the backend failed"
    return f"failed ({type(exc).__name__})"


def _model_type_of(rails: LLMRails, check: Any) -> str:
    client = getattr(check, "client", None)
    for model_type, c in rails._runtime.clients.items():
        if c is client:
            return model_type
    return "jailbreak_detection" if getattr(client, "classify", None) is not None else str(check.task)


def _main_probe(rails: LLMRails, mode: str) -> Callable[[float], Awaitable[None]] | None:
    from guardcache.rails.main_llm import ClientLLM

    main = rails.runner.main
    if mode == "off" or not isinstance(main, ClientLLM):  # a LangChain model: not ours to probe
        return None
    client = main.client
    params = {k: v for k, v in main.params.items() if k not in ("max_completion_tokens", "stream")}
    params["max_tokens"] = 1

    async def completion(deadline: float) -> None:
        await client.complete([{"role": "user", "content": "Hi"}], deadline=deadline, **params)

    if mode == "completion":
        return completion
    model = rails.config.model("main")

    async def models(deadline: float) -> None:
        import httpx2

        headers = {"Accept": "application/json"}
        key = model.api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        timeout = max(0.01, deadline - time.monotonic())
        url = f"{client.base_url}/models"
        try:
            async with httpx2.AsyncClient(timeout=timeout, follow_redirects=False) as http:
                response = await http.get(url, headers=headers)
        except httpx2.TimeoutException as exc:
            raise BackendTimeoutError(f"{url}: {type(exc).__name__}", url=url) from None
        except httpx2.HTTPError as exc:
            raise BackendConnectionError(f"{url}: {type(exc).__name__}", url=url) from None
        if response.status_code != 200:
            raise BackendError(f"{url} answered {response.status_code}", status=response.status_code, url=url)
        try:
            listed = {m.get("id") for m in response.json().get("data", [])}
        except (ValueError, AttributeError, TypeError):
            raise BackendProtocolError(f"{url}: not an OpenAI model list", url=url) from None
        if client.model not in listed:
            raise BackendError(f"{url} does not list model {client.model!r}", status=404, url=url)

    return models


def targets(rails: Mapping[str, LLMRails], main_mode: str) -> list[Target]:
    """What one round probes: each guard rail of each config, and each config's main model."""
    found: list[Target] = []
    for config_id, r in rails.items():
        models = {m.type: m for m in r.config.models}
        main = _main_probe(r, main_mode)
        if main is not None:
            found.append(Target(f"{config_id}/main", "main model", models.get("main"), main))
        runtime = r._runtime
        for rail in [
            *runtime.input_rails,
            *runtime.output_rails,
            *runtime.tool_input_rails,
            *runtime.tool_output_rails,
        ]:
            model_type = _model_type_of(r, rail.check)

            async def probe(deadline: float, check: Any = rail.check) -> None:
                await probe_check(check, deadline)

            found.append(Target(f"{config_id}/{model_type}", rail.name, models.get(model_type), probe))
    return found


class Readiness:
    """The probes of one worker, run in the background; :attr:`results` is what the route reads."""

    def __init__(
        self,
        rails: Mapping[str, LLMRails],
        *,
        interval: float = 30.0,
        retry: float = 1.0,
        timeout: float = 10.0,
        main: str = "completion",
    ) -> None:
        if main not in MAIN_PROBES:
            raise ValueError(f"ready_main must be one of {', '.join(MAIN_PROBES)}, not {main!r}")
        self.targets = targets(rails, main)
        self.interval = interval
        self.retry = min(retry, interval)
        self.timeout = timeout
        self.results: dict[str, str] = {}
        self.checked_at: float | None = None  # time.monotonic() of the last finished round
        self.rounds = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def checked(self) -> bool:
        return self.checked_at is not None

    @property
    def ok(self) -> bool:
        return self.checked and all(v == OK for v in self.results.values())

    async def probe_once(self) -> dict[str, str]:
        """One round: every target at once; the results replace the cached ones."""
        deadline = time.monotonic() + self.timeout

        async def one(target: Target) -> str | None:
            try:
                async with asyncio.timeout(self.timeout + 1.0):  # the clients have the deadline too
                    await target.probe(deadline)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason = describe(exc, target.model)
                if self.results.get(target.name) != reason:  # log a change, not every round
                    log.warning("readiness: %s (%s) failed: %s [%s]", target.name, target.what, reason, exc)
                return reason
            return None

        outcomes = await asyncio.gather(*(one(t) for t in self.targets))
        results: dict[str, str] = {}
        for target, reason in zip(self.targets, outcomes, strict=True):
            if reason is not None and results.get(target.name, OK) == OK:
                results[target.name] = reason  # the first failure of a model's rails names it
            else:
                results.setdefault(target.name, OK)
        recovered = [n for n, v in results.items() if v == OK and self.results.get(n, OK) != OK]
        for name in recovered:
            log.info("readiness: %s answers again", name)
        self.results = results
        self.checked_at = time.monotonic()
        self.rounds += 1
        return results

    async def run(self) -> None:
        """Probe forever: every ``interval`` seconds while all is ok; after a failure ``retry``
        seconds, doubling up to ``interval``."""
        delay = self.retry
        probe = not self.checked  # a round awaited at start-up (the warm-up) counts as the first
        while True:
            if probe:
                try:
                    await self.probe_once()
                except asyncio.CancelledError:
                    raise
                except Exception:  # a bug here must not end the probing (and leave a stale answer)
                    log.error("readiness probe round failed unexpectedly", exc_info=True)
            probe = True
            if self.ok:
                delay = self.retry
                await asyncio.sleep(self.interval)
            else:
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.interval)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run(), name="guardcache-readiness")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


__all__ = ["MAIN_PROBES", "NoVerdict", "Readiness", "Target", "describe", "probe_check", "targets"]
