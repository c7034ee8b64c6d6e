"""``guardcache serve`` under load: what the server adds to the main model, and requests/s per worker.

Processes (2 shared cores): the main model and the guard are emulated NIMs in child processes
(``time_scale=0``: the fastest the emulator answers), ``guardcache serve`` (one worker) in a child
process, and the load generator (the official ``openai`` AsyncOpenAI client, plain calls and
streams) in another child process. Every check is a cache hit after a warm-up pass (100% hits).

Phases, all in one run:

Phases 1 and 2 run each server set-up of ``VARIANTS`` side by side (``--variants`` picks): the h1
upstream client with httptools + uvloop (what the ``server`` extra runs), aiohttp upstream (the
default before h1), h1 with h11 + asyncio, and httpx2 with h11 + asyncio (the first set-up).

1. **Overhead** (concurrency 1): p50 of the same requests sent straight to the main emulator and
   through the server (input + output rails, both hits), interleaved in rounds; the difference is
   what the server adds. Target: <= 1 ms p50.
2. **Throughput** (``--concurrency``, ``--seconds``): requests/s through the server, plain and
   streamed, and the server process's CPU per request (from /proc): ``1 / CPU per request`` is
   what one worker can serve when it has a core to itself (on this machine the load generator
   and the main emulator take the other core and part of this one). Target: >= 3,000/s per worker.
   Beside them, the floor (benchmarks/serve_floor.py): uvicorn answering canned JSON, and uvicorn
   forwarding each request upstream on the h1 client, with nothing else.
3. **Where the time goes**: client CPU per upstream call (raw httpx2, httpx 0.28 and aiohttp, then
   guardcache's ChatClient and SSE stream on its own HTTP/1.1 client, h1), measured alone in this
   process (see also bench_http_clients.py); with ``--profile`` the server runs under cProfile
   during a throughput pass (that pass only) and the top functions and a per-package split of its
   CPU are printed.
4. **NeMo Guardrails' server** on the same workload when ``nemoguardrails`` is installed (said so
   when it is not).

    python benchmarks/bench_serve.py                 # ~1-2 min
    python benchmarks/bench_serve.py --quick         # ~30 s
    python benchmarks/bench_serve.py --profile       # adds a profiled throughput pass

Not part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import queue
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from machine import describe_speed

REPO = Path(__file__).resolve().parents[1]

MAIN_MODEL = "meta/llama-3.1-8b-instruct"
GUARD_MODEL = "nvidia/llama-3.1-nemoguard-8b-content-safety"
RUNNING = re.compile(r"Uvicorn running on http://[\d.]+:(\d+)")
MESSAGES = [f"Tell me something nice about the number {i}" for i in range(16)]
TICKS = os.sysconf("SC_CLK_TCK")


# -- processes ---------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (and its waited-for children) from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class Child:
    """A child process whose stderr is pumped (and searched for uvicorn's port line)."""

    def __init__(self, cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.proc = subprocess.Popen(
            cmd,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", **(env or {})},
            cwd=cwd,
        )
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            self._queue.put(line)
        self._queue.put(None)

    def port(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while True:
            line = self._queue.get(timeout=max(0.01, deadline - time.monotonic()))
            if line is None:
                raise RuntimeError("the server exited:\n" + "".join(self.lines))
            found = RUNNING.search(line)
            if found:
                return int(found.group(1))

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def write_config(folder: Path, main_url: str, guard_url: str, *, rails: bool = True) -> Path:
    """The served config: a main model, content safety input and output rails on a cached guard.
    ``rails=False``: the same models with no rails (``guardcache serve`` unguarded, a reference)."""
    folder.mkdir(parents=True, exist_ok=True)
    flows = RAILS if rails else ""
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
    parameters: {{base_url: "{guard_url}"}}
    cache: {{enabled: true, maxsize: 10000, stats: {{enabled: true}}}}
{flows}"""
    )
    return folder


RAILS = """rails:
  input: {flows: [content safety check input $model=content_safety]}
  output: {flows: [content safety check output $model=content_safety]}
"""


def wait_ready(url: str, timeout: float = 60.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{url} never became ready")


# -- the load generator (a child process) ------------------------------------------------------------


async def _lean_load(spec: dict[str, Any]) -> dict[str, Any]:
    """The chat route's load from :func:`_post_bodies` (``lean-stream``: streamed, read whole)."""
    stream = spec["mode"] == "lean-stream"
    bodies = [
        json.dumps(
            {
                "model": spec["model"],
                "messages": [{"role": "user", "content": m}],
                **({"stream": True} if stream else {}),
            }
        )
        for m in MESSAGES
    ]
    end = b"data: [DONE]" if stream else b'"choices"'
    return await _post_bodies({**spec, "url": f"{spec['base_url']}/chat/completions", "bodies": bodies}, end)


async def _post_bodies(spec: dict[str, Any], end: bytes | None = None) -> dict[str, Any]:
    """``spec["bodies"]`` posted round robin to ``spec["url"]`` from aiohttp, pre-encoded, at
    ``spec["concurrency"]``, for ``seconds`` or ``count`` requests; a request whose answer is not a
    200 (holding ``end``, when given) is an error. ~10x less client CPU per request than the openai
    client, so the load generator no longer takes the cores the server needs and the server is
    measured busy, as a worker serving many clients is."""
    import aiohttp

    url = spec["url"]
    bodies = [b.encode() for b in spec["bodies"]]
    headers = {"content-type": "application/json", "authorization": "Bearer bench"}
    latencies: list[float] = []
    errors = 0
    first_error = ""
    until = time.monotonic() + spec.get("seconds", 3600.0)
    count = spec.get("count")
    issued = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal issued, errors, first_error
        while time.monotonic() < until and (count is None or issued < count):
            issued += 1
            started = time.perf_counter()
            async with session.post(url, data=bodies[issued % len(bodies)], headers=headers) as response:
                data = await response.read()
            if response.status != 200 or (end is not None and end not in data):
                errors += 1
                first_error = first_error or f"HTTP {response.status}: {data[:160]!r}"
                continue
            latencies.append(time.perf_counter() - started)

    cpu0, wall0 = time.process_time(), time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(worker(session) for _ in range(spec["concurrency"])))
    wall = time.perf_counter() - wall0
    return {
        "latencies": latencies,
        "errors": errors,
        "first_error": first_error,
        "wall": wall,
        "client_cpu": time.process_time() - cpu0,
    }


async def _load(spec: dict[str, Any]) -> dict[str, Any]:
    if spec["mode"] in ("lean", "lean-stream"):
        return await _lean_load(spec)
    if spec["mode"] == "bodies":
        return await _post_bodies(spec)
    import openai

    client = openai.AsyncOpenAI(base_url=spec["base_url"], api_key="bench", max_retries=0, timeout=60)
    stream = spec["mode"] == "stream"
    model = spec["model"]
    latencies: list[float] = []
    errors = 0
    first_error = ""
    count = spec.get("count")
    until = time.monotonic() + spec.get("seconds", 3600.0)
    issued = 0

    async def one(i: int) -> None:
        nonlocal errors, first_error
        messages = [{"role": "user", "content": MESSAGES[i % len(MESSAGES)]}]
        started = time.perf_counter()
        try:
            if stream:
                response = await client.chat.completions.create(model=model, messages=messages, stream=True)
                async for _ in response:
                    pass
            else:
                await client.chat.completions.create(model=model, messages=messages)
        except Exception as exc:
            errors += 1
            first_error = first_error or f"{type(exc).__name__}: {str(exc)[:160]}"
            return
        latencies.append(time.perf_counter() - started)

    async def worker() -> None:
        nonlocal issued
        while time.monotonic() < until and (count is None or issued < count):
            issued += 1
            await one(issued)

    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(spec["concurrency"])))
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    await client.close()
    return {
        "latencies": latencies,
        "errors": errors,
        "first_error": first_error,
        "wall": wall,
        "client_cpu": cpu,
    }


