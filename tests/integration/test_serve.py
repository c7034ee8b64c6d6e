"""``guardcache serve`` as a subprocess in front of emulated NIMs, over real HTTP, driven with the
official ``openai`` client (sync, async, streaming): answers, blocks, parameters, metrics, every bad
request, readiness, client keys, request ids, the concurrency limit, folders of configs, workers.

``ServeProcess`` and the config writers here are shared by the other ``test_serve_*`` modules.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from guardcache.emulator import EmulatorConfig, EmulatorServer, LatencyConfig, ThreadedEmulator
from guardcache.rails import REFUSAL

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MAIN_MODEL = "meta/llama-3.1-8b-instruct"
GUARD_MODEL = "nvidia/llama-3.1-nemoguard-8b-content-safety"
INPUT_FLOW = "content safety check input $model=content_safety"
OUTPUT_FLOW = "content safety check output $model=content_safety"
_RUNNING = re.compile(r"Uvicorn running on http://[\d.]+:(\d+)")
LOOPBACK = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))
"""For the helpers' many small requests (readiness polls, /metrics): ``httpx.get`` would build a new
client, and load a CA bundle (~15 ms of CPU), for each; this one does it once. No keep-alive: a new
connection per request, as ``httpx.get`` makes."""


class ServeProcess:
    """``python -m guardcache serve`` on a free port, importing this checkout; stderr is pumped
    into ``lines`` (so the child never blocks on a full pipe) and kept for assertions."""

    def __init__(self, config: Path | str, *args: str, env: dict[str, str] | None = None) -> None:
        self.cmd = [
            sys.executable,
            "-m",
            "guardcache",
            "serve",
            "--config",
            str(config),
            "--port",
            "0",
            *args,
        ]
        self.env = {**os.environ, **(env or {}), "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0, *, ready: bool = True) -> ServeProcess:
        self.proc = subprocess.Popen(
            self.cmd,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
            env=self.env,
        )
        threading.Thread(target=self._pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not self.port:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"serve did not start:\n{self.log()}") from None
            if line is None:
                raise AssertionError(f"serve exited ({self.proc.wait()}):\n{self.log()}")
            found = _RUNNING.search(line)
            if found:
                self.port = int(found.group(1))
        if ready:
            self.wait_ready(deadline - time.monotonic())
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if LOOPBACK.get(f"{self.url}/health/ready", timeout=2).status_code == 200:
                    return
            time.sleep(0.05)
        raise AssertionError(f"serve never became ready:\n{self.log()}")

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            self._queue.put(line)
        self._queue.put(None)

    def log(self) -> str:
        return "".join(self.lines)

    def wait_log(self, text: str, within: float = 30.0) -> str:
        """The log once it holds ``text``: a line the server wrote before answering may still be
        on its way through the stderr pipe when the answer arrives."""
        deadline = time.monotonic() + within
        while text not in (log := self.log()) and time.monotonic() < deadline:
            time.sleep(0.02)
        return log

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def client(self, **kw: Any) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{self.url}/v1", api_key=kw.pop("api_key", "unused"), max_retries=0, **kw
        )

    def async_client(self, **kw: Any) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=f"{self.url}/v1", api_key=kw.pop("api_key", "unused"), max_retries=0, **kw
        )

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of ``/metrics``: (name, sorted labels) -> value."""
        text = LOOPBACK.get(f"{self.url}/metrics", timeout=5).text
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }


def sample(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 if none)."""
    return sum(
        value
        for (n, have), value in metrics.items()
        if n == name and all((k, v) in have for k, v in labels.items())
    )


def write_config(
    folder: Path,
    main_url: str,
    guard_url: str,
    *,
    inputs: bool = True,
    outputs: bool = True,
    streaming: str = "",
    input_extra: str = "",
    main_params: str = "max_tokens: 64",
    cache: str = "{enabled: true, stats: {enabled: true}}",
    main_model: str = MAIN_MODEL,
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    in_flows = f"[{INPUT_FLOW}]" if inputs else "[]"
    out_flows = f"[{OUTPUT_FLOW}]" if outputs else "[]"
    (folder / "config.yml").write_text(
        f"""
