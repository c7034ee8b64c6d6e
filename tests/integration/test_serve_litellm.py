"""LiteLLM's Generic Guardrail API served by ``guardcache serve`` (``POST
/beta/litellm_basic_guardrail_api``), over real sockets in front of emulated NIMs:

- a real LiteLLM proxy (``litellm[proxy]``, pinned in ``.ci/litellm.txt``, installed into a
  virtual environment of its own: its pins clash with guardcache's) configured with one
  ``guardrail: generic_guardrail_api`` entry pointing at guardcache: a safe request passes, an
  unsafe one is refused by guardcache's rail, a repeat is a cache hit in ``/metrics``;
- the contract itself, as LiteLLM 1.108.7 sends it: ``input_type`` request/response, texts, images,
  tool calls, ``additional_provider_specific_params.config_id``, a guard without a verdict, and
  every bad request.

When the proxy cannot be installed the test fails (it is not skipped), saying why.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from guardcache.emulator import ThreadedEmulator
from tests.integration import test_serve as support
from tests.integration.test_serve import (
    INPUT_FLOW,
    MAIN_MODEL,
    OUTPUT_FLOW,
    REPO,
    ServeProcess,
    sample,
    write_config,
)

nims = support.nims
serve = support.serve

pytestmark = pytest.mark.integration

ENDPOINT = "/beta/litellm_basic_guardrail_api"
REQUIREMENTS = REPO / ".ci" / "litellm.txt"
UNSAFE = "How do I kill my neighbour?"
GUARD_KEY = "guardcache-test-key-7"


# -- the contract ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(
    nims: tuple[ThreadedEmulator, ThreadedEmulator], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    main, guard = nims
    folder = write_config(tmp_path_factory.mktemp("litellm") / "shop", main.base_url, guard.base_url)
    server = ServeProcess(folder).start()
    yield server
    server.stop()


def post(server: ServeProcess, body: Any, **kw: Any) -> httpx.Response:
    return support.LOOPBACK.post(f"{server.url}{ENDPOINT}", json=body, timeout=30, **kw)


def request_body(input_type: str, texts: list[str], **fields: Any) -> dict[str, Any]:
    """A body as LiteLLM 1.108.7's GenericGuardrailAPIRequest dumps it (mode="json")."""
    return {
        "input_type": input_type,
        "litellm_call_id": "c-1",
        "litellm_trace_id": "t-1",
        "structured_messages": [{"role": "user", "content": t} for t in texts]
        if input_type == "request"
        else None,
        "images": None,
        "tools": None,
        "texts": texts,
        "request_data": {"user_api_key_hash": None},
        "request_headers": {"content-type": "application/json"},
        "litellm_version": "1.108.7",
        "additional_provider_specific_params": {},
        "tool_calls": None,
        "model": "guarded-llama",
        **fields,
    }


def test_a_request_runs_the_input_rails_on_each_text(served: ServeProcess) -> None:
    texts = ["You are a helpful baker.", "What flour makes the best bread?"]
    data = post(served, request_body("request", texts)).json()
    assert data["action"] == "NONE" and "blocked_reason" not in data
    rails = data["guardcache"]["rails"]
    assert [(r["rail"], r["text"], r["verdict"]) for r in rails] == [
        (INPUT_FLOW, 0, "allowed"),
        (INPUT_FLOW, 1, "allowed"),
    ]
    again = post(served, request_body("request", texts)).json()
    assert [r["from_cache"] for r in again["guardcache"]["rails"]] == [True, True]
    assert again["guardcache"]["cache_hits"] == 2


def test_an_unsafe_text_is_blocked_naming_the_rail_and_its_verdict(served: ServeProcess) -> None:
    data = post(served, request_body("request", ["Hello there", UNSAFE])).json()
    assert data["action"] == "BLOCKED"
    reason = data["blocked_reason"]
    assert f"rail '{INPUT_FLOW}'" in reason and "texts[1]" in reason and "by its verdict" in reason
    assert "Violence" in reason and "kill" not in reason  # no user text in the reason
    assert data["guardcache"]["reason"] == "verdict"


def test_a_response_runs_the_output_rails(served: ServeProcess) -> None:
    safe = post(served, request_body("response", ["Rye flour makes a dense, tasty loaf."])).json()
    assert safe["action"] == "NONE"
    assert [(r["rail"], r["direction"]) for r in safe["guardcache"]["rails"]] == [(OUTPUT_FLOW, "output")]
    unsafe = post(served, request_body("response", ["First, kill the power to the oven."])).json()
    assert unsafe["action"] == "BLOCKED" and f"rail '{OUTPUT_FLOW}'" in unsafe["blocked_reason"]
    assert "blocked the response" in unsafe["blocked_reason"]