def run_load(
    base_url: str, mode: str, concurrency: int, *, count: int | None = None, seconds: float | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "base_url": base_url,
        "mode": mode,
        "concurrency": concurrency,
        "model": MAIN_MODEL,
    }
    return _load_worker(spec, count=count, seconds=seconds)


def post_bodies(
    url: str, bodies: list[str], concurrency: int, *, count: int | None = None, seconds: float | None = None
) -> dict[str, Any]:
    """``bodies`` (JSON texts) posted round robin to ``url`` by the lean load generator, in a child
    process: any route's load (``bench_gateway.py``'s), measured as the chat route's is."""
    spec: dict[str, Any] = {"mode": "bodies", "url": url, "bodies": bodies, "concurrency": concurrency}
    return _load_worker(spec, count=count, seconds=seconds)


def _load_worker(spec: dict[str, Any], *, count: int | None, seconds: float | None) -> dict[str, Any]:
    """The load of ``spec`` run in a child process (so it takes no CPU of this one's)."""
    if count is not None:
        spec["count"] = count
    if seconds is not None:
        spec["seconds"] = seconds
    out = subprocess.run(
        [sys.executable, __file__, "--load-worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- client CPU per upstream call ---------------------------------------------------------------------


async def _client_cpu(url: str, n: int) -> dict[str, float | str]:
    body = {"model": MAIN_MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16}
    results: dict[str, float | str] = {}
    import httpx as httpx1
    import httpx2

    for name, module in (("httpx2 (raw)", httpx2), ("httpx 0.28 (raw)", httpx1)):
        async with module.AsyncClient() as client:
            for _ in range(50):
                await client.post(url, json=body)
            cpu0 = time.process_time()
            for _ in range(n):
                response = await client.post(url, json=body)
                response.json()
            results[name] = (time.process_time() - cpu0) / n * 1e6
    if importlib.util.find_spec("aiohttp") is None:
        results["aiohttp"] = "not installed"
    else:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            for _ in range(50):
                async with session.post(url, json=body) as r:
                    await r.read()
            cpu0 = time.process_time()
            for _ in range(n):
                async with session.post(url, json=body) as r:
                    await r.json()
            results["aiohttp (raw)"] = (time.process_time() - cpu0) / n * 1e6
    from guardcache.llm.client import ChatClient
    from guardcache.llm.default_pools import default_pool

    client = ChatClient(url.rsplit("/chat/completions", 1)[0], model=MAIN_MODEL)
    chosen = {"H1Pool": "h1"}.get(type(default_pool()).__name__, "httpx2")
    msgs = [{"role": "user", "content": "hello"}]
    for _ in range(50):
        await client.complete(msgs, max_tokens=16)
    cpu0 = time.process_time()
    for _ in range(n):
        await client.complete(msgs, max_tokens=16)
    results[f"ChatClient.complete ({chosen}, the chosen transport)"] = (time.process_time() - cpu0) / n * 1e6
    from guardcache.rails.main_llm import ClientLLM, StreamTotals

    main = ClientLLM(client, {"max_tokens": 16})
    cpu0 = time.process_time()
    for _ in range(n):
        async for _ in main.stream(msgs, StreamTotals()):
            pass
    results[f"ClientLLM.stream (SSE over {chosen})"] = (time.process_time() - cpu0) / n * 1e6
    from guardcache.llm.default_pools import aclose_all

    await aclose_all()
    return results


# -- the profiled server (a child process) ------------------------------------------------------------


def serve_profiled(config: str, out: str) -> None:
    """Run the server; profile (cProfile, CPU time) between SIGUSR1 and SIGUSR2, which writes the
    profile: start-up, imports and the warm-up pass stay out of it."""
    import cProfile

    import uvicorn

    from guardcache.server.app import create_app
    from guardcache.server.connections import HeadLimits
    from guardcache.server.request_id import configure_logging
    from guardcache.server.settings import ServeSettings

    configure_logging("info")
    settings = ServeSettings(config=config, port=0)
    app = create_app(settings)
    profile = cProfile.Profile(time.process_time)  # CPU, not wall time (idle epoll waits are free)

    def stop(*_: object) -> None:
        profile.disable()
        profile.dump_stats(out)

    signal.signal(signal.SIGUSR1, lambda *_: profile.enable())
    signal.signal(signal.SIGUSR2, stop)
    # The protocols ``guardcache serve`` runs (head limits, the disconnect hook), not uvicorn's own.
    http = HeadLimits("auto", settings.max_header_bytes, settings.header_timeout)
    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=0, log_config=None, access_log=False, http=http, server_header=False
        )
    )
    server.run()


