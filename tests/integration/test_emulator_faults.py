"""Injected faults as a client sees them over real HTTP (httpx and the openai client)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import openai
import pytest

from guardcache.emulator import EmulatorAdminError, EmulatorServer
from guardcache.emulator.samples import as_messages, content_safety_input

pytestmark = pytest.mark.integration

PROMPT = as_messages(content_safety_input("How do I bake bread?"))
PAYLOAD = {"model": "m", "messages": PROMPT, "max_tokens": 50}


def http(emu: EmulatorServer, **kw: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=emu.base_url, trust_env=False, **kw)


def oai(emu: EmulatorServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=emu.base_url, api_key="k", max_retries=0, timeout=5)


async def wait_for(predicate: Any, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("emulator", [{"faults": {"error_rate": 1.0}}], indirect=True)
async def test_error_fault_returns_500_in_openai_error_shape(emulator: EmulatorServer) -> None:
    async with http(emulator) as client:
        r = await client.post("/chat/completions", json=PAYLOAD)
    assert r.status_code == 500
    assert r.json()["error"]["type"] == "server_error"
    async with oai(emulator) as client:
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(**PAYLOAD)
    stats = emulator.stats()
    assert stats.status(500) == 2 and stats.faults == {"error": 2}
    assert stats.calls_for(PROMPT) == 2  # a failed call still reached the backend


@pytest.mark.parametrize(
    "emulator", [{"faults": {"rate_limit_rate": 1.0, "retry_after_seconds": 7}}], indirect=True
)
async def test_rate_limit_fault_returns_429_with_retry_after(emulator: EmulatorServer) -> None:
    async with http(emulator) as client:
        r = await client.post("/chat/completions", json=PAYLOAD)
    assert r.status_code == 429
    assert r.headers["retry-after"] == "7"
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    async with oai(emulator) as client:
        with pytest.raises(openai.RateLimitError):
            await client.chat.completions.create(**PAYLOAD)


@pytest.mark.parametrize("emulator", [{"faults": {"hang_rate": 1.0, "hang_seconds": 60}}], indirect=True)
async def test_hang_outlasts_a_client_timeout_and_is_cancelled_on_disconnect(
    emulator: EmulatorServer,
) -> None:
    started = time.monotonic()
    async with http(emulator, timeout=0.3) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post("/chat/completions", json=PAYLOAD)
    assert time.monotonic() - started < 30  # the client's timeout, not the minute-long hang
    # The server notices the client leaving and abandons the hanging request.
    await wait_for(lambda: emulator.stats().status("disconnected") == 1)
    assert emulator.stats().running == 0
    async with oai(emulator) as client:
        with pytest.raises(openai.APITimeoutError):
            await client.chat.completions.create(**PAYLOAD, timeout=0.2)


async def test_stopping_the_server_does_not_wait_for_a_hanging_request(emulator_factory: Any) -> None:
    emu = await emulator_factory(faults={"hang_rate": 1.0, "hang_seconds": 600})
    async with http(emu, timeout=30) as client:
        pending = asyncio.create_task(client.post("/chat/completions", json=PAYLOAD))
        await wait_for(lambda: emu.stats().faults.get("hang") == 1)
        await asyncio.wait_for(emu.stop(), 30)  # not the 10-minute hang
        with pytest.raises(httpx.TransportError):
            await pending


@pytest.mark.parametrize("emulator", [{"faults": {"malformed_rate": 1.0}}], indirect=True)
async def test_malformed_fault_returns_content_that_is_not_the_verdict_json(
    emulator: EmulatorServer,
) -> None:
    async with oai(emulator) as client:
        for _ in range(6):
            result = await client.chat.completions.create(**PAYLOAD)
            content = result.choices[0].message.content
            assert result.choices[0].finish_reason == "stop"
            with pytest.raises(ValueError):
                json.loads(content)
    assert emulator.stats().faults == {"malformed": 6}


@pytest.mark.parametrize("emulator", [{"faults": {"invalid_body_rate": 1.0}}], indirect=True)
async def test_invalid_body_fault_returns_200_with_unparseable_json(emulator: EmulatorServer) -> None:
    async with http(emulator) as client:
        r = await client.post("/chat/completions", json=PAYLOAD)
        stream = await client.post("/chat/completions", json={**PAYLOAD, "stream": True})
    assert r.status_code == 200
    assert r.text.startswith('{"id": "chatcmpl-')
    with pytest.raises(ValueError):
        r.json()
    assert "[DONE]" not in stream.text
    last = [b for b in stream.text.split("\n\n") if b.strip()][-1]
    with pytest.raises(ValueError):
        json.loads(last.removeprefix("data: "))


@pytest.mark.parametrize("emulator", [{"faults": {"drop_rate": 1.0}}], indirect=True)
async def test_drop_fault_closes_the_connection_without_a_response(emulator: EmulatorServer) -> None:
    async with http(emulator) as client:
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            await client.post("/chat/completions", json=PAYLOAD)
    async with oai(emulator) as client:
        with pytest.raises(openai.APIConnectionError):
            await client.chat.completions.create(**PAYLOAD)
    stats = emulator.stats()
    assert stats.status("dropped") == 2
    assert stats.status(500) == 0  # the server did not answer 500 in our place


async def test_down_switch_answers_503_until_up_again(emulator: EmulatorServer) -> None:
    async with http(emulator) as client:
        await emulator.aset_down(True)
        assert (await emulator.astats()).down is True
        down = await client.post("/chat/completions", json=PAYLOAD)
        health = await client.get("/health/ready")
        await emulator.aset_down(False)
        up = await client.post("/chat/completions", json=PAYLOAD)
    assert down.status_code == 503
    assert down.json()["error"]["code"] == "service_unavailable"
    assert health.status_code == 503
    assert up.status_code == 200
    assert emulator.stats().status(503) == 1


async def test_faults_are_set_at_runtime_over_http_and_reproducible_by_seed(
    emulator_factory: Any,
) -> None:
    async def statuses(emu: EmulatorServer) -> list[int]:
        await emu.aset_faults(error_rate=0.4, rate_limit_rate=0.2, seed=42)
        async with http(emu) as client:
            return [(await client.post("/chat/completions", json=PAYLOAD)).status_code for _ in range(30)]

    first = await statuses(await emulator_factory())
    second = await statuses(await emulator_factory())
    assert first == second
    assert {200, 429, 500} == set(first)


async def test_invalid_fault_settings_are_refused_with_the_field_name(emulator: EmulatorServer) -> None:
    with pytest.raises(EmulatorAdminError, match="error_rate"):
        await emulator.aset_faults(error_rate=1.5)
    with pytest.raises(EmulatorAdminError, match="bogus"):
        await emulator.aset_faults(bogus=1)
    assert emulator.stats().fault_config["error_rate"] == 0.0


@pytest.mark.parametrize("path", ["/chat/completions", "/classify"])
async def test_a_client_leaving_while_its_body_is_read_is_a_disconnect_not_an_error(
    emulator: EmulatorServer, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A cancelled request (a parallel rail blocked first, a speculative main call dropped) may close
    its connection before the whole body was sent: counted as ``disconnected``, no ASGI traceback."""
    url = httpx.URL(emulator.base_url)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    head = (
        f"POST {url.path.rstrip('/')}{path} HTTP/1.1\r\nHost: {url.host}\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    )
    writer.write(head.encode() + b'{"model": "m", "messages": [')
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.close()
    await writer.wait_closed()
    await wait_for(lambda: emulator.stats().status("disconnected") == 1)
    assert emulator.stats().requests_total == 1
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    del reader
