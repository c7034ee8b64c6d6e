"""One set of limits for every route with a body: each route of ``BODY_ROUTES``
(``guardcache/server/body_routes.py``, the one list the server and these tests read) is refused
without the client key, past ``--max-body-bytes``, past ``--body-timeout``, past
``--max-json-depth`` and past ``--max-concurrency``, over real sockets against ``guardcache serve``
in front of emulated NIMs.

A route added to ``BODY_ROUTES`` needs an example body in ``EXAMPLES`` (a test fails naming it),
and then every test here covers it.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from guardcache.emulator import ThreadedEmulator
from guardcache.server.body_routes import BODY_ROUTES, CHAT_PATH, CHECKS_PATH, LITELLM_PATH, RESPONSES_PATH
from tests.integration import test_serve as support
from tests.integration.test_serve import GUARD_MODEL, INPUT_FLOW, MAIN_MODEL, ServeProcess, emulator, sample

pytestmark = pytest.mark.integration

KEY = "limits-key-31"
MAX_BODY = 4096
BODY_TIMEOUT = 2.0

EXAMPLES: dict[str, Callable[[str], dict[str, Any]]] = {
    CHAT_PATH: lambda text: {"messages": [{"role": "user", "content": text}]},
    CHECKS_PATH: lambda text: {"messages": [{"role": "user", "content": text}]},
    LITELLM_PATH: lambda text: {"input_type": "request", "texts": [text]},
    # The text is a tool's output (a function_call_output): the input rails judge it too.
    RESPONSES_PATH: lambda text: {
        "input": [
            {"role": "user", "content": "What does the tool say?"},
            {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": text},
        ]
    },
}
"""A valid body for each body route, around a user text its input rails judge."""


def test_every_body_route_has_an_example() -> None:
    assert set(EXAMPLES) == set(BODY_ROUTES), f"add an example body for {set(BODY_ROUTES) - set(EXAMPLES)}"


@pytest.fixture(scope="module")
def nims() -> Iterator[tuple[ThreadedEmulator, ThreadedEmulator]]:
    """This module's own guard: the concurrency test makes it hang."""
    with emulator(model=MAIN_MODEL) as main, emulator() as guard:
        yield main, guard


