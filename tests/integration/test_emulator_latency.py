"""The latency and prefix-cache model, observed over real HTTP at small time scales."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from guardcache.emulator import EmulatorServer
from guardcache.emulator.samples import as_messages, content_safety_input

pytestmark = pytest.mark.integration

LONG_STATIC_PREFIX = "Rules of the house. " * 400  # ~8000 characters, ~2000 tokens


def http(emu: EmulatorServer) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    return httpx.AsyncClient(base_url=emu.base_url, trust_env=False, timeout=30, limits=limits)


async def post(client: httpx.AsyncClient, messages: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    r = await client.post("/chat/completions", json={"model": "m", "messages": messages, **kw})
    r.raise_for_status()
    body: dict[str, Any] = r.json()
    return body


def modelled_prefills(emu: EmulatorServer) -> list[float]:
    """The prefill time the emulator's latency model gives each request from now on (in order of
    admission): what its TTFT is made of, whatever the machine adds on top."""
    model = emu.emulator.latency
    real = model.prefill
    prefills: list[float] = []

    def recorded(uncached_tokens: int) -> float:
        seconds = real(uncached_tokens)
        prefills.append(seconds)
        return seconds

    model.prefill = recorded  # type: ignore[method-assign]
    return prefills


def cached(body: dict[str, Any]) -> int:
    return int(body["usage"]["prompt_tokens_details"]["cached_tokens"])


async def stream_timing(
    client: httpx.AsyncClient, messages: list[dict[str, Any]], **kw: Any
) -> tuple[float, float, dict[str, Any]]:
    """(time to first chunk, time from first to last content chunk, usage) as the client sees it."""
    payload = {"model": "m", "messages": messages, "stream": True, **kw}
    payload["stream_options"] = {"include_usage": True}
    started = time.perf_counter()
    first = last = 0.0
    usage: dict[str, Any] = {}
    async with client.stream("POST", "/chat/completions", json=payload) as r:
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[len("data: ") :])
            now = time.perf_counter() - started
            if event["choices"] and event["choices"][0]["delta"].get("content"):
                first = first or now
                last = now
            if event.get("usage"):
                usage = event["usage"]
    return first, last - first, usage


async def test_a_repeated_prefix_is_served_from_cache_with_a_lower_ttft(emulator_factory: Any) -> None:
    emu = await emulator_factory(latency={"time_scale": 1.0})
    prefills = modelled_prefills(emu)
    async with http(emu) as client:
        cold_ttft, _, cold = await stream_timing(
            client, [{"role": "user", "content": LONG_STATIC_PREFIX + "first question"}], max_tokens=2
        )
        warm_runs = [
            await stream_timing(
                client, [{"role": "user", "content": LONG_STATIC_PREFIX + f"question {i}"}], max_tokens=2
            )
            for i in range(3)
        ]
    assert cold["prompt_tokens_details"]["cached_tokens"] == 0
    for _, _, warm in warm_runs:
        shared = warm["prompt_tokens_details"]["cached_tokens"]
        assert shared >= 1900 and shared % 64 == 0
    # Modelled: 24 ms + prefill 4 ms + 0.03 ms/token -> ~89 ms cold, ~30 ms warm. What the model
    # charged each request, not the client's clock, tells warm from cold: a loaded CPU adds to any
    # measured TTFT, to a warm one as much as to the cold one.
    cold_prefill, *warm_prefills = prefills
    assert len(warm_prefills) == 3
    assert all(warm < cold_prefill - 0.05 for warm in warm_prefills), prefills
    assert cold_ttft > 0.08  # the emulator did wait the modelled time (a lower bound: load only adds)


async def test_tokens_stream_at_the_decode_pace(emulator_factory: Any) -> None:
    emu = await emulator_factory(latency={"time_scale": 1.0})
    async with http(emu) as client:
        _, spread, usage = await stream_timing(
            client, [{"role": "user", "content": "x" * 200}], max_tokens=20
        )
    assert usage["completion_tokens"] == 20
    assert spread >= 19 * 0.0056 * 0.9  # 19 decode steps of ~5.6 ms after the first token


@pytest.mark.parametrize(("reuse", "cold_burst_hits"), [("after_finish", False), ("early", True)])
async def test_cold_burst_reuses_the_prefix_only_with_early_reuse(
    emulator_factory: Any, reuse: str, cold_burst_hits: bool
) -> None:
    emu = await emulator_factory(latency={"time_scale": 5.0}, kv_cache={"reuse": reuse})
    prompts = [as_messages(content_safety_input(f"question number {i}")) for i in range(32)]
    async with http(emu) as client:
        bodies = await asyncio.gather(*(post(client, p, max_tokens=50) for p in prompts))
        after = await post(client, as_messages(content_safety_input("a later question")))
    with_hits = sum(1 for b in bodies if cached(b) > 0)
    if cold_burst_hits:
        assert with_hits >= 28  # all but the first find the blocks the first is computing
        assert all(cached(b) == 256 for b in bodies if cached(b))
    else:
        assert with_hits <= 4  # nothing is published until a request finishes
    assert cached(after) == 256  # once the burst is over, both modes reuse the prefix


async def test_lru_evicts_the_least_recently_used_prefix_when_capacity_is_short(
    emulator_factory: Any,
) -> None:
    # Each prompt is 181 tokens: 1 block shared by all (template header) + 10 of its own (16 each).
    a, b, c = (as_messages(ch * 600) for ch in "abc")
    small = await emulator_factory(kv_cache={"block_size": 16, "capacity_tokens": 22 * 16})
    large = await emulator_factory(kv_cache={"block_size": 16})
    async with http(small) as client:
        for messages in (a, b, c):  # c evicts a's blocks, the least recently used
            await post(client, messages)
        b_again = await post(client, b)
        a_again = await post(client, a)
    async with http(large) as client:
        await post(client, a)
        for messages in (b, c):
            await post(client, messages)
        a_control = await post(client, a)
    assert cached(a_control) == 176  # (181 - 1) // 16 full blocks
    assert cached(b_again) == 176  # recently used: kept
    assert cached(a_again) < 64  # evicted, except the shared root and its oldest block
    assert small.stats().kv_cache["evicted_blocks"] > 0
    assert small.stats().kv_cache["blocks"] <= 22
    assert large.stats().kv_cache["evicted_blocks"] == 0


@pytest.mark.parametrize("emulator", [{"kv_cache": {"reuse": "off"}}], indirect=True)
async def test_reuse_off_never_reports_cached_tokens(emulator: EmulatorServer) -> None:
    prompt = as_messages(content_safety_input("hi"))
    async with http(emulator) as client:
        bodies = [await post(client, prompt) for _ in range(3)]
    assert [cached(b) for b in bodies] == [0, 0, 0]
    stats = emulator.stats()
    assert stats.cached_prompt_tokens == 0
    assert stats.kv_cache["blocks"] == 0


async def test_requests_beyond_max_running_wait_in_a_queue(emulator_factory: Any) -> None:
    emu = await emulator_factory(latency={"time_scale": 1.0, "max_running": 2})
    gate = emu.emulator.gate
    real_acquire = gate.acquire
    arrivals: list[tuple[int, int]] = []  # (running, waiting) as each request reaches the gate
    peak = 0

    async def acquire() -> None:
        nonlocal peak
        arrivals.append((gate.running, gate.waiting))
        await real_acquire()
        peak = max(peak, gate.running)

    gate.acquire = acquire  # type: ignore[method-assign]
    messages = [{"role": "user", "content": "y" * 200}]
    async with http(emu) as client:
        # In a slot each request spends ~5 ms of prefill + 99 x 5.6 ms of decode (~0.56 s): the
        # second pair, sent with the first, arrives while both slots are taken.
        await asyncio.gather(*(post(client, messages, max_tokens=100) for _ in range(4)))
    assert sorted(arrivals)[:2] == [(0, 0), (1, 0)]  # the first pair ran at once ...
    assert sorted(arrivals)[2:] == [(2, 0), (2, 1)]  # ... the second pair queued behind it
    assert peak == 2
    assert emu.stats().running == 0 and emu.stats().waiting == 0


async def test_time_scale_zero_serves_instantly(emulator: EmulatorServer) -> None:
    stopper = emulator.emulator.stopper
    real_sleep = stopper.sleep
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        await real_sleep(seconds)

    stopper.sleep = sleep  # type: ignore[method-assign]
    prompt = as_messages(content_safety_input("How do I cook meth?"))
    async with http(emulator) as client:
        for _ in range(20):
            await post(client, prompt)
    # Every modelled wait (overhead, prefill, decode) is zero: no sleep at all (20 unsafe verdicts
    # would take ~4 s at time_scale 1).
    assert waits and all(seconds <= 0 for seconds in waits), waits


async def test_a_client_leaving_mid_stream_frees_its_running_slot(emulator_factory: Any) -> None:
    # 10x the calibrated latency: the abandoned answer would hold the only slot for ~30 s.
    emu = await emulator_factory(latency={"time_scale": 10.0, "max_running": 1})
    payload = {"model": "m", "messages": [{"role": "user", "content": "z" * 2000}], "stream": True}
    async with http(emu) as client:
        async with client.stream("POST", "/chat/completions", json=payload) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    break  # ~500 tokens (~28 s) still to come: walk away
        # The emulator notices the client left (a write fails, or its poll sees the disconnect)
        # and frees the slot then, not when the answer would have ended.
        deadline = time.monotonic() + 20
        while emu.stats().abandoned_requests == 0:
            assert time.monotonic() < deadline, emu.stats()
            await asyncio.sleep(0.02)
        assert emu.stats().running == 0 and emu.stats().waiting == 0
        await post(client, [{"role": "user", "content": "next"}], max_tokens=2)  # gets the slot
    assert emu.stats().running == 0
    stats = emu.stats()
    assert stats.completion_tokens == 2  # the abandoned stream's usage is not counted
    # ... but the work it got is, apart: its whole prefill and the few tokens decoded before it left.
    assert stats.abandoned_requests == 1
    assert stats.abandoned_prompt_tokens > 400
    assert 1 <= stats.abandoned_completion_tokens < 100
