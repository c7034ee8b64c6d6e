"""Verdict or not, always said: a turn decided without a verdict says so, wherever it is read.

For every way a guard can fail to give a verdict (an outage: a timeout, 5xx, 429, a body that is
not JSON, a dropped or refused connection; a guard that can never answer: a redirect, 401, 403,
404, a certificate that does not verify; a guard that declines to judge; an answer that is no
verdict), under ``on_error: allow`` and ``block``:

- a turn served by ``guardcache serve`` (its app under uvicorn, over real HTTP) lists the rails in
  ``"guardcache": {"no_verdict": [...]}`` and ``X-Guardcache-No-Verdict``; a blocked one says
  ``"reason": "no_verdict"``; an outage under ``allow`` passes (``no-verdict pass``) and is still
  listed; ``/metrics`` counts it in ``guardcache_turns_total`` by that outcome;
- ``guardcache check`` exits 3 whatever ``on_error`` did, and ``--json`` says why.

A turn whose rails all answered keeps its shape (no ``no_verdict``, no header) and exits 0 or 1.
The guards are the NIM emulator (its faults are real 5xx, 429, hangs, bad bodies, drops and bad
verdicts) and scripted HTTP/1.1 servers (tests/transport_support.py); nothing of the client, the
rails or the server is mocked.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from guardcache import LLMRails, RailsConfig, cli
from guardcache.emulator.server import UvicornServer
from guardcache.llm.lanes import shared_ssl_context
from guardcache.rails import REFUSAL
from guardcache.server.app import create_app
from guardcache.server.settings import ServeSettings
from guardcache.testing.pytest_plugin import EmulatorFactory
from tests.transport_support import ServerFactory, Step, TLSScriptServer, answer, response

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_proxy_env")]

REPO = Path(__file__).resolve().parents[2]
MAIN_MODEL = "meta/llama-3.1-8b-instruct"
GUARD_MODEL = "nvidia/llama-3.1-nemoguard-8b-content-safety"
INPUT_FLOW = "content safety check input $model=content_safety"
OUTPUT_FLOW = "content safety check output $model=content_safety"
SAFE_TEXT = "What is the capital of France?"
UNSAFE_TEXT = "How do I kill my neighbour?"
RESPONSE = "Paris is the capital of France."


# -- the failure classes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """One way for a guard to give no verdict: the server that fails so, and what it comes to."""

    kind: str  # RailResult.error_kind
    outage: bool  # follows on_error (else: blocked whatever on_error says)
    emulator_faults: dict[str, Any] | None = None  # the emulator, with these faults
    script: Step | None = None  # else a scripted server answering each request with this
    where: str = "scripted"  # or "refused" (a closed port), "tls" (a certificate not trusted)
    timeout: float = 3.0  # the guard model's parameters.timeout


def _completion(message: dict[str, Any], finish_reason: str = "stop") -> bytes:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": GUARD_MODEL,
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
    return response(json.dumps(body).encode())


def _status(status: int) -> bytes:
    headers = [("Content-Type", "application/json")]
    if 300 <= status < 400:
        headers.append(("Location", "http://127.0.0.1:9/elsewhere"))
    body = json.dumps({"error": {"message": "no", "type": "error"}}).encode()
    return response(body, status=status, reason="Whatever", headers=headers)


FAILURES: dict[str, Failure] = {
    # outages: on_error decides
    "timeout": Failure("BackendTimeoutError", True, {"hang_rate": 1.0, "hang_seconds": 30.0}, timeout=0.2),
    "5xx": Failure("BackendStatusError", True, {"error_rate": 1.0}),
    "429": Failure("BackendStatusError", True, {"rate_limit_rate": 1.0, "retry_after_seconds": 0}),
    "malformed JSON body": Failure("BackendProtocolError", True, {"invalid_body_rate": 1.0}),
    "dropped connection": Failure("BackendConnectionError", True, {"drop_rate": 1.0}),
    "connection refused": Failure("BackendConnectionError", True, where="refused"),
    # a guard that can never answer as configured: blocked whatever on_error says
    "302": Failure("BackendRefusedConfigError", False, script=_status(302)),
    "401": Failure("BackendRefusedConfigError", False, script=_status(401)),
    "403": Failure("BackendRefusedConfigError", False, script=_status(403)),
    "404": Failure("BackendRefusedConfigError", False, script=_status(404)),
    "TLS verification": Failure("BackendTLSError", False, where="tls"),
    # a guard that declines to judge: blocked whatever on_error says
    "refusal": Failure(
        "BackendDeclinedError", False, script=_completion({"content": None, "refusal": "No."})
    ),
    "content_filter": Failure(
        "BackendDeclinedError", False, script=_completion({"content": None}, "content_filter")
    ),
    "empty content": Failure("BackendDeclinedError", False, script=_completion({"content": ""})),
    # an answer that is no verdict: blocked whatever on_error says
    "unparseable verdict": Failure("ParseError", False, {"malformed_rate": 1.0}),
    "duplicate keys": Failure("ParseError", False, {"duplicate_key_rate": 1.0}),
}


# -- fixtures and helpers --------------------------------------------------------------------------


@pytest.fixture
def untrusted_tls(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The default trust store, which knows nothing of the test CA (the shared context rebuilt)."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    shared_ssl_context.cache_clear()
    yield
    shared_ssl_context.cache_clear()


async def start_guard(
    failure: Failure, request: pytest.FixtureRequest, emulators: EmulatorFactory, scripted: ServerFactory
) -> AsyncGenerator[str, None]:
    """The failing guard's base URL (an async generator: the TLS server is closed after)."""
    if failure.emulator_faults is not None:
        yield (await emulators(faults=failure.emulator_faults)).base_url
    elif failure.where == "refused":
        with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        yield f"http://127.0.0.1:{port}/v1"
    elif failure.where == "tls":
        request.getfixturevalue("untrusted_tls")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        trustme.CA().issue_cert("127.0.0.1", "localhost").configure_cert(context)
        server = await TLSScriptServer(answer('{"User Safety": "safe"}'), context).start()
        try:
            yield server.base_url
        finally:
            await server.aclose()
    else:
        assert failure.script is not None
        yield (await scripted(failure.script)).base_url