PACKAGES = (
    ("uvicorn + h11 (HTTP server)", ("uvicorn", "h11")),
    ("starlette (routing, responses)", ("starlette",)),
    ("httpx2/httpcore2 + anyio (upstream HTTP client)", ("httpx2", "httpcore", "anyio", "sniffio", "h2")),
    ("aiohttp + yarl + multidict (upstream HTTP client)", ("aiohttp", "yarl", "multidict")),
    ("guardcache.server", ("guardcache/server",)),
    (
        "guardcache rails/checks/cache/llm",
        ("guardcache/rails", "guardcache/checks", "guardcache/cache", "guardcache/llm"),
    ),
    ("prometheus_client", ("prometheus_client",)),
    ("json", ("json/",)),
    ("asyncio + selectors + ssl/socket", ("asyncio", "selectors", "socket")),
)


def summarize_profile(path: str, requests: int) -> str:
    import pstats

    stats = pstats.Stats(path)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values())
    groups = {name: 0.0 for name, _ in PACKAGES}
    other = 0.0
    for (filename, _, _), (_, _, tottime, _, _) in raw.items():
        for name, needles in PACKAGES:
            if any(n in filename for n in needles):
                groups[name] += tottime
                break
        else:
            other += tottime
    per = max(requests, 1)
    lines = [
        f"  profiled CPU (self time, all functions): {total:.2f} s for {requests} requests = "
        f"{total / per * 1e6:.0f} us/request (cProfile inflates it; the split is what matters)"
    ]
    for name, seconds in sorted(groups.items(), key=lambda kv: -kv[1]):
        lines.append(
            f"    {name:<48} {seconds / max(requests, 1) * 1e6:7.0f} us/request  ({seconds / total:5.1%})"
        )
    name = "other (builtins, C calls, stdlib)"
    lines.append(f"    {name:<48} {other / per * 1e6:7.0f} us/request  ({other / total:5.1%})")
    top = sorted(raw.items(), key=lambda kv: -kv[1][2])[:20]
    lines.append("  top functions by self time:")
    for (filename, line, func), (_, ncalls, tottime, _, _) in top:
        short = "/".join(filename.split("/")[-2:])
        lines.append(
            f"    {tottime / max(requests, 1) * 1e6:7.1f} us/req  {ncalls:>9} calls  {short}:{line} {func}"
        )
    return "\n".join(lines)