models:
  - type: main
    engine: nim
    model: {main_model}
    parameters: {{base_url: "{main_url}", {main_params}}}
  - type: content_safety
    engine: nim
    model: {GUARD_MODEL}
    parameters: {{base_url: "{guard_url}"}}
    cache: {cache}
rails:
  input: {{flows: {in_flows}{input_extra}}}
  output: {{flows: {out_flows}{streaming}}}
"""
    )
    return folder


def emulator(*, model: str = GUARD_MODEL, time_scale: float = 0.0, **changes: Any) -> ThreadedEmulator:
    config = EmulatorConfig(port=0, model=model, latency=LatencyConfig(time_scale=time_scale))
    return EmulatorServer(config.merged(**changes) if changes else config).in_thread()


@pytest.fixture(scope="module")
def nims() -> Iterator[tuple[ThreadedEmulator, ThreadedEmulator]]:
    """A main model and a content-safety guard, emulated at full speed, for the whole module."""
    with emulator(model=MAIN_MODEL) as main, emulator() as guard:
        yield main, guard


@pytest.fixture(scope="module")
def served(
    nims: tuple[ThreadedEmulator, ThreadedEmulator], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    """One server for the read-mostly tests of this module (input and output rails, cached)."""
    main, guard = nims
    folder = write_config(tmp_path_factory.mktemp("serve") / "shop", main.base_url, guard.base_url)
    server = ServeProcess(folder).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def agent_served(
    nims: tuple[ThreadedEmulator, ThreadedEmulator], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    """One server per module for the agent turns' tests (tool calls, the Responses API, the OpenAI
    Agents SDK): input and output rails, cached, config ``agents``, the main model's answers up to 200
    tokens. A module takes it as its ``served``: ``served = test_serve.agent_served``."""
    main, guard = nims
    folder = write_config(
        tmp_path_factory.mktemp("serve") / "agents",
        main.base_url,
        guard.base_url,
        main_params="max_tokens: 200",
    )
    server = ServeProcess(folder).start()
    yield server
    server.stop()


@pytest.fixture
def serve() -> Iterator[Any]:
    """``serve(config, *args)`` -> a started server, stopped at teardown."""
    started: list[ServeProcess] = []

    def start(
        config: Path, *args: str, ready: bool = True, env: dict[str, str] | None = None
    ) -> ServeProcess:
        server = ServeProcess(config, *args, env=env)
        started.append(server)
        return server.start(ready=ready)

    yield start
    for server in started:
        server.stop()


# -- answers ---------------------------------------------------------------------------------------


def test_a_plain_turn_is_answered_and_the_second_is_served_from_the_caches(served: ServeProcess) -> None:
    client = served.client()
    before = served.metrics()
    first = client.chat.completions.with_raw_response.create(
        model="anything", messages=[{"role": "user", "content": "Tell me about sourdough starters"}]
    )
    reply = first.parse()
    assert reply.choices[0].message.content == "You said: Tell me about sourdough starters"
    assert reply.choices[0].finish_reason == "stop" and reply.model == MAIN_MODEL
    assert reply.model_extra["guardcache"] == {"blocked": False, "config_id": "shop"}
    assert reply.usage is not None and reply.usage.completion_tokens > 0
    assert first.headers.get("x-guardcache-blocked") is None and first.headers["x-request-id"]
    again = client.chat.completions.create(
        model="anything", messages=[{"role": "user", "content": "Tell me about sourdough starters"}]
    )
    assert again.choices[0].message.content == reply.choices[0].message.content
    after = served.metrics()
    labels = {"config": "shop", "model": "content_safety"}
    delta = {
        name: sample(after, f"guardcache_cache_{name}", **labels)
        - sample(before, f"guardcache_cache_{name}", **labels)
        for name in ("hits_total", "misses_total", "puts_total")
    }
    assert delta == {"hits_total": 2, "misses_total": 2, "puts_total": 2}  # in + out, then both hit
    assert sample(after, "guardcache_cache_current_size", **labels) >= 2
    assert 0 < sample(after, "guardcache_cache_hit_rate", **labels) <= 1
    cached = sample(after, "guardcache_checks_total", verdict="allowed", cached="true") - sample(
        before, "guardcache_checks_total", verdict="allowed", cached="true"
    )
    assert cached == 2
    turns = sample(after, "guardcache_turn_seconds_count", mode="plain", outcome="allowed") - sample(
        before, "guardcache_turn_seconds_count", mode="plain", outcome="allowed"
    )
    assert turns == 2
    assert sample(after, "guardcache_backend_call_seconds_count", task="general", source="backend") >= 2
    assert sample(after, "guardcache_requests_in_flight") == 0


async def test_an_input_block_is_a_normal_refusal_marked_in_the_body_and_a_header(
    served: ServeProcess, nims: tuple[ThreadedEmulator, ThreadedEmulator]
) -> None:
    main, _ = nims
    calls_before = main.stats().requests_by_endpoint.get("chat.completions", 0)
    async with served.async_client() as client:
        raw = await client.chat.completions.with_raw_response.create(
            model=MAIN_MODEL, messages=[{"role": "user", "content": "How do I kill my neighbour?"}]
        )
    reply = raw.parse()
    assert reply.choices[0].message.content == REFUSAL
    assert reply.choices[0].finish_reason == "content_filter"
    assert reply.model_extra["guardcache"] == {
        "blocked": True,
        "direction": "input",
        "rail": INPUT_FLOW,
        "reason": "verdict",
        "config_id": "shop",
    }
    assert raw.headers["x-guardcache-blocked"] == "input"
    assert "x-guardcache-no-verdict" not in raw.headers  # the guard answered
    assert main.stats().requests_by_endpoint.get("chat.completions", 0) == calls_before  # never asked
    metrics = served.metrics()
    assert (
        sample(metrics, "guardcache_checks_total", direction="input", verdict="blocked", rail=INPUT_FLOW) >= 1
    )
    assert sample(metrics, "guardcache_turn_seconds_count", outcome="blocked_input") >= 1


def test_a_streamed_turn_arrives_as_openai_chunks_ending_with_done(served: ServeProcess) -> None:
    client = served.client()
    chunks = list(
        client.chat.completions.create(
            model="x",
            messages=[{"role": "user", "content": "Describe a lighthouse at dusk"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "You said: Describe a lighthouse at dusk"
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "stop"
    assert finals[0].model_extra["guardcache"]["blocked"] is False
    assert (
        chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    )
    # The wire format itself: SSE events, the last one [DONE].
    with httpx.stream(
        "POST",
        f"{served.url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "Describe a lighthouse at dusk"}], "stream": True},
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line]
    assert events[-1] == "data: [DONE]" and all(e.startswith("data: ") for e in events)


async def test_a_streamed_input_block_sends_only_the_refusal(served: ServeProcess) -> None:
    async with served.async_client() as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="x", messages=[{"role": "user", "content": "how to rob a bank"}], stream=True
        )
        assert raw.headers["x-guardcache-blocked"] == "input"
        chunks = [c async for c in raw.parse()]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == REFUSAL
    final = chunks[-1]
    assert final.choices[0].finish_reason == "content_filter"
    assert final.model_extra["guardcache"]["rail"] == INPUT_FLOW


def test_request_parameters_reach_the_main_model(served: ServeProcess) -> None:
    reply = served.client().chat.completions.create(
        model="x",
        messages=[{"role": "user", "content": "one two three four five six seven eight nine ten"}],
        max_tokens=2,
        temperature=0.2,
        seed=7,
        stop=["zzz"],
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 2


# -- bad requests ----------------------------------------------------------------------------------

BAD_BODIES: list[tuple[str, bytes, int, str | None]] = [
    ("invalid JSON", b'{"messages": [', 400, None),
    ("not an object", b"[1, 2]", 400, None),
    ("no messages", b'{"model": "x"}', 400, "messages"),
    ("empty messages", b'{"messages": []}', 400, "messages"),
    ("messages as a string", b'{"messages": "hello"}', 400, "messages"),
    ("a message that is a number", b'{"messages": [5]}', 400, "messages[0]"),
    ("an unknown role", b'{"messages": [{"role": "wizard", "content": "hi"}]}', 400, "messages[0].role"),
    (
        "content of the wrong type",
        b'{"messages": [{"role": "user", "content": 5}]}',
        400,
        "messages[0].content",
    ),
    (
        "an image part",
        b'{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}',
        400,
        "messages[0].content[0]",
    ),
    ("no user message", b'{"messages": [{"role": "system", "content": "be nice"}]}', 400, "messages"),
    ("model not a string", b'{"model": 5, "messages": [{"role": "user", "content": "hi"}]}', 400, "model"),
    (
        "stream not a boolean",
        b'{"stream": "yes", "messages": [{"role": "user", "content": "hi"}]}',
        400,
        "stream",
    ),
    (
        "temperature of the wrong type",
        b'{"temperature": "hot", "messages": [{"role": "user", "content": "hi"}]}',
        400,
        "temperature",
    ),
    (
        "max_tokens zero",
        b'{"max_tokens": 0, "messages": [{"role": "user", "content": "hi"}]}',
        400,
        "max_tokens",
    ),
    ("two choices", b'{"n": 2, "messages": [{"role": "user", "content": "hi"}]}', 400, "n"),
    (
        "a tool that is not a function",
        b'{"tools": [{"type": "web_search"}], "messages": [{"role": "user", "content": "hi"}]}',
        400,
        "tools[0].type",
    ),
    (
        "legacy functions",
        b'{"functions": [{"name": "f"}], "messages": [{"role": "user", "content": "hi"}]}',
        400,
        "functions",
    ),
    (
        "unknown config_id",
        b'{"config_id": "nope", "messages": [{"role": "user", "content": "hi"}]}',
        404,
        "config_id",
    ),
    (
        "config_id not a string",
        b'{"config_id": 3, "messages": [{"role": "user", "content": "hi"}]}',
        400,
        "config_id",
    ),
]


@pytest.mark.parametrize(("what", "body", "status", "param"), BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_bad_requests_get_a_clear_4xx_in_the_openai_error_shape(
    served: ServeProcess, what: str, body: bytes, status: int, param: str | None
) -> None:
    response = httpx.post(
        f"{served.url}/v1/chat/completions", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["param"] == param
    assert "You said" not in response.text  # never an unguarded answer


def test_the_openai_client_raises_its_own_errors_for_bad_requests(served: ServeProcess) -> None:
    client = served.client()
    with pytest.raises(openai.BadRequestError, match="empty"):
        client.chat.completions.create(model="x", messages=[])
    with pytest.raises(openai.NotFoundError, match="config_id"):
        client.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "hi"}], extra_body={"config_id": "nope"}
        )


def test_an_oversized_body_is_413_with_or_without_a_content_length(
    serve: Any, tmp_path: Path, nims: Any
) -> None:
    main, guard = nims
    server = serve(write_config(tmp_path / "c", main.base_url, guard.base_url), "--max-body-bytes", "2000")
    big = json.dumps({"messages": [{"role": "user", "content": "a" * 5000}]}).encode()
    response = httpx.post(f"{server.url}/v1/chat/completions", content=big)
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"

    def chunked() -> Iterator[bytes]:  # no Content-Length: the limit holds while reading
        yield big[:1000]
        yield big[1000:]

    response = httpx.post(f"{server.url}/v1/chat/completions", content=chunked())
    assert response.status_code == 413
    small = httpx.post(
        f"{server.url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}
    )
    assert small.status_code == 200


def test_unknown_routes_and_methods_are_json_errors(served: ServeProcess) -> None:
    missing = httpx.get(f"{served.url}/v1/nothing-here")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    wrong = httpx.get(f"{served.url}/v1/chat/completions")
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"


# -- the other routes ------------------------------------------------------------------------------


def test_models_configs_and_health(served: ServeProcess) -> None:
    models = served.client().models.list()
    assert [m.id for m in models.data] == [MAIN_MODEL]
    assert httpx.get(f"{served.url}/v1/rails/configs").json() == [{"id": "shop"}]
    assert httpx.get(f"{served.url}/health/live").json() == {"status": "live"}
    ready = httpx.get(f"{served.url}/health/ready")
    assert ready.status_code == 200
    assert ready.json()["backends"] == {"shop/main": "ok", "shop/content_safety": "ok"}


def test_not_ready_while_a_guard_backend_is_unreachable(serve: Any, tmp_path: Path, nims: Any) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    main, _ = nims
    server = serve(write_config(tmp_path / "c", main.base_url, dead), ready=False)
    deadline = time.monotonic() + 30
    while True:
        response = httpx.get(f"{server.url}/health/ready")
        if response.json().get("status") != "starting" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert response.status_code == 503
    assert response.json()["backends"]["c/content_safety"].startswith("unreachable")
    assert httpx.get(f"{server.url}/health/live").status_code == 200
    # Fail closed: the input check cannot run, so the turn is refused, not answered.
    reply = server.client().chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == REFUSAL
    assert "could not get a verdict" in server.wait_log("could not get a verdict")


def test_client_api_keys(serve: Any, tmp_path: Path, nims: Any) -> None:
    main, guard = nims
    config = write_config(tmp_path / "c", main.base_url, guard.base_url)
    server = serve(config, "--api-key-env", "SERVE_TEST_KEY", env={"SERVE_TEST_KEY": "s3cret-key"})
    with pytest.raises(openai.AuthenticationError):
        server.client(api_key="wrong").chat.completions.create(
            model="x", messages=[{"role": "user", "content": "hi"}]
        )
    no_key = httpx.post(
        f"{server.url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}
    )
    assert no_key.status_code == 401 and no_key.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(f"{server.url}/v1/models").status_code == 401
    reply = server.client(api_key="s3cret-key").chat.completions.create(
        model="x", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].message.content == "You said: hi"
    assert httpx.get(f"{server.url}/health/ready").status_code == 200  # probes need no key
    assert sample(server.metrics(), "guardcache_requests_rejected_total", reason="auth") == 3


def test_request_ids_are_echoed_and_written_into_the_log(serve: Any, tmp_path: Path, nims: Any) -> None:
    _, guard = nims
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    # The main model is down on purpose: readiness must not probe it, or the server is never ready.
    server = serve(write_config(tmp_path / "c", dead, guard.base_url), "--ready-main", "off")
    response = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}]},
        headers={"X-Request-Id": "trace-42"},
    )
    assert response.status_code == 502 and response.headers["x-request-id"] == "trace-42"
    assert response.json()["error"]["code"] == "main_model_failed"
    assert "127.0.0.1" not in response.text  # backend addresses stay in the log
    server.wait_log("main model failed")  # the line may still be in the stderr pipe
    assert any("[trace-42]" in line and "main model failed" in line for line in server.lines)
    generated = httpx.get(f"{server.url}/health/live").headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)
    metrics = server.metrics()
    assert (
        sample(metrics, "guardcache_backend_errors_total", target="main", kind="BackendConnectionError") == 1
    )


def test_answers_plain_and_streamed_carry_the_request_id(serve: Any, tmp_path: Path, nims: Any) -> None:
    main, guard = nims
    server = serve(write_config(tmp_path / "c", main.base_url, guard.base_url))
    body = {"messages": [{"role": "user", "content": "hi"}]}
    plain = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers={"X-Request-Id": "ok-7"})
    assert plain.status_code == 200 and plain.headers["x-request-id"] == "ok-7"
    assert plain.json()["choices"][0]["message"]["content"] == "You said: hi"
    assert [v for k, v in plain.headers.multi_items() if k == "x-request-id"] == ["ok-7"]  # once
    with httpx.stream(
        "POST",
        f"{server.url}/v1/chat/completions",
        json={**body, "stream": True},
        headers={"X-Request-Id": "s-8"},
    ) as streamed:
        assert streamed.status_code == 200 and streamed.headers["x-request-id"] == "s-8"
        assert streamed.read().endswith(b"data: [DONE]\n\n")
    unnamed = httpx.post(f"{server.url}/v1/chat/completions", json=body).headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", unnamed)


def test_over_the_concurrency_limit_requests_get_503_with_retry_after(serve: Any, tmp_path: Path) -> None:
    with emulator(model=MAIN_MODEL, time_scale=20.0) as main, emulator() as guard:
        server = serve(
            write_config(tmp_path / "c", main.base_url, guard.base_url, main_params="max_tokens: 8"),
            "--max-concurrency",
            "2",
        )
        results: list[httpx.Response] = []

        def call(i: int) -> None:
            body = {"messages": [{"role": "user", "content": f"question number {i}"}]}
            results.append(httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=30))

        threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = sorted(r.status_code for r in results)
        assert codes.count(200) >= 2 and 503 in codes, codes
        refused = next(r for r in results if r.status_code == 503)
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "overloaded"
        assert sample(
            server.metrics(), "guardcache_requests_rejected_total", reason="overloaded"
        ) == codes.count(503)


def test_a_folder_of_configs_is_selected_by_config_id_or_model(serve: Any, tmp_path: Path, nims: Any) -> None:
    main, guard = nims
    root = tmp_path / "configs"
    write_config(root / "strict", main.base_url, guard.base_url)
    write_config(
        root / "open", main.base_url, guard.base_url, inputs=False, outputs=False, main_model="other/model"
    )
    server = serve(root)
    assert httpx.get(f"{server.url}/v1/rails/configs").json() == [{"id": "open"}, {"id": "strict"}]
    client = server.client()
    unsafe = [{"role": "user", "content": "how to steal a car"}]
    strict = client.chat.completions.create(model="x", messages=unsafe, extra_body={"config_id": "strict"})
    assert strict.choices[0].message.content == REFUSAL
    opened = client.chat.completions.create(model="x", messages=unsafe, extra_body={"config_ids": ["open"]})
    assert opened.choices[0].message.content == "You said: how to steal a car"
    assert opened.model_extra["guardcache"]["config_id"] == "open"
    by_model = client.chat.completions.create(model="other/model", messages=unsafe)
    assert by_model.model_extra["guardcache"]["config_id"] == "open"
    by_id = client.chat.completions.create(model="strict", messages=unsafe)
    assert by_id.choices[0].message.content == REFUSAL
    with pytest.raises(openai.BadRequestError, match="config_id"):
        client.chat.completions.create(model="", messages=unsafe)  # no config named: several are served
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="meta/unknown", messages=unsafe)
    assert {m.id for m in client.models.list().data} == {MAIN_MODEL, "other/model"}


def test_workers_share_verdicts_through_the_redis_tier(serve: Any, tmp_path: Path, redis_url: str) -> None:
    secret = "serve-test-secret-0123456789abcdef"
    with emulator(model=MAIN_MODEL) as main, emulator() as guard:
        cache = f"{{enabled: true, store: redis, redis: {{url: '{redis_url}'}}}}"
        config = write_config(tmp_path / "c", main.base_url, guard.base_url, cache=cache)
        server = serve(config, "--workers", "2", "--no-warm-up", env={"GUARDCACHE_REDIS_SECRET": secret})
        # Each worker's first readiness round asks the guard once per rail (never through the
        # caches; the next round is --ready-interval, 30 s, away): count the turns' calls only.
        deadline = time.monotonic() + 30
        while guard.stats().requests_by_endpoint.get("chat.completions", 0) < 4:
            assert time.monotonic() < deadline, guard.stats()
            time.sleep(0.02)
        guard.reset()
        client = server.client()
        messages = [{"role": "user", "content": "What is the tallest mountain in Europe?"}]
        for _ in range(12):  # new connections each time: spread over both workers
            fresh = server.client()
            reply = fresh.chat.completions.create(model="x", messages=messages)
            assert reply.choices[0].message.content.startswith("You said:")
            fresh.close()
        client.close()
        # One backend call per distinct check, whichever worker served each request.
        assert guard.stats().requests_by_endpoint.get("chat.completions", 0) == 2
        pids = {line.split("[")[-1] for line in server.lines if "Started server process" in line}
        assert len(pids) == 2