def write_config(folder: Path, main_url: str, guard_url: str, *, on_error: str, timeout: float = 3.0) -> Path:
    """A config of one content-safety model on input and output (each group's ``on_error``)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yml").write_text(
        f"""
models:
  - type: main
    engine: nim
    model: {MAIN_MODEL}
    parameters: {{base_url: "{main_url}", max_tokens: 16}}
  - type: content_safety
    engine: nim
    model: {GUARD_MODEL}
    parameters: {{base_url: "{guard_url}", timeout: {timeout}}}
rails:
  input: {{on_error: {on_error}, flows: [{INPUT_FLOW}]}}
  output: {{on_error: {on_error}, flows: [{OUTPUT_FLOW}]}}
"""
    )
    return folder


async def until(condition: Callable[[], bool], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def serving(config: Path) -> AsyncIterator[str]:
    """``guardcache serve``'s app for ``config`` under uvicorn on 127.0.0.1 (this loop): its URL.

    The server is uvicorn as the emulator embeds it (``UvicornServer``: it stops when asked, where
    stock uvicorn looks at its exit flag every 100 ms); the app, its lifespan and the protocol are
    uvicorn's and guardcache's as ``guardcache serve`` runs them."""
    settings = ServeSettings(config=str(config), warm_up=False, ready_main="off", ready_interval=600)
    app = create_app(settings)
    server = UvicornServer(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, lifespan="on", access_log=False),
        on_shutdown=lambda: None,
        signals=False,
    )
    task = asyncio.create_task(server.serve())
    try:
        await until(lambda: server.started or task.done())
        assert not task.done(), "the server did not start"
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.request_exit()
        await asyncio.wait_for(task, 30)


def metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(scraped: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return sum(
        v for (n, have), v in scraped.items() if n == name and all((k, x) in have for k, x in labels.items())
    )


async def scrape(
    client: httpx.AsyncClient, url: str, turns: int
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``/metrics`` once ``turns`` turns were counted (a stream's turn is counted as its answer
    closes, which may be a moment after the client read the last byte)."""
    deadline = time.monotonic() + 30
    while True:
        scraped = metrics((await client.get(f"{url}/metrics")).text)
        if sample(scraped, "guardcache_turn_seconds_count") >= turns or time.monotonic() > deadline:
            return scraped
        await asyncio.sleep(0.02)


