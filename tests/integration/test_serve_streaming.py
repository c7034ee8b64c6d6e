"""Streaming through ``guardcache serve``: output rails on windows of the stream (``rails.output.streaming``),
nothing sent before the input verdict (also with ``during_main``), and a graceful shutdown while 50
streams are open."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from guardcache.emulator import ThreadedEmulator
from guardcache.rails import REFUSAL
from tests.integration import test_serve as support
from tests.integration.test_serve import (
    INPUT_FLOW,
    MAIN_MODEL,
    OUTPUT_FLOW,
    ServeProcess,
    emulator,
    sample,
    write_config,
)
from tests.integration.test_speculation import until

serve = support.serve  # the fixture

pytestmark = pytest.mark.integration

SAFE = "Bread needs flour water salt and yeast and then a long slow rise in a warm kitchen before baking"
UNSAFE = SAFE + " and then you kill the neighbour with the bread knife and bury him in the garden tonight"


def windows(chunk: int = 4, context: int = 2, first: bool = False) -> str:
    return (
        f", streaming: {{enabled: true, chunk_size: {chunk}, context_size: {context}, "
        f"stream_first: {str(first).lower()}}}"
    )


@contextlib.contextmanager
def slow_windowed_server(
    serve: Any, tmp_path: Path, *, max_tokens: int, time_scale: float = 6.0
) -> Iterator[tuple[ServeProcess, ThreadedEmulator]]:
    """A server whose main model streams at ``time_scale`` x its calibrated latency (6: ~34 ms a
    token), the answer checked in windows of two tokens; yields it and the main model's emulator."""
    with emulator(model=MAIN_MODEL, time_scale=time_scale) as main, emulator() as guard:
        config = write_config(
            tmp_path / "w",
            main.base_url,
            guard.base_url,
            streaming=windows(chunk=2, context=1),
            main_params=f"max_tokens: {max_tokens}",
        )
        yield serve(config), main


async def stream_text(server: ServeProcess, text: str, **kw: Any) -> tuple[list[str], Any]:
    """The streamed pieces and the last choice chunk."""
    async with server.async_client() as client:
        stream = await client.chat.completions.create(
            model="x", messages=[{"role": "user", "content": text}], stream=True, **kw
        )
        chunks = [c async for c in stream]
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    final = next(c for c in reversed(chunks) if c.choices)
    return pieces, final


async def test_output_windows_pass_a_safe_answer_and_are_cached_like_any_check(
    serve: Any, tmp_path: Path
) -> None:
    with emulator(model=MAIN_MODEL) as main, emulator() as guard:
        config = write_config(
            tmp_path / "w",
            main.base_url,
            guard.base_url,
            inputs=False,
            streaming=windows(),
            main_params="max_tokens: 200",
        )
        server = serve(config)
        pieces, final = await stream_text(server, SAFE)
        assert "".join(pieces) == f"You said: {SAFE}"
        assert len(pieces) > 1  # sent window by window, not all at the end
        assert (
            final.choices[0].finish_reason == "stop" and final.model_extra["guardcache"]["blocked"] is False
        )
        checks = sample(server.metrics(), "guardcache_checks_total", direction="output", cached="false")
        assert checks >= len(pieces)  # one check per window
        calls = guard.stats().requests_by_endpoint["chat.completions"]
        again, _ = await stream_text(server, SAFE)
        assert "".join(again) == "".join(pieces)  # pieces ready together go out as one event
        assert guard.stats().requests_by_endpoint["chat.completions"] == calls  # every window was a hit
        metrics = server.metrics()
        assert sample(metrics, "guardcache_checks_total", direction="output", cached="true") == checks


@pytest.mark.parametrize("stream_first", [False, True])
async def test_a_block_mid_stream_ends_the_stream_with_the_refusal(
    serve: Any, tmp_path: Path, stream_first: bool
) -> None:
    with emulator(model=MAIN_MODEL) as main, emulator() as guard:
        config = write_config(
            tmp_path / "w",
            main.base_url,
            guard.base_url,
            inputs=False,
            streaming=windows(first=stream_first),
            main_params="max_tokens: 200",
        )
        server = serve(config)
        pieces, final = await stream_text(server, UNSAFE)
        assert pieces[-1] == REFUSAL
        sent = "".join(pieces[:-1])
        assert sent and f"You said: {UNSAFE}".startswith(sent)  # a prefix of the answer, then the refusal
        assert "tonight" not in sent  # the stream ended at the block
        # stream_first: false never sends the window that blocked; true sent it before its check.
        assert ("kill" in sent) is stream_first
        assert final.choices[0].finish_reason == "content_filter"
        assert final.model_extra["guardcache"] == {
            "blocked": True,
            "direction": "output",
            "rail": OUTPUT_FLOW,
            "reason": "verdict",
            "config_id": "w",
        }
        metrics = server.metrics()
        assert sample(metrics, "guardcache_checks_total", direction="output", verdict="blocked") == 1
        assert sample(metrics, "guardcache_turn_seconds_count", mode="stream", outcome="blocked_output") == 1