# -- the benchmark ------------------------------------------------------------------------------------


VARIANTS: dict[str, tuple[list[str], dict[str, str]]] = {
    # name: (serve arguments, environment)
    "h1 + httptools/uvloop": (["--http", "httptools", "--loop", "uvloop"], {}),
    "h1 + h11/asyncio": (["--http", "h11", "--loop", "asyncio"], {}),
}
"""Server set-ups compared side by side: uvicorn's HTTP parser and event loop (the upstream client
is guardcache's own h1, the one network transport). The first is what ``pip install
guardcache[server]`` runs."""


def latency_phase(main_url: str, served: dict[str, str], requests: int) -> None:
    print("\n1. What the server adds to the main model's latency (concurrency 1, 100% hits)")
    rows: dict[tuple[str, str], list[float]] = {}
    failures: dict[tuple[str, str], str] = {}
    targets = {"alone": main_url, **served}
    for _ in range(2):  # two interleaved rounds
        for mode in ("plain", "stream"):
            for target, url in targets.items():
                if mode == "stream" and target.startswith("floor"):
                    continue  # the floor proxy answers with the upstream's bytes, not a guarded stream
                got = run_load(url, mode, 1, count=requests)
                rows.setdefault((mode, target), []).extend(got["latencies"])
                failures[(mode, target)] = failures.get((mode, target)) or got["first_error"]
        for target, url in targets.items():
            rows.setdefault(("lean", target), []).extend(lean_latencies(url, requests))
    for mode in ("plain", "stream", "lean"):
        alone = rows[(mode, "alone")]
        a50 = statistics.median(alone) * 1e3
        print(f"   {mode:<6} p50 main alone {a50:6.2f} ms (p90 {pct(alone, 0.9) * 1e3:.2f} ms)")
        for name in served:
            got = rows.get((mode, name))
            if got is None:
                continue
            if not got:
                print(f"          {name:<42} every request failed ({failures[(mode, name)]})")
                continue
            s50 = statistics.median(got) * 1e3
            verdict = "PASS" if s50 - a50 <= 1.0 else "MISS"
            print(
                f"          {name:<42} p50 {s50:6.2f} ms, added {s50 - a50:+.2f} ms "
                f"(target <= 1 ms: {verdict}); p90 {pct(got, 0.9) * 1e3:.2f} ms"
            )
    print(
        "   (stream: the config checks the whole answer with its output rail, so the server sends it as "
        "one chunk while the main model alone sends one chunk per token: the client parses fewer events)\n"
        "   (lean: plain requests from http.client over one keep-alive connection, in this process: the "
        "openai client's own ~2-4 ms per call shares the 2 cores with the server and moves its p50)"
    )


