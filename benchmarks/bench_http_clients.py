"""Outgoing HTTP clients side by side: client CPU per request and requests/s, in one run.

Why: at 100% cache hits almost all of a guarded turn's CPU is the outgoing call to the main model,
so the client used for it (and for the checks) is chosen by this measurement, not by reputation.

Set-up: one local server in a child process (a canned chat completion over raw asyncio, keep-alive,
uvloop when installed: it answers in a few microseconds, so it is not what is measured), the same
JSON body for every request. Each candidate runs in this process, one after the other, warmed up,
sequentially and with 8 concurrent tasks; client CPU is ``time.process_time()`` of this process per
request (the server's CPU is not in it), req/s is wall-clock. The rounds are interleaved (every
candidate once per round, ``--rounds`` rounds) and the median is printed, so a noisy neighbour on a
shared VM hits every candidate alike.

Candidates:
- raw libraries: httpx2 (``AsyncClient.post(json=...)``, ``response.json()``), httpx 0.28, aiohttp
  (``session.post(data=..)``, ``read()`` + ``json.loads``), when installed;
- guardcache's own client, ``ChatClient.complete`` (deadline, retries, admission gate, typed errors,
  answer parsing) on each of its transports (``pool=ClientPool()`` for httpx2, ``H1Pool()`` for
  guardcache's own HTTP/1.1 client on httptools, the default), and the
  built-in main model's ``ClientLLM.stream`` (SSE) on each.

    python benchmarks/bench_http_clients.py            # ~1 min
    python benchmarks/bench_http_clients.py --quick    # ~20 s

Not part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from machine import describe_speed  # a sibling: Python puts the script's folder first on sys.path

MODEL = "meta/llama-3.1-8b-instruct"
BODY = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "Tell me something nice about the number 7"}],
    "max_tokens": 16,
}
ANSWER = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Seven is lucky."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16},
    }
).encode()
SSE = b"".join(
    b"data: "
    + json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "model": MODEL,
            "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
        }
    ).encode()
    + b"\n\n"
    for word in ("Seven ", "is ", "lucky.")
) + (
    b"data: "
    + json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "model": MODEL,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
        }
    ).encode()
    + b"\n\ndata: [DONE]\n\n"
)


# -- the server (a child process) ---------------------------------------------------------------------


def _response(body: bytes, content_type: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: "
        + content_type
        + b"\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


PLAIN_RESPONSE = _response(ANSWER, b"application/json")
SSE_RESPONSE = _response(SSE, b"text/event-stream")


class CannedHTTP(asyncio.Protocol):
    """HTTP/1.1 keep-alive, one canned answer per request (SSE when the body asks for a stream)."""

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].lower()
            at = head.find(b"content-length:")
            length = 0
            if at >= 0:
                stop = head.find(b"\r\n", at)
                length = int(head[at + 15 : stop if stop >= 0 else None])
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            streamed = b'"stream":true' in body.replace(b" ", b"")
            self.transport.write(SSE_RESPONSE if streamed else PLAIN_RESPONSE)


def serve(port_queue: Any) -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(CannedHTTP, "127.0.0.1", 0, backlog=512)
        port_queue.put(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    asyncio.run(main())


# -- the candidates -------------------------------------------------------------------------------------

Call = Callable[[], Awaitable[Any]]


async def candidates(url: str) -> tuple[dict[str, Call], list[Callable[[], Awaitable[None]]]]:
    """name -> one request; and the closers."""
    import httpx as httpx1
    import httpx2

    calls: dict[str, Call] = {}
    closers: list[Callable[[], Awaitable[None]]] = []
    for name, module in (("httpx2", httpx2), ("httpx 0.28", httpx1)):
        client = module.AsyncClient(limits=module.Limits(max_connections=100, max_keepalive_connections=32))

        async def call(client: Any = client) -> Any:
            response = await client.post(url, json=BODY)
            return response.json()

        calls[name] = call
        closers.append(client.aclose)
    if importlib.util.find_spec("aiohttp") is not None:
        import aiohttp

        session = aiohttp.ClientSession()
        payload = json.dumps(BODY).encode()
        headers = {"Content-Type": "application/json"}

        async def call_aiohttp() -> Any:
            async with session.post(url, data=payload, headers=headers) as response:
                return json.loads(await response.read())

        calls["aiohttp"] = call_aiohttp
        closers.append(session.close)

    from guardcache.llm.client import ChatClient
    from guardcache.llm.h1_pool import H1Pool
    from guardcache.llm.httpx_pool import ClientPool
    from guardcache.llm.stream import StreamTotals
    from guardcache.rails.main_llm import ClientLLM

    base = url.rsplit("/chat/completions", 1)[0]
    transports: list[tuple[str, Any]] = [("httpx2", ClientPool()), ("h1", H1Pool())]
    messages = cast(list[dict[str, str]], BODY["messages"])
    for label, pool in transports:
        client = ChatClient(base, model=MODEL, pool=pool)
        main = ClientLLM(client, {"max_tokens": 16})

        async def complete(client: ChatClient = client) -> Any:
            return await client.complete(messages, max_tokens=16)

        async def stream(main: ClientLLM = main) -> Any:
            async for _ in main.stream(messages, StreamTotals()):
                pass

        calls[f"ChatClient.complete on {label}"] = complete
        calls[f"ClientLLM.stream (SSE) on {label}"] = stream
        closers.append(pool.aclose_all)
    return calls, closers


async def measure(call: Call, n: int, concurrency: int) -> tuple[float, float]:
    """(client CPU us per request, requests/s)."""
    for _ in range(20):
        await call()
    per_task = n // concurrency

    async def worker() -> None:
        for _ in range(per_task):
            await call()

    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    done = per_task * concurrency
    return cpu / done * 1e6, done / wall


async def run(url: str, n: int, rounds: int, uvloop_on: bool) -> None:
    calls, closers = await candidates(url)
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for _ in range(rounds):
        for concurrency in (1, 8):
            for name, call in calls.items():
                results.setdefault((name, concurrency), []).append(await measure(call, n, concurrency))
    for close in closers:
        await close()
    loop = "uvloop" if uvloop_on else "asyncio"
    print(f"\n{'candidate (' + loop + ' loop)':<40} {'sequential':>22} {'8 concurrent':>24}")
    print(f"{'':<40} {'CPU us/req':>11} {'req/s':>10} {'CPU us/req':>12} {'req/s':>10}")
    for name in calls:
        row = f"{name:<40}"
        for concurrency in (1, 8):
            got = results[(name, concurrency)]
            cpu = statistics.median(g[0] for g in got)
            rate = statistics.median(g[1] for g in got)
            row += f" {cpu:11.0f} {rate:10.0f}" if concurrency == 1 else f" {cpu:12.0f} {rate:10.0f}"
        print(row)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--requests", type=int, default=2000, help="per candidate, pass and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop", choices=("asyncio", "uvloop", "both"), default="both")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.rounds = 800, 2
    print(describe_speed())
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    ports: Any = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve, args=(ports,), daemon=True)
    server.start()
    try:
        url = f"http://127.0.0.1:{ports.get(timeout=30)}/v1/chat/completions"
        loops = ["asyncio", "uvloop"] if args.loop == "both" else [args.loop]
        for loop in loops:
            if loop == "uvloop":
                if importlib.util.find_spec("uvloop") is None:
                    print("\nuvloop is not installed: no uvloop table")
                    continue
                import uvloop

                uvloop.run(run(url, args.requests, args.rounds, True))
            else:
                asyncio.run(run(url, args.requests, args.rounds, False))
    finally:
        server.terminate()
        server.join()
    print(
        "\nclient CPU is this process's CPU per request (the server's is not in it); req/s is bounded by "
        "the machine (2 shared cores here), CPU per request is the load-independent figure"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