async def test_without_windows_a_streamed_answer_is_checked_whole_before_any_byte(
    serve: Any, tmp_path: Path
) -> None:
    with emulator(model=MAIN_MODEL) as main, emulator() as guard:
        config = write_config(tmp_path / "w", main.base_url, guard.base_url, inputs=False)
        server = serve(config)
        async with server.async_client() as client:
            raw = await client.chat.completions.with_raw_response.create(
                model="x", messages=[{"role": "user", "content": UNSAFE}], stream=True
            )
            assert raw.headers["x-guardcache-blocked"] == "output"  # known before the first byte
            chunks = [c async for c in raw.parse()]
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == REFUSAL


async def test_nothing_is_streamed_before_the_input_verdict_with_during_main(
    serve: Any, tmp_path: Path
) -> None:
    # A slow input check, a fast main model started alongside it: the main model is done long
    # before the verdict, and still nothing reaches the client before it.
    with emulator(model=MAIN_MODEL) as main, emulator(time_scale=6.0) as guard:
        config = write_config(
            tmp_path / "w",
            main.base_url,
            guard.base_url,
            outputs=False,
            input_extra=", during_main: true",
            cache="{enabled: false}",
        )
        # The main model's calls are counted: no readiness probe among them.
        server = serve(config, "--no-warm-up", "--ready-main", "off")
        started = time.monotonic()
        with httpx.stream(
            "POST",
            f"{server.url}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "Please kill the lights"}], "stream": True},
            timeout=30,
        ) as response:
            assert response.headers["x-guardcache-blocked"] == "input"
            first_byte = None
            body = b""
            for part in response.iter_bytes():
                first_byte = first_byte or time.monotonic() - started
                body += part
        assert b"You said" not in body and REFUSAL.encode() in body.replace(b"\\u2019", b"'")
        assert first_byte is not None
        # The main model was started early (a miss), then abandoned: the emulator saw it.
        stats = main.stats()
        assert stats.requests_by_endpoint.get("chat.completions", 0) == 1
        assert sample(server.metrics(), "guardcache_checks_total", rail=INPUT_FLOW, verdict="blocked") == 1
        # An allowed turn: the buffered answer is released after the verdict, whole.
        async with server.async_client() as client:
            stream = await client.chat.completions.create(
                model="x", messages=[{"role": "user", "content": "Please dim the lights"}], stream=True
            )
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert text == "You said: Please dim the lights"


async def test_shutdown_while_50_streams_are_open_lets_every_stream_finish(
    serve: Any, tmp_path: Path
) -> None:
    # Each answer streams for about a second and a half; SIGTERM arrives once all 50 have started.
    with slow_windowed_server(serve, tmp_path, max_tokens=48) as (server, _):
        started = asyncio.Event()
        first_chunks = 0

        async def one(i: int) -> tuple[str, str | None]:
            nonlocal first_chunks
            text = f"Stream number {i} tells a long and gentle story about a quiet harbour at dawn"
            async with server.async_client(timeout=60) as client:
                stream = await client.chat.completions.create(
                    model="x", messages=[{"role": "user", "content": text}], stream=True
                )
                pieces: list[str] = []
                reason = None
                async for chunk in stream:
                    if chunk.choices:
                        pieces.append(chunk.choices[0].delta.content or "")
                        reason = chunk.choices[0].finish_reason or reason
                        if len(pieces) == 1:
                            first_chunks += 1
                            if first_chunks == 50:
                                started.set()
                return "".join(pieces), reason

        tasks = [asyncio.create_task(one(i)) for i in range(50)]
        await asyncio.wait_for(started.wait(), 30)
        server.terminate()
        results = await asyncio.wait_for(asyncio.gather(*tasks), 60)
        for i, (text, reason) in enumerate(results):
            assert reason in ("stop", "length"), (i, text, reason)
            assert text.startswith(f"You said: Stream number {i} tells")
        code = await asyncio.to_thread(server.wait, 30)
        assert code in (0, -15)  # uvicorn re-raises the SIGTERM it handled, after the drain
        log = server.log()
        assert "Application shutdown complete" in log and "Traceback" not in log
        async with httpx.AsyncClient() as probe:
            with pytest.raises(httpx.ConnectError):
                await probe.get(f"{server.url}/health/live")