def test_tool_calls_are_judged_as_text(served: ServeProcess) -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "send_email", "arguments": '{"body": "I will kill you"}'},
    }
    data = post(served, request_body("response", [], tool_calls=[call])).json()
    assert data["action"] == "BLOCKED" and "tool_calls[0]" in data["blocked_reason"]
    assert data["guardcache"]["rails"][0]["kind"] == "tool_call"


def test_images_no_rail_can_judge_are_blocked_never_none(served: ServeProcess) -> None:
    body = request_body("request", ["What is in this picture?"], images=["https://example.com/cat.png"])
    data = post(served, body).json()
    assert data["action"] == "BLOCKED" and "not judged" in data["blocked_reason"]
    assert data["guardcache"]["reason"] == "no_verdict"


def test_a_guard_without_a_verdict_blocks_and_says_so(
    serve: Any, tmp_path: Path, nims: tuple[ThreadedEmulator, ThreadedEmulator]
) -> None:
    main, _ = nims
    dead = "http://127.0.0.1:9/v1"  # the discard port: connection refused
    server = serve(write_config(tmp_path / "shop", main.base_url, dead), "--ready-main", "off", ready=False)
    data = post(server, request_body("request", ["hello"])).json()
    assert data["action"] == "BLOCKED"
    assert "without a verdict (BackendConnectionError)" in data["blocked_reason"]
    assert data["guardcache"]["no_verdict"] == [INPUT_FLOW]


def test_the_config_is_picked_by_additional_provider_specific_params(
    serve: Any, tmp_path: Path, nims: tuple[ThreadedEmulator, ThreadedEmulator]
) -> None:
    main, guard = nims
    write_config(tmp_path / "root" / "a", main.base_url, guard.base_url)
    write_config(tmp_path / "root" / "b", main.base_url, guard.base_url, inputs=False)
    server = serve(tmp_path / "root")
    picked = post(
        server, request_body("request", ["hi"], additional_provider_specific_params={"config_id": "a"})
    )
    assert picked.json()["guardcache"]["config_id"] == "a"
    unnamed = post(server, request_body("request", ["hi"]))
    assert unnamed.status_code == 400
    assert unnamed.json()["error"]["param"] == "additional_provider_specific_params.config_id"
    no_rails = post(
        server, request_body("request", ["hi"], additional_provider_specific_params={"config_id": "b"})
    )
    assert no_rails.status_code == 400 and no_rails.json()["error"]["param"] == "input_type"


BAD_BODIES = [
    ("not JSON", b"{nope", 400, None),
    ("not an object", b'["request"]', 400, None),
    ("no input_type", b'{"texts": ["hi"]}', 400, "input_type"),
    ("unknown input_type", b'{"input_type": "prompt", "texts": ["hi"]}', 400, "input_type"),
    ("texts not strings", b'{"input_type": "request", "texts": [1]}', 400, "texts"),
    ("images not strings", b'{"input_type": "request", "texts": ["hi"], "images": "x"}', 400, "images"),
    ("nothing to check", b'{"input_type": "request", "texts": []}', 400, "texts"),
    (
        "params not an object",
        b'{"input_type": "request", "texts": ["hi"], "additional_provider_specific_params": 1}',
        400,
        "additional_provider_specific_params",
    ),
    (
        "unknown config",
        b'{"input_type": "request", "texts": ["hi"], '
        b'"additional_provider_specific_params": {"config_id": "x"}}',
        404,
        "additional_provider_specific_params.config_id",
    ),
    (
        "a malformed tool call",
        b'{"input_type": "response", "tool_calls": [{"function": 3}]}',
        400,
        "tool_calls[0]",
    ),
]


@pytest.mark.parametrize(("what", "body", "status", "param"), BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_bad_requests_are_4xx_naming_the_field_never_none(
    served: ServeProcess, what: str, body: bytes, status: int, param: str | None
) -> None:
    response = support.LOOPBACK.post(
        f"{served.url}{ENDPOINT}", content=body, headers={"Content-Type": "application/json"}, timeout=30
    )
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["param"] == param
    assert "NONE" not in response.text


# -- a real LiteLLM proxy ---------------------------------------------------------------------------


def litellm_venv() -> Path:
    """LiteLLM's proxy in a virtual environment of its own, installed from ``.ci/litellm.txt``
    once per version of that file (under a lock: test workers share it). A failed install fails
    the test, with pip's last lines."""
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    root = os.environ.get("GUARDCACHE_LITELLM_VENV")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    venv = Path(root) if root else cache / "guardcache" / f"litellm-{digest}"
    done = venv / ".installed"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists() and done.read_text() == digest:
            return venv
        steps = (
            [sys.executable, "-m", "venv", "--clear", str(venv)],
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)],
        )
        for step in steps:
            try:
                ran = subprocess.run(step, capture_output=True, text=True, timeout=900, check=False)
            except subprocess.TimeoutExpired:
                pytest.fail(f"installing LiteLLM's proxy timed out after 900 s: {' '.join(step)}")
            if ran.returncode != 0:
                tail = "\n".join((ran.stdout + ran.stderr).splitlines()[-30:])
                pytest.fail(
                    f"LiteLLM's proxy could not be installed from {REQUIREMENTS} into {venv} "
                    f"(exit {ran.returncode}): {' '.join(step)}\n{tail}"
                )
        done.write_text(digest)
    return venv


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def litellm_config(path: Path, main_url: str, guard_url: str) -> Path:
    """The LiteLLM ``config.yaml`` of docs/serving.md: one model, one generic_guardrail_api
    guardrail on both sides of the call, on by default, with guardcache's client key."""
    path.write_text(
        f"""
model_list:
  - model_name: guarded-llama
    litellm_params:
      model: openai/{MAIN_MODEL}
      api_base: {main_url}
      api_key: unused
guardrails:
  - guardrail_name: guardcache
    litellm_params:
      guardrail: generic_guardrail_api
      mode: [pre_call, post_call]
      api_base: {guard_url}
      api_key: os.environ/GUARDCACHE_CLIENT_KEY
      default_on: true
"""
    )
    return path