@pytest.fixture(scope="module")
def limited(
    nims: tuple[ThreadedEmulator, ThreadedEmulator], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    """A server with a client key, small body limits and a concurrency limit of one. The guard's
    check budget is long (120 s), so a check waiting on a hanging guard holds its place until the
    test lets it go."""
    main, guard = nims
    folder = tmp_path_factory.mktemp("limits") / "l"
    folder.mkdir()
    (folder / "config.yml").write_text(
        f"""
models:
  - type: main
    engine: nim
    model: {MAIN_MODEL}
    parameters: {{base_url: "{main.base_url}", max_tokens: 16}}
  - type: content_safety
    engine: nim
    model: {GUARD_MODEL}
    parameters: {{base_url: "{guard.base_url}", timeout: 120}}
rails:
  input: {{flows: [{INPUT_FLOW}]}}
"""
    )
    server = ServeProcess(
        folder,
        "--api-key-env",
        "LIMITS_KEY",
        "--max-body-bytes",
        str(MAX_BODY),
        "--body-timeout",
        str(BODY_TIMEOUT),
        "--max-concurrency",
        "1",
        env={"LIMITS_KEY": KEY},
    ).start()
    yield server
    server.stop()


def post(server: ServeProcess, path: str, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {KEY}", **kw.pop("headers", {})}
    return support.LOOPBACK.post(f"{server.url}{path}", headers=headers, timeout=30, **kw)


def head(path: str, length: int, *, key: bool = True) -> bytes:
    auth = f"Authorization: Bearer {KEY}\r\n" if key else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n{auth}\r\n"
    ).encode()


def read_until_closed(sock: socket.socket, within: float) -> tuple[bytes, bool]:
    """What the server sends until it closes the connection (every read bounded by ``within``),
    and whether it closed."""
    deadline = time.monotonic() + within
    data = b""
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return data, False
        except ConnectionResetError:
            return data, True
        if not chunk:
            return data, True
        data += chunk
    return data, False


def error_code(response: httpx.Response) -> str:
    code: str = response.json()["error"]["code"]
    return code


def wait_for(condition: Callable[[], bool], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.05)


@pytest.mark.parametrize("path", BODY_ROUTES)
def test_the_client_key_is_required_as_bearer_or_x_api_key(limited: ServeProcess, path: str) -> None:
    body = EXAMPLES[path]("hello there")
    missing = support.LOOPBACK.post(f"{limited.url}{path}", json=body, timeout=30)
    assert missing.status_code == 401 and error_code(missing) == "invalid_api_key"
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = post(limited, path, json=body, headers={"Authorization": "Bearer nope", "x-api-key": "nope"})
    assert wrong.status_code == 401
    assert post(limited, path, json=body).status_code == 200
    by_header = support.LOOPBACK.post(
        f"{limited.url}{path}", json=body, headers={"x-api-key": KEY}, timeout=30
    )
    assert by_header.status_code == 200, by_header.text


@pytest.mark.parametrize("path", BODY_ROUTES)
def test_a_body_past_max_body_bytes_is_413_with_or_without_a_content_length(
    limited: ServeProcess, path: str
) -> None:
    big = json.dumps(EXAMPLES[path]("a" * (2 * MAX_BODY))).encode()
    sized = post(limited, path, content=big)
    assert sized.status_code == 413 and error_code(sized) == "request_too_large"

    def chunked() -> Iterator[bytes]:  # no Content-Length: counted while reading
        yield big[: MAX_BODY // 2]
        yield big[MAX_BODY // 2 :]

    streamed = post(limited, path, content=chunked())
    assert streamed.status_code == 413 and error_code(streamed) == "request_too_large"


@pytest.mark.parametrize("path", BODY_ROUTES)
def test_a_body_slower_than_body_timeout_is_408_and_closed(limited: ServeProcess, path: str) -> None:
    before = sample(limited.metrics(), "guardcache_requests_rejected_total", reason="body_timeout")
    with socket.create_connection(("127.0.0.1", limited.port), timeout=10) as sock:
        sock.sendall(head(path, 1000) + b"{")  # then nothing
        data, closed = read_until_closed(sock, within=10 * BODY_TIMEOUT)  # (10x: a hang guard)
    assert closed, "the stalled connection was never dropped"
    assert data.startswith(b"HTTP/1.1 408 "), data[:200]
    assert json.loads(data.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_timeout"
    after = sample(limited.metrics(), "guardcache_requests_rejected_total", reason="body_timeout")
    assert after - before == 1


@pytest.mark.parametrize("path", BODY_ROUTES)
def test_json_deeper_than_max_json_depth_is_400(limited: ServeProcess, path: str) -> None:
    body = json.dumps(EXAMPLES[path]("hi")).encode()
    for nesting in (1_900, 100):  # past the decoder's recursion limit (within MAX_BODY); deeper than 64
        deep = body[:-1] + b', "x": ' + b"[" * nesting + b"]" * nesting + b"}"
        response = post(limited, path, content=deep)
        assert response.status_code == 400, response.text
        assert error_code(response) == "json_too_deep" and "64 levels" in response.json()["error"]["message"]


@pytest.mark.parametrize("path", BODY_ROUTES)
def test_past_max_concurrency_is_503_with_retry_after(
    limited: ServeProcess, nims: tuple[ThreadedEmulator, ThreadedEmulator], path: str
) -> None:
    _, guard = nims
    guard.set_faults(hang_rate=1.0, hang_seconds=120)
    try:
        holder = json.dumps(EXAMPLES[path](f"a question nobody asked before about {path}")).encode()
        with socket.create_connection(("127.0.0.1", limited.port), timeout=10) as sock:
            sock.sendall(head(path, len(holder)) + holder)  # its check waits on the hanging guard
            wait_for(lambda: sample(limited.metrics(), "guardcache_requests_in_flight") == 1)
            refused = post(limited, path, json=EXAMPLES[path]("and another one"))
            assert refused.status_code == 503 and error_code(refused) == "overloaded"
            assert refused.headers["retry-after"] == "1"
        # the holder left: its check is cancelled and its place freed
        wait_for(lambda: sample(limited.metrics(), "guardcache_requests_in_flight") == 0)
    finally:
        guard.set_faults(hang_rate=0.0)
    assert post(limited, path, json=EXAMPLES[path]("hello again")).status_code == 200


def test_other_routes_stay_open_for_probes_and_scrapes(limited: ServeProcess, tmp_path: Path) -> None:
    assert support.LOOPBACK.get(f"{limited.url}/health/live", timeout=10).status_code == 200
    assert support.LOOPBACK.get(f"{limited.url}/metrics", timeout=10).status_code == 200
    assert support.LOOPBACK.get(f"{limited.url}/v1/models", timeout=10).status_code == 401