async def chat(
    url: str, text: str, *, stream: bool = False, turn: int = 1
) -> tuple[httpx.Response, dict[str, Any]]:
    """The ``turn``-th turn: the response (``extensions["metrics"]``: ``/metrics`` after it) and
    its ``guardcache`` object (a stream's: in its last chunk)."""
    body = {"model": MAIN_MODEL, "messages": [{"role": "user", "content": text}], "stream": stream}
    async with httpx.AsyncClient(timeout=30) as client:
        reply = await client.post(f"{url}/v1/chat/completions", json=body)
        assert reply.status_code == 200, reply.text
        reply.extensions["metrics"] = await scrape(client, url, turn)
    if not stream:
        return reply, reply.json()["guardcache"]
    events = [line[6:] for line in reply.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    finals = [c for c in chunks if "guardcache" in c]
    assert len(finals) == 1 and finals[0] is chunks[-1]
    text_sent = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    reply.extensions["text"] = text_sent
    return reply, finals[0]["guardcache"]


async def check_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """``guardcache check ...`` in this process (``cli.main``; in a thread, so the servers on this
    loop keep answering): the exit status and what it printed."""
    capsys.readouterr()
    code = await asyncio.to_thread(cli.main, ["check", *argv])
    return code, capsys.readouterr().out


@pytest.fixture
async def main_url(emulator_factory: EmulatorFactory) -> str:
    return (await emulator_factory(model=MAIN_MODEL)).base_url


Guard = Callable[[Failure], Awaitable[str]]


@pytest.fixture
async def failing_guard(
    request: pytest.FixtureRequest, emulator_factory: EmulatorFactory, scripted: ServerFactory
) -> AsyncIterator[Guard]:
    """``await failing_guard(failure)``: the URL of a guard that fails so (closed at teardown)."""
    opened: list[AsyncGenerator[str, None]] = []

    async def start(failure: Failure) -> str:
        gen = start_guard(failure, request, emulator_factory, scripted)
        opened.append(gen)
        return await gen.__anext__()

    yield start
    for gen in opened:
        await gen.aclose()


# -- every failure class, both on_error settings ---------------------------------------------------


@pytest.mark.parametrize("on_error", ["allow", "block"])
@pytest.mark.parametrize("name", list(FAILURES))
async def test_a_turn_without_a_verdict_says_so_served_and_checked(
    failing_guard: Guard,
    main_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    on_error: str,
) -> None:
    failure = FAILURES[name]
    guard_url = await failing_guard(failure)
    config = write_config(tmp_path / "c", main_url, guard_url, on_error=on_error, timeout=failure.timeout)
    passes = failure.outage and on_error == "allow"

    async with serving(config) as url:
        reply, extension = await chat(url, SAFE_TEXT)
    if passes:
        # Let through without a verdict, in both directions (the output check fails the same way),
        # and said: the answer is the main model's, the rails listed.
        assert extension == {"blocked": False, "no_verdict": [INPUT_FLOW, OUTPUT_FLOW], "config_id": "c"}
        assert reply.json()["choices"][0]["message"]["content"] != REFUSAL
        assert reply.json()["choices"][0]["finish_reason"] != "content_filter"
        assert "x-guardcache-blocked" not in reply.headers
        assert reply.headers["x-guardcache-no-verdict"] == f"{INPUT_FLOW}, {OUTPUT_FLOW}"
        outcome = "passed_no_verdict"
    else:
        # Blocked for lack of a verdict, not by one: said apart from an unsafe text's refusal.
        assert extension == {
            "blocked": True,
            "direction": "input",
            "rail": INPUT_FLOW,
            "reason": "no_verdict",
            "no_verdict": [INPUT_FLOW],
            "config_id": "c",
        }
        assert reply.json()["choices"][0]["message"]["content"] == REFUSAL
        assert reply.headers["x-guardcache-blocked"] == "input"
        assert reply.headers["x-guardcache-no-verdict"] == INPUT_FLOW
        outcome = "blocked_no_verdict"
    scraped = reply.extensions["metrics"]
    assert sample(scraped, "guardcache_turns_total", config="c", outcome=outcome) == 1
    assert sample(scraped, "guardcache_turns_total") == 1
    rails_failed = 2 if passes else 1
    assert sample(scraped, "guardcache_check_errors_total", kind=failure.kind) == rails_failed

    code, out = await check_cli(capsys, "--config", str(config), "--json", "--response", RESPONSE, SAFE_TEXT)
    report = json.loads(out)
    assert code == 3, out
    assert report["exit_code"] == 3 and report["exit_meaning"] == "no verdict"
    assert report["outcome"] == outcome and report["allowed"] is passes
    assert report["decision"] == ("allowed" if passes else "blocked")
    assert report["reason"] == (None if passes else "no_verdict")
    # check_async runs the output rails on --response whatever the input rails said.
    assert report["no_verdict"] == [INPUT_FLOW, OUTPUT_FLOW]
    for rail, direction in zip(report["rails"], ("input", "output"), strict=True):
        assert rail["direction"] == direction and rail["no_verdict"] is True
        assert rail["allowed"] is passes and rail["error_kind"] == failure.kind
        assert rail["error"].startswith(failure.kind) or failure.kind == "ParseError"
    assert SAFE_TEXT not in out and RESPONSE not in out  # no user text in the report

    # The text form says it too, with the same exit status.
    code, out = await check_cli(capsys, "--config", str(config), SAFE_TEXT)
    assert code == 3
    last = out.strip().splitlines()[-1]
    if passes:
        assert last == f"allowed without a verdict (on_error: allow): no verdict ({INPUT_FLOW})"
    else:
        assert last == f"blocked: no verdict ({INPUT_FLOW})"


# -- streams ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("on_error", ["allow", "block"])
@pytest.mark.parametrize("name", ["5xx", "401", "unparseable verdict"])
async def test_a_streamed_turn_without_a_verdict_says_so_in_its_header_and_last_chunk(
    failing_guard: Guard, main_url: str, tmp_path: Path, name: str, on_error: str
) -> None:
    failure = FAILURES[name]
    config = write_config(tmp_path / "c", main_url, await failing_guard(failure), on_error=on_error)
    async with serving(config) as url:
        reply, extension = await chat(url, SAFE_TEXT, stream=True)
    if failure.outage and on_error == "allow":
        # The output rail checks the whole answer before its first byte: both are in the header.
        assert extension == {"blocked": False, "no_verdict": [INPUT_FLOW, OUTPUT_FLOW], "config_id": "c"}
        assert reply.headers["x-guardcache-no-verdict"] == f"{INPUT_FLOW}, {OUTPUT_FLOW}"
        assert reply.extensions["text"] and reply.extensions["text"] != REFUSAL
        outcome = "passed_no_verdict"
    else:
        assert extension["reason"] == "no_verdict" and extension["no_verdict"] == [INPUT_FLOW]
        assert reply.headers["x-guardcache-blocked"] == "input"
        assert reply.headers["x-guardcache-no-verdict"] == INPUT_FLOW
        assert reply.extensions["text"] == REFUSAL
        outcome = "blocked_no_verdict"
    assert sample(reply.extensions["metrics"], "guardcache_turns_total", outcome=outcome) == 1


# -- verdicts keep their shape ---------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_turns_decided_by_verdicts_keep_their_shape_and_exit_0_or_1(
    emulator_factory: EmulatorFactory,
    main_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    stream: bool,
) -> None:
    guard = await emulator_factory()
    config = write_config(tmp_path / "c", main_url, guard.base_url, on_error="allow")
    async with serving(config) as url:
        safe, safe_ext = await chat(url, SAFE_TEXT, stream=stream)
        unsafe, unsafe_ext = await chat(url, UNSAFE_TEXT, stream=stream, turn=2)
    assert safe_ext == {"blocked": False, "config_id": "c"}
    assert "x-guardcache-no-verdict" not in safe.headers and "x-guardcache-blocked" not in safe.headers
    assert unsafe_ext == {
        "blocked": True,
        "direction": "input",
        "rail": INPUT_FLOW,
        "reason": "verdict",
        "config_id": "c",
    }
    assert "x-guardcache-no-verdict" not in unsafe.headers
    scraped = unsafe.extensions["metrics"]
    assert sample(scraped, "guardcache_turns_total", outcome="allowed") == 1
    assert sample(scraped, "guardcache_turns_total", outcome="blocked_verdict") == 1
    assert sample(scraped, "guardcache_turns_total") == 2

    code, out = await check_cli(capsys, "--config", str(config), "--json", "--response", RESPONSE, SAFE_TEXT)
    report = json.loads(out)
    assert code == 0 and report["outcome"] == "allowed" and report["exit_meaning"] == "allowed by verdicts"
    assert report["no_verdict"] == [] and report["reason"] is None
    assert all(r["no_verdict"] is False and r["error_kind"] is None for r in report["rails"])
    code, out = await check_cli(capsys, "--config", str(config), "--json", UNSAFE_TEXT)
    report = json.loads(out)
    assert code == 1 and report["outcome"] == "blocked_verdict" and report["reason"] == "verdict"
    assert report["exit_meaning"] == "blocked by a verdict" and report["no_verdict"] == []
    code, out = await check_cli(capsys, "--config", str(config), UNSAFE_TEXT)
    assert code == 1 and out.strip().splitlines()[-1] == "blocked"