def lean_latencies(base_url: str, count: int) -> list[float]:
    """Sequential plain requests over one keep-alive connection with the stdlib's http.client."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(f"{base_url}/chat/completions")
    body = json.dumps({"model": MAIN_MODEL, "messages": [{"role": "user", "content": MESSAGES[3]}]})
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    out: list[float] = []
    try:
        for i in range(count + 20):
            started = time.perf_counter()
            connection.request("POST", parts.path, body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"{base_url}: HTTP {response.status}")
            if i >= 20:  # warm-up
                out.append(time.perf_counter() - started)
    finally:
        connection.close()
    return out


def throughput_phase(
    main_url: str,
    servers: dict[str, tuple[Child, str]],
    args: argparse.Namespace,
    floors: dict[str, tuple[Child, str]] | None = None,
) -> None:
    print(f"\n2. Throughput through the server (concurrency {args.concurrency}, {args.seconds:g} s/pass)")
    guarded: dict[str, float] = {}
    for mode in ("plain", "stream", "lean"):
        direct = run_load(main_url, mode, args.concurrency, seconds=args.seconds)
        alone_rate = len(direct["latencies"]) / direct["wall"]
        print(f"   {mode}: main alone {alone_rate:7.0f} req/s")
        base: float | None = None
        for name, (server, serve_url) in servers.items():
            cpu0 = cpu_seconds(server.proc.pid)
            got = run_load(serve_url, mode, args.concurrency, seconds=args.seconds)
            cpu = cpu_seconds(server.proc.pid) - cpu0
            done = len(got["latencies"])
            if not done:
                print(f"     {name:<30} every request failed ({got['first_error']})")
                continue
            per_req = cpu / max(done, 1)
            guarded.setdefault(mode, per_req)
            base = base if base is not None else per_req
            capacity = 1 / per_req if per_req else float("inf")
            verdict = "PASS" if capacity >= 3000 else "MISS"
            print(
                f"     {name:<30} {done / got['wall']:6.0f} req/s (errors {got['errors']}), p50 "
                f"{pct(got['latencies'], 0.5) * 1e3:6.1f} ms | server CPU {per_req * 1e6:5.0f} us/request "
                f"({per_req / base:4.2f}x the first) -> {capacity:6,.0f} req/s per worker with a core "
                f"to itself (target >= 3,000: {verdict})"
            )

    print(
        "   (plain, stream: the openai client, ~4 ms of its own CPU per call: requests come a few hundred\n"
        "   a second and the server wakes up for nearly each one; lean: aiohttp, pre-encoded bodies, the\n"
        "   server kept busy, as a worker with many clients is)"
    )
    if not floors:
        return
    print("   the floor under it: uvicorn (httptools + uvloop) with no middleware, rails or metrics")
    for mode in ("plain", "lean"):
        for name, (server, url) in floors.items():
            cpu0 = cpu_seconds(server.proc.pid)
            got = run_load(url, mode, args.concurrency, seconds=args.seconds)
            done = len(got["latencies"])
            if not done:
                print(f"     {mode:<5} {name:<38} every request failed ({got['first_error']})")
                continue
            per_req = (cpu_seconds(server.proc.pid) - cpu0) / done
            first = guarded.get(mode)
            above = f"; the first set-up above: {(first - per_req) * 1e6:4.0f} us more" if first else ""
            print(f"     {mode:<5} {name:<38} server CPU {per_req * 1e6:5.0f} us/request{above}")


CANNED_FLOOR = "floor: canned JSON (no upstream call)"
PROXY_FLOOR = "floor: one upstream call on the h1 client"


def start_floors(main_url: str, python: str) -> dict[str, tuple[Child, str]]:
    """The reference servers of benchmarks/serve_floor.py, started and answering."""
    floors: dict[str, tuple[Child, str]] = {}
    script = str(Path(__file__).with_name("serve_floor.py"))
    for kind, name in (("canned", CANNED_FLOOR), ("proxy", PROXY_FLOOR)):
        child = Child([python, script, kind, "0", main_url])
        floors[name] = (child, f"http://127.0.0.1:{child.port()}/v1")
    for _, url in floors.values():
        run_load(url, "plain", 4, count=16)  # connections open, code paths warm
    return floors


def profile_phase(config: Path, tmp: str, args: argparse.Namespace) -> None:
    print(
        f"\n   Profiled server (cProfile, CPU time, concurrency {args.concurrency}, "
        f"plain, {args.seconds:g} s, the measured pass only):"
    )
    out = Path(args.profile_out or Path(tmp) / "serve.prof")
    out.unlink(missing_ok=True)
    profiled = Child([args.server_python, __file__, "--serve-profiled", str(config), str(out)])
    try:
        port = profiled.port()
        wait_ready(f"http://127.0.0.1:{port}/health/ready")
        url = f"http://127.0.0.1:{port}/v1"
        run_load(url, "plain", 4, count=len(MESSAGES) * 2)
        profiled.proc.send_signal(signal.SIGUSR1)
        got = run_load(url, "plain", args.concurrency, seconds=args.seconds)
        profiled.proc.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the dump is written in one go; let it finish
    finally:
        profiled.stop()
    print(summarize_profile(str(out), len(got["latencies"])))


def nemo_python(requested: str | None) -> str | None:
    """The interpreter of an environment with nemoguardrails: ``--nemo-python``, this one when it
    has the package, else None."""
    if requested:
        return requested
    return sys.executable if importlib.util.find_spec("nemoguardrails") else None


def nemo_phase(config: Path, main_url: str, args: argparse.Namespace) -> None:
    """NeMo Guardrails' own server on the same config folder, emulators and load, beside guardcache's
    (its default set-up) in the same phase: latency at concurrency 1, then throughput and CPU."""
    print("\n4. NeMo Guardrails' server and guardcache serve, same config, emulators and workload")
    python = nemo_python(args.nemo_python)
    if python is None:
        print(
            "   nemoguardrails is not installed here: no side-by-side column (pip install nemoguardrails, "
            "or --nemo-python PATH to the python of an environment that has it)"
        )
        return
    # NeMo ships no content-safety prompts: give its config guardcache's, which are NeMo's (same file
    # format, byte-identical templates).
    prompts = Path(__file__).resolve().parents[1] / "guardcache" / "prompts" / "content_safety.yml"
    shutil.copy(prompts, config / "prompts.yml")
    version = subprocess.run(
        [python, "-c", "import nemoguardrails; print(nemoguardrails.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(
        f"   nemoguardrails {version} ({python}); both servers hold content-safety verdicts in their caches"
    )
    servers: dict[str, tuple[Child, str]] = {}
    try:
        ours = Child(
            [args.server_python, "-m", "guardcache", "serve", "--config", str(config), "--port", "0"]
        )
        theirs = Child(
            [
                python,
                "-m",
                "nemoguardrails",
                "server",
                "--config",
                str(config.parent),
                "--port",
                "0",
                "--default-config-id",
                config.name,
            ],
            env={"PYTHONPATH": ""},
        )
        for name, child in (("guardcache serve", ours), (f"nemoguardrails {version} server", theirs)):
            port = child.port(timeout=120)
            servers[name] = (child, f"http://127.0.0.1:{port}/v1")
        wait_ready(servers["guardcache serve"][1].removesuffix("/v1") + "/health/ready")
        for _, url in servers.values():  # every check cached from here on
            run_load(url, "plain", 4, count=len(MESSAGES) * 4)
        latency_phase(main_url, {n: url for n, (_, url) in servers.items()}, args.latency_requests)
        throughput_phase(main_url, servers, args)
    finally:
        for child, _ in servers.values():
            child.stop()
        prompts_copy = config / "prompts.yml"
        prompts_copy.unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float, default=6.0, help="each throughput pass (default 6)")
    parser.add_argument("--concurrency", type=int, default=32, help="throughput passes (default 32)")
    parser.add_argument("--latency-requests", type=int, default=200, help="per target and mode, per round")
    parser.add_argument("--profile", action="store_true", help="add a throughput pass under cProfile")
    parser.add_argument(
        "--server-python",
        default=sys.executable,
        help="the interpreter running the server (e.g. a venv with uvloop and httptools, which uvicorn "
        "then uses)",
    )
    parser.add_argument(
        "--variants",
        nargs="*",
        choices=list(VARIANTS),
        help="server set-ups for phases 1-2 (default: all, side by side)",
    )
    parser.add_argument("--profile-out", help="keep the server's profile in this file (pstats)")
    parser.add_argument("--phases", default="1234", help="which phases to run (default 1234)")
    parser.add_argument(
        "--nemo-python",
        help="phase 4: the python of an environment with nemoguardrails (default: this one, if it has it)",
    )
    parser.add_argument("--load-worker", help=argparse.SUPPRESS)
    parser.add_argument("--serve-profiled", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load_worker:
        print(json.dumps(asyncio.run(_load(json.loads(args.load_worker)))))
        return 0
    if args.serve_profiled:
        serve_profiled(*args.serve_profiled)
        return 0
    if args.quick:
        args.seconds, args.latency_requests = 3.0, 100

    from guardcache.emulator import EmulatorConfig, EmulatorProcess, LatencyConfig

    print(describe_speed())
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores; server: {args.server_python}")
    fast = LatencyConfig(time_scale=0)
    with (
        EmulatorProcess(EmulatorConfig(port=0, model=MAIN_MODEL, latency=fast)) as main_emu,
        EmulatorProcess(EmulatorConfig(port=0, latency=fast)) as guard_emu,
        tempfile.TemporaryDirectory() as tmp,
    ):
        main_url = f"http://127.0.0.1:{main_emu.port}/v1"
        config = write_config(Path(tmp) / "bench", main_url, f"http://127.0.0.1:{guard_emu.port}/v1")
        if "1" in args.phases or "2" in args.phases:
            chosen = {name: VARIANTS[name] for name in VARIANTS if not args.variants or name in args.variants}
            servers: dict[str, tuple[Child, str]] = {}
            floors: dict[str, tuple[Child, str]] = {}
            try:
                for name, (extra_args, env) in chosen.items():
                    cmd = [args.server_python, "-m", "guardcache", "serve", "--config", str(config)]
                    server = Child([*cmd, "--port", "0", *extra_args], env=env)
                    port = server.port()
                    servers[name] = (server, f"http://127.0.0.1:{port}/v1")
                    wait_ready(f"http://127.0.0.1:{port}/health/ready")
                    # every check cached from here on
                    run_load(servers[name][1], "plain", 4, count=len(MESSAGES) * 4)
                floors = start_floors(main_url, args.server_python)
                guard_calls = guard_emu.stats().requests_by_endpoint.get("chat.completions", 0)
                if "1" in args.phases:
                    proxy = {n: url for n, (_, url) in floors.items() if n == PROXY_FLOOR}
                    served = {n: url for n, (_, url) in servers.items()}
                    latency_phase(main_url, {**served, **proxy}, args.latency_requests)
                if "2" in args.phases:
                    throughput_phase(main_url, servers, args, floors)
                extra = guard_emu.stats().requests_by_endpoint.get("chat.completions", 0) - guard_calls
                print(
                    f"   guard backend calls during the measured passes: {extra} (every check a hit: these "
                    "are readiness probes, a real request to each guard model every 30 s, serve's default)"
                )
            finally:
                for server, _ in [*servers.values(), *floors.values()]:
                    server.stop()
        if "3" in args.phases:
            print("\n3. Client CPU per upstream call (this process, sequential, to the main emulator)")
            for name, value in asyncio.run(_client_cpu(f"{main_url}/chat/completions", 500)).items():
                print(f"   {name:<50} {value if isinstance(value, str) else f'{value:6.0f} us'}")
            if args.profile:
                profile_phase(config, tmp, args)
        if "4" in args.phases:
            nemo_phase(config, main_url, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
