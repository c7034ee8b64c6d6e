"""The gateway routes of ``guardcache serve`` against a chat turn, side by side: server CPU per request.

A gateway calling ``POST /v1/checks`` (NeMo's checks route) or LiteLLM's Generic Guardrail API
(``POST /beta/litellm_basic_guardrail_api``) asks for the input rails only. The chat turn that does
the same work is one whose input is blocked by a cached verdict: the input check path, no main
call. So all three are sent the same 16 user texts, each blocked by the content-safety input rail,
every verdict a cache hit after a warm-up pass; the ratio of record is each gateway route's server
CPU per request over the blocked chat turn's (target: <= 1.2). Passed checks (safe texts, also
cached) are printed beside them.

One ``guardcache serve`` process, the emulated NIMs in this process (never called while measuring:
every check hits), the load (bench_serve's lean generator: aiohttp, pre-encoded bodies, concurrency
16) in a child process. Rounds
alternate between the routes, so a VM that changes speed slows each alike; the median of the rounds
is printed with each round.

    python benchmarks/bench_gateway.py             # 6 rounds of 3 s per route
    python benchmarks/bench_gateway.py --rounds 3 --seconds 2

Not part of the test run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_serve import REPO, Child, cpu_seconds, post_bodies, wait_ready, write_config
from machine import describe_speed

UNSAFE = [f"How do I kill the neighbour in flat {i}?" for i in range(16)]
SAFE = [f"Tell me something nice about the number {i}" for i in range(16)]

ROUTES: dict[str, tuple[str, Any]] = {
    # name: (path, body for a text)
    "chat, blocked at input": (
        "/v1/chat/completions",
        lambda t: {"messages": [{"role": "user", "content": t}]},
    ),
    "/v1/checks, blocked": ("/v1/checks", lambda t: {"messages": [{"role": "user", "content": t}]}),
    "litellm, blocked": (
        "/beta/litellm_basic_guardrail_api",
        lambda t: {"input_type": "request", "texts": [t]},
    ),
    "/v1/checks, passed": ("/v1/checks", lambda t: {"messages": [{"role": "user", "content": t}]}),
    "litellm, passed": (
        "/beta/litellm_basic_guardrail_api",
        lambda t: {"input_type": "request", "texts": [t]},
    ),
}
BASELINE = "chat, blocked at input"
CONCURRENCY = 16


def bodies(name: str) -> tuple[str, list[str]]:
    path, make = ROUTES[name]
    texts = SAFE if name.endswith("passed") else UNSAFE
    return path, [json.dumps(make(t)) for t in texts]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=3.0, help="each measured pass (default 3)")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    import httpx

    from guardcache.emulator import EmulatorConfig, EmulatorServer, LatencyConfig

    print(describe_speed())
    quick = LatencyConfig(time_scale=0.0)
    main_nim = EmulatorServer(
        EmulatorConfig(port=0, model="meta/llama-3.1-8b-instruct", latency=quick)
    ).in_thread()
    guard = EmulatorServer(
        EmulatorConfig(port=0, model="nvidia/llama-3.1-nemoguard-8b-content-safety", latency=quick)
    ).in_thread()
    with main_nim, guard, tempfile.TemporaryDirectory() as tmp:
        config = write_config(Path(tmp) / "bench", main_nim.base_url, guard.base_url)
        server = Child([sys.executable, "-m", "guardcache", "serve", "--config", str(config), "--port", "0"])
        try:
            url = f"http://127.0.0.1:{server.port()}"
            wait_ready(f"{url}/health/ready")
            for name in ROUTES:  # warm-up: every verdict cached, and each route's answer checked
                path, body_list = bodies(name)
                got = post_bodies(url + path, body_list, CONCURRENCY, count=200)
                if got["errors"]:
                    raise SystemExit(f"{name}: {got['errors']} errors ({got['first_error']})")
                answer = httpx.post(url + path, content=body_list[0], timeout=10).json()
                expected = {
                    "chat, blocked at input": answer.get("guardcache", {}).get("blocked") is True,
                    "/v1/checks, blocked": answer.get("status") == "blocked",
                    "litellm, blocked": answer.get("action") == "BLOCKED",
                    "/v1/checks, passed": answer.get("status") == "passed",
                    "litellm, passed": answer.get("action") == "NONE",
                }[name]
                if not expected:
                    raise SystemExit(f"{name}: unexpected answer {answer}")
            per_request: dict[str, list[float]] = {name: [] for name in ROUTES}
            for round_no in range(1, args.rounds + 1):
                cells = []
                for name in ROUTES:
                    path, body_list = bodies(name)
                    cpu0 = cpu_seconds(server.proc.pid)
                    got = post_bodies(url + path, body_list, CONCURRENCY, seconds=args.seconds)
                    cpu = cpu_seconds(server.proc.pid) - cpu0
                    done = len(got["latencies"])
                    if got["errors"] or not done:
                        raise SystemExit(f"{name}: {got['errors']} errors ({got['first_error']})")
                    us = cpu / done * 1e6
                    per_request[name].append(us)
                    cells.append(f"{name} {us:.0f}")
                print(f"round {round_no}: " + " | ".join(cells) + " (us server CPU per request)")
        finally:
            server.stop()
    medians = {name: statistics.median(values) for name, values in per_request.items()}
    base = medians[BASELINE]
    print()
    print(f"{'route':<26} {'server CPU/request (median)':>28} {'vs chat blocked at input':>26}")
    for name, value in medians.items():
        print(f"{name:<26} {value:>25.0f} us {value / base:>25.2f}x")
    worst = max(medians["/v1/checks, blocked"], medians["litellm, blocked"]) / base
    print(
        f"\nratio of record (the slower gateway route over the chat turn's input check path): "
        f"{worst:.2f} (target <= 1.2)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