async def test_a_verdict_block_stands_beside_a_rail_without_a_verdict(
    emulator_factory: EmulatorFactory,
    scripted: ServerFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The input rail's guard is down (let through by on_error: allow); the output rail's answers
    # "unsafe": the text was judged, and not allowed. Exit 1, and the missing verdict still said.
    down = await scripted(_status(503))
    guard = await emulator_factory()
    config = write_config(tmp_path / "c", "http://127.0.0.1:9/v1", guard.base_url, on_error="allow")
    text = (config / "config.yml").read_text()
    text = text.replace(
        "rails:",
        f"""  - type: content_safety_down
    engine: nim
    model: {GUARD_MODEL}
    parameters: {{base_url: "{down.base_url}", timeout: 3}}
rails:""",
    ).replace(f"flows: [{INPUT_FLOW}]", "flows: [content safety check input $model=content_safety_down]")
    (config / "config.yml").write_text(text)
    (config / "prompts.yml").write_text(_prompts_for("content_safety_down"))
    code, out = await check_cli(capsys, "--config", str(config), "--json", "--response", UNSAFE_TEXT, "hi")
    report = json.loads(out)
    assert code == 1, out
    assert report["outcome"] == "blocked_verdict" and report["reason"] == "verdict"
    assert report["no_verdict"] == ["content safety check input $model=content_safety_down"]


def _prompts_for(model_type: str) -> str:
    """prompts.yml giving ``model_type`` the default content-safety prompts (NeMo wants a prompt per
    ``$model=`` type)."""
    import yaml

    from guardcache.config.prompts import default_prompts

    prompts = [
        {**p.model_dump(exclude_none=True), "task": f"{p.base_task} $model={model_type}"}
        for p in default_prompts()
    ]
    return yaml.safe_dump({"prompts": prompts}, sort_keys=False)


# -- the Python API says the same ----------------------------------------------------------------


@pytest.mark.parametrize("on_error", ["allow", "block"])
async def test_explain_and_rail_results_say_it_too(
    emulator_factory: EmulatorFactory, main_url: str, tmp_path: Path, on_error: str
) -> None:
    guard = await emulator_factory(faults={"error_rate": 1.0})
    config = RailsConfig.from_path(write_config(tmp_path / "c", main_url, guard.base_url, on_error=on_error))
    rails = LLMRails(config)
    try:
        reply = await rails.generate_async(messages=[{"role": "user", "content": SAFE_TEXT}])
        info = rails.explain()
        if on_error == "allow":
            assert reply["content"] != REFUSAL
            assert info.no_verdict == (INPUT_FLOW, OUTPUT_FLOW) and info.reason is None
            assert info.checks.outcome == "passed_no_verdict" and info.checks.allowed
        else:
            assert reply["content"] == REFUSAL
            assert info.no_verdict == (INPUT_FLOW,) and info.reason == "no_verdict"
            assert info.checks.outcome == "blocked_no_verdict"
        rail = info.checks.input[0]
        assert rail.no_verdict and rail.error_kind == "BackendStatusError"
        assert rail.allowed is (on_error == "allow")
        assert "outcome: " in info.summary() and "no verdict: BackendStatusError" in info.summary()
    finally:
        await rails.aclose()


# -- a real subprocess ---------------------------------------------------------------------------


@pytest.mark.parametrize("on_error", ["allow", "block"])
async def test_the_check_command_exits_3_as_a_subprocess(
    scripted: ServerFactory, tmp_path: Path, on_error: str
) -> None:
    guard = await scripted(_status(503))
    config = write_config(tmp_path / "c", "http://127.0.0.1:9/v1", guard.base_url, on_error=on_error)
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "guardcache",
        "check",
        "--config",
        str(config),
        "--json",
        SAFE_TEXT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 3, err.decode()
    report = json.loads(out)
    assert report["exit_code"] == 3 and report["no_verdict"] == [INPUT_FLOW]
    assert report["outcome"] == ("passed_no_verdict" if on_error == "allow" else "blocked_no_verdict")
    assert len(guard.requests) == 3  # an outage is retried (twice): the 503s were real


async def test_a_config_error_is_exit_2_and_said_in_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.yml").write_text("models: [{type: main}]\nrails: {input: {flows: [nope]}}\n")
    code, out = await check_cli(capsys, "--config", str(tmp_path / "bad"), "--json", "hi")
    report = json.loads(out)
    assert code == 2 and report["exit_code"] == 2 and report["outcome"] == "error"
    assert report["exit_meaning"] == "usage or config error" and report["error"]


async def test_a_config_without_rails_to_run_is_exit_2_not_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "none"
    folder.mkdir()
    (folder / "config.yml").write_text(
        f"""
models:
  - type: main
    engine: nim
    model: {MAIN_MODEL}
    parameters: {{base_url: "http://127.0.0.1:9/v1"}}
"""
    )
    code, out = await check_cli(capsys, "--config", str(folder), "--json", "hi")
    assert code == 2 and json.loads(out)["outcome"] == "error"


# -- the check command closes its rails ------------------------------------------------------------


async def test_the_check_command_flushes_the_redis_tiers_counters(
    emulator_factory: EmulatorFactory,
    redis_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A one-shot command ends long before a flush is due (an interval, or a number of lookups):
    # only closing the rails (aclose) pushes its counts to the shared hash the replicas read.
    monkeypatch.setenv("GUARDCACHE_REDIS_SECRET", "no-verdict-reporting-test-secret")
    guard = await emulator_factory()
    config = write_config(tmp_path / "c", "http://127.0.0.1:9/v1", guard.base_url, on_error="block")
    text = (config / "config.yml").read_text()
    cache = f'    cache: {{enabled: true, store: redis, redis: {{url: "{redis_url}", key_prefix: gcnv}}}}\n'
    (config / "config.yml").write_text(text.replace("rails:", cache + "rails:"))
    code, out = await check_cli(capsys, "--config", str(config), "--response", RESPONSE, SAFE_TEXT)
    assert code == 0, out
    capsys.readouterr()
    code = await asyncio.to_thread(cli.main, ["cache", "stats", "--config", str(config), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    shared = {m["model_type"]: m for m in report["models"]}["content_safety"]["global"]
    assert shared["lookups"] == 2 and shared["computations"] == 2  # the input and the output check