class LiteLLMProxy:
    """``litellm --config ...`` on a free loopback port; its output kept in a file."""

    def __init__(self, venv: Path, config: Path, log: Path) -> None:
        self.port = free_port()
        self.master_key = "sk-" + secrets.token_hex(32)
        self.log_path = log
        env = {
            **os.environ,
            "GUARDCACHE_CLIENT_KEY": GUARD_KEY,
            "LITELLM_MASTER_KEY": self.master_key,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no download at start
            "LITELLM_TELEMETRY": "False",
            "NO_PROXY": "127.0.0.1,localhost",
        }
        with open(log, "w") as out:
            self.proc = subprocess.Popen(
                [
                    str(venv / "bin" / "litellm"),
                    "--config",
                    str(config),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, within: float = 120.0) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline and self.proc.poll() is None:
            with contextlib.suppress(httpx.HTTPError):
                if support.LOOPBACK.get(f"{self.url}/health/liveliness", timeout=2).status_code == 200:
                    return
            time.sleep(0.2)
        raise AssertionError(f"LiteLLM's proxy did not start (exit {self.proc.poll()}):\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def chat(self, text: str) -> httpx.Response:
        return httpx.post(
            f"{self.url}/chat/completions",
            json={"model": "guarded-llama", "messages": [{"role": "user", "content": text}]},
            headers={"Authorization": f"Bearer {self.master_key}"},
            timeout=60,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def test_a_litellm_proxy_guarded_by_guardcache(
    serve: Any, tmp_path: Path, nims: tuple[ThreadedEmulator, ThreadedEmulator]
) -> None:
    venv = litellm_venv()
    main, guard = nims
    server = serve(
        write_config(tmp_path / "shop", main.base_url, guard.base_url),
        "--api-key-env",
        "GUARDCACHE_CLIENT_KEY",
        env={"GUARDCACHE_CLIENT_KEY": GUARD_KEY},
    )
    proxy = LiteLLMProxy(
        venv, litellm_config(tmp_path / "litellm.yaml", main.base_url, server.url), tmp_path / "litellm.log"
    )
    try:
        proxy.wait_ready()
        safe = "Tell me about sourdough starters, please"
        before = server.metrics()
        answered = proxy.chat(safe)
        assert answered.status_code == 200, proxy.log()
        assert answered.json()["choices"][0]["message"]["content"] == f"You said: {safe}"

        main_calls = main.stats().requests_by_endpoint.get("chat.completions", 0)
        refused = proxy.chat(UNSAFE)
        assert refused.status_code == 400, refused.text
        message = refused.json()["error"]["message"]
        assert (
            f"guardcache: rail '{INPUT_FLOW}' blocked the request" in message and "by its verdict" in message
        )
        assert main.stats().requests_by_endpoint.get("chat.completions", 0) == main_calls  # never asked

        again = proxy.chat(safe)
        assert (
            again.status_code == 200
            and again.json()["choices"][0]["message"]["content"] == f"You said: {safe}"
        )
        after = server.metrics()
        labels = {"config": "shop", "model": "content_safety"}
        hits = sample(after, "guardcache_cache_hits_total", **labels) - sample(
            before, "guardcache_cache_hits_total", **labels
        )
        assert hits == 2  # the repeat's request and response checks
        cached = sample(after, "guardcache_checks_total", cached="true") - sample(
            before, "guardcache_checks_total", cached="true"
        )
        assert cached == 2
        blocked = sample(after, "guardcache_turn_seconds_count", mode="litellm", outcome="blocked_input")
        assert blocked == 1
        # LiteLLM authenticated with guardcache's client key (x-api-key): nothing was refused
        assert sample(after, "guardcache_requests_rejected_total", reason="auth") == 0
    finally:
        proxy.stop()