async def test_stream_async_in_python_with_a_langchain_main_model_and_closing_early(tmp_path: Path) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    from guardcache import LLMRails, RailsConfig

    words = " ".join(f"word{i}" for i in range(40))
    with emulator() as guard:
        folder = write_config(
            tmp_path / "w", "http://127.0.0.1:9/v1", guard.base_url, streaming=windows(chunk=5)
        )
        llm = GenericFakeChatModel(messages=iter([AIMessage(content=words), AIMessage(content=words)]))
        rails = LLMRails(RailsConfig.from_path(folder), llm=llm)
        stream = rails.stream_async(messages=[{"role": "user", "content": "count for me"}])
        pieces = [piece async for piece in stream]
        assert "".join(pieces) == words and len(pieces) > 5  # fake tokens: words and spaces
        assert stream.allowed and stream.blocked is None
        assert rails.explain() is stream.turn
        assert len(stream.turn.checks.output) == len(pieces) and stream.turn.checks.input
        # Closing a stream early cancels the turn (and the main call); the iteration ends.
        stream = rails.stream_async(messages=[{"role": "user", "content": "count again"}])
        async with stream:
            first = await stream.__anext__()
        assert first
        assert [piece async for piece in stream] == []
        assert rails.explain() is stream.turn
        await rails.aclose()


async def test_a_client_that_leaves_mid_stream_cancels_the_turn_and_its_main_call(
    serve: Any, tmp_path: Path
) -> None:
    # A long answer (~170 ms a token: 200 tokens take ~34 s) streamed window by window; the client
    # reads the first piece and hangs up.
    with slow_windowed_server(serve, tmp_path, max_tokens=200, time_scale=30.0) as (server, main):
        body = {"messages": [{"role": "user", "content": SAFE}], "stream": True}
        url = f"{server.url}/v1/chat/completions"
        async with httpx.AsyncClient(timeout=30) as client, client.stream("POST", url, json=body) as response:
            assert response.status_code == 200
            first = await anext(response.aiter_bytes())
            assert first.startswith(b"data: ")
        # leaving the block closed the connection before the answer ended
        await until(lambda: main.stats().abandoned_requests == 1, within=30)
        stats = main.stats()  # the main call was cancelled long before its 200 tokens
        assert stats.abandoned_requests == 1 and stats.abandoned_completion_tokens < 100
        # the server lets go of the request once its cancelled turn has unwound (later, on a loaded
        # machine, than the main model seeing the disconnect)
        await until(lambda: sample(server.metrics(), "guardcache_requests_in_flight") == 0, within=30)
        metrics = server.metrics()
        assert sample(metrics, "guardcache_turn_seconds_count", mode="stream", outcome="client_left") == 1
        # the server goes on serving
        pieces, final = await stream_text(server, "Tell me about bread")
        assert "".join(pieces).startswith("You said: Tell me about bread") and final.choices[0].finish_reason
        assert "Traceback" not in server.log()


@pytest.mark.parametrize(
    ("outputs", "streaming", "streamed"),
    [(True, "", False), (True, windows(chunk=5), True), (False, "", True)],
    ids=["checked-whole", "windows", "no-output-rails"],
)
async def test_stream_main_none_streams_the_main_model_only_when_pieces_can_go_out_early(
    tmp_path: Path, outputs: bool, streaming: str, streamed: bool
) -> None:
    from langchain_core.messages import AIMessageChunk
    from langchain_core.outputs import ChatGenerationChunk

    from guardcache import LLMRails, RailsConfig
    from guardcache.testing import EchoChatModel

    calls: dict[str, int] = {}

    class Counting(EchoChatModel):
        async def _agenerate(self, messages: Any, *args: Any, **kw: Any) -> Any:
            calls["generate"] = calls.get("generate", 0) + 1
            return await super()._agenerate(messages, *args, **kw)

        async def _astream(self, messages: Any, *args: Any, **kw: Any) -> Any:
            calls["stream"] = calls.get("stream", 0) + 1
            for word in self.reply_to(str(messages[-1].content)).split(" "):
                yield ChatGenerationChunk(message=AIMessageChunk(content=word + " "))

    with emulator() as guard:
        folder = write_config(
            tmp_path / "w", "http://127.0.0.1:9/v1", guard.base_url, outputs=outputs, streaming=streaming
        )
        rails = LLMRails(RailsConfig.from_path(folder), llm=Counting(prefix="You said: "))
        asked = [{"role": "user", "content": "bake some bread"}]
        stream = rails.stream_async(messages=asked, stream_main=None)
        text = "".join([piece async for piece in stream])
        assert text.startswith("You said: bake some bread") and stream.allowed
        assert calls == ({"stream": 1} if streamed else {"generate": 1})
        await rails.aclose()
