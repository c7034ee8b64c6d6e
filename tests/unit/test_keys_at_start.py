"""Keys are checked at start: a model whose ``api_key_env_var`` names an unset or empty variable
stops ``LLMRails(config)`` with a ``ConfigError`` naming the variable, the model and the config,
instead of a 401 on the first turn. And the readiness reasons (``server/readiness.py``) say what
happened, including an ``NVIDIA_API_KEY`` that is set but deliberately not sent over http://."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from guardcache import LLMRails, RailsConfig
from guardcache.errors import (
    BackendConnectionError,
    BackendRefusedConfigError,
    BackendTimeoutError,
    ConfigError,
)
from guardcache.server.readiness import NoVerdict, Readiness, Target, describe

GUARD = """
models:
  - type: main
    engine: nim
    model: meta/llama-3.1-8b-instruct
    parameters: {{base_url: "http://127.0.0.1:9/v1"}}{main_key}
  - type: content_safety
    engine: {engine}
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    parameters: {{base_url: "{guard_url}"}}{guard_key}
rails:
  input: {{flows: [content safety check input $model=content_safety]}}
"""


def config(
    *,
    guard_key: str | None = None,
    main_key: str | None = None,
    engine: str = "nim",
    guard_url: str = "http://127.0.0.1:9/v1",
) -> RailsConfig:
    text = GUARD.format(
        guard_key=f"\n    api_key_env_var: {guard_key}" if guard_key else "",
        main_key=f"\n    api_key_env_var: {main_key}" if main_key else "",
        engine=engine,
        guard_url=guard_url,
    )
    return RailsConfig.from_content(text, source="shop/config.yml")


@pytest.mark.parametrize("value", [None, "", "  \n"], ids=["unset", "empty", "blank"])
def test_an_unset_or_empty_key_variable_stops_llmrails(monkeypatch: pytest.MonkeyPatch, value: Any) -> None:
    if value is None:
        monkeypatch.delenv("GC_TEST_GUARD_KEY", raising=False)
    else:
        monkeypatch.setenv("GC_TEST_GUARD_KEY", value)
    with pytest.raises(ConfigError) as raised:
        LLMRails(config(guard_key="GC_TEST_GUARD_KEY"))
    message = str(raised.value)
    assert message.startswith("shop/config.yml: model 'content_safety'")
    assert "GC_TEST_GUARD_KEY is unset or empty" in message


def test_a_set_key_variable_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GC_TEST_GUARD_KEY", "k")
    rails = LLMRails(config(guard_key="GC_TEST_GUARD_KEY"))
    assert rails._runtime.clients["content_safety"]._headers["Authorization"] == "Bearer k"


def test_the_main_models_key_counts_unless_llm_replaces_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GC_TEST_MAIN_KEY", raising=False)
    with pytest.raises(ConfigError, match=r"model 'main'.*GC_TEST_MAIN_KEY"):
        LLMRails(config(main_key="GC_TEST_MAIN_KEY"))
    # A LangChain model answers instead of the config's main model: its key is never used.
    from guardcache.testing.main_model import EchoChatModel

    LLMRails(config(main_key="GC_TEST_MAIN_KEY"), llm=EchoChatModel())


def test_a_model_without_a_key_variable_needs_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NVIDIA_API_KEY", raising=False)
    rails = LLMRails(config())  # a local NIM without a key: fine, as before
    clients = rails._runtime.clients
    assert set(clients) == {"main", "content_safety"}
    assert all("Authorization" not in client._headers for client in clients.values())  # no key sent


def test_an_nvidia_key_set_but_not_sent_over_http_is_said_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("NVIDIA_API_KEY", "nvapi-x")
    plain = config()
    guard = plain.model("content_safety")
    assert guard.api_key() is None  # deliberately not sent in clear text
    note = guard.unsent_key_note()
    assert note is not None and "NVIDIA_API_KEY is set but not sent over http://" in note
    assert "api_key_env_var" in note and "https" in note
    with caplog.at_level("WARNING", logger="guardcache.rails"):
        LLMRails(plain)
    assert "NVIDIA_API_KEY is set but not sent over http://" in caplog.text
    # The readiness reason of a 401 says what happened, not "is not set".
    refused = BackendRefusedConfigError("401", status=401, url="http://x/v1")
    reason = describe(refused, guard)
    assert reason.startswith("401 Unauthorized: check the API key (NVIDIA_API_KEY is set but not sent")
    # Over https, or with the variable named, the key is sent: no note.
    assert config(guard_url="https://nim.example/v1").model("content_safety").unsent_key_note() is None
    assert config(guard_key="NVIDIA_API_KEY").model("content_safety").unsent_key_note() is None
    assert config(engine="openai").model("content_safety").unsent_key_note() is None


def test_readiness_reasons() -> None:
    cfg = config()
    guard = cfg.model("content_safety")
    assert describe(BackendRefusedConfigError("x", status=403), guard).startswith("403 Forbidden: check")
    assert describe(BackendRefusedConfigError("x", status=404), guard) == (
        "404: model 'nvidia/llama-3.1-nemoguard-8b-content-safety' unknown / base_url"
    )
    assert describe(BackendConnectionError("x"), guard) == "unreachable (connection failed)"
    assert describe(BackendTimeoutError("x"), guard) == "unreachable (no answer in time)"
    assert describe(NoVerdict("no verdict: unparseable answer (bad json)"), guard) == (
        "no verdict: unparseable answer"
    )


def test_readiness_backs_off_while_failing_and_probes_slowly_when_healthy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The schedule: retry, doubling up to the interval while failing; the interval once ok. The
    waits the probing task asks for are recorded (and skipped), so no clock decides the outcome."""

    async def scenario() -> list[tuple[float, bool, dict[str, str]]]:
        waits: list[tuple[float, bool, dict[str, str]]] = []  # (seconds, ok, results) at each wait
        probes = 0
        enough = asyncio.Event()
        real_sleep = asyncio.sleep

        async def probe(deadline: float) -> None:
            nonlocal probes
            probes += 1
            if probes == 7:
                enough.set()
            if probes <= 4:
                raise BackendConnectionError("down")

        readiness = Readiness({}, interval=0.4, retry=0.05, timeout=1.0)
        readiness.targets = [Target("c/main", "main model", None, probe)]

        async def recorded_sleep(delay: float, result: Any = None) -> Any:
            if asyncio.current_task() is not readiness._task:
                return await real_sleep(delay, result)
            waits.append((delay, readiness.ok, dict(readiness.results)))
            return await real_sleep(0, result)

        monkeypatch.setattr(asyncio, "sleep", recorded_sleep)
        readiness.start()
        await asyncio.wait_for(enough.wait(), 30)
        await readiness.stop()
        return waits

    waits = asyncio.run(scenario())
    # failing: 0.05, 0.1, 0.2, 0.4 (capped); then ok: the interval, 0.4, between rounds
    assert [delay for delay, _, _ in waits[:6]] == [0.05, 0.1, 0.2, 0.4, 0.4, 0.4]
    down = {"c/main": "unreachable (connection failed)"}
    assert [(ok, results) for _, ok, results in waits[:4]] == [(False, down)] * 4
    assert [(ok, results) for _, ok, results in waits[4:6]] == [(True, {"c/main": "ok"})] * 2
