"""What the guard adds to a turn at 100% cache hits: a guarded ``LLMRails`` turn beside the same turn
with no rails, on the same main-model client, side by side in one run (issue 33's library target).

The main model and the content-safety NIM are one emulator in a CHILD process (``time_scale=0``), so
this process's CPU is the library's own work: the main call on guardcache's HTTP client, and for the
guarded turn the content-safety input and output checks, both cache hits (checked: the emulator serves
exactly one request per timed turn, the main call). Variants:

  bare      ``LLMRails`` with only a main model: ``generate_async(messages=[user])``
  guarded   the same, plus ``content safety check input/output $model=content_safety`` (cached)
  checks    the two cached checks alone, nothing else of a turn: ``check_async([user, assistant])``
            of a config with both rails and no main model (the answer the guarded turn got)
  check     ``check_async([user])`` of a config with only the input rail: one cached check

Each variant runs a block of ``--block`` turns in turn, the order rotating from block to block, so a
burst of load on the shared machine hits all of them alike. Per variant: wall p50/p90 over all turns,
and CPU per turn (``time.process_time``: the cost on a core of its own), the median of its blocks.

The overhead is guarded - bare. The target: overhead <= 10% of the bare turn (wall p50: what a user
waits for a turn, where the main call's round trip is part of the bare turn), and ``check`` p50 <= 8 us.
CPU alone is shown too, with its floor: a bare turn's CPU here is only the client's side of one
loopback call, and ``checks`` (the two verdicts with nothing around them) / bare is what no turn
runner can go below.

    python benchmarks/bench_overhead.py              # ~1 min
    python benchmarks/bench_overhead.py --rounds 41 --turns 400

Not part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from e2e_support import pct
from guarded_config import config_yaml
from machine import speed_probe_us

from guardcache import LLMRails, RailsConfig
from guardcache.demo.workload import message_pool
from guardcache.emulator import EmulatorConfig, EmulatorProcess, LatencyConfig


def config(url: str, *, inputs: bool, outputs: bool, main: bool = True) -> RailsConfig:
    """One config of the run: a main model on ``url``, and the content-safety rails asked for."""
    text = config_yaml(url, inputs=inputs, outputs=outputs, main=main)
    return RailsConfig.from_content(yaml_content=text, source="<bench_overhead>")


Turn = Callable[[str], Awaitable[Any]]


async def timed_block(turn: Turn, texts: list[str], walls: list[float]) -> float:
    """Run ``turn`` once per text; append each wall time (us) and return CPU us per turn."""
    clock = time.perf_counter
    cpu0 = time.process_time()
    for text in texts:
        t0 = clock()
        await turn(text)
        walls.append((clock() - t0) * 1e6)
    return (time.process_time() - cpu0) * 1e6 / len(texts)


async def run(args: argparse.Namespace) -> None:
    probe0 = speed_probe_us()
    texts = [text for text, unsafe in message_pool() if not unsafe][: args.turns]
    emu = EmulatorConfig(latency=LatencyConfig(time_scale=0.0))
    async with EmulatorProcess(emu) as nim:
        url = nim.base_url
        bare = LLMRails(config(url, inputs=False, outputs=False))
        guarded = LLMRails(config(url, inputs=True, outputs=True))
        both = LLMRails(config(url, inputs=True, outputs=True, main=False))
        checker = LLMRails(config(url, inputs=True, outputs=False, main=False))
        answers: dict[str, str] = {}

        def user(text: str) -> list[dict[str, str]]:
            return [{"role": "user", "content": text}]

        async def bare_turn(text: str) -> Any:
            return await bare.generate_async(messages=user(text))

        async def guarded_turn(text: str) -> Any:
            return await guarded.generate_async(messages=user(text))

        async def checks(text: str) -> Any:
            return await both.check_async([*user(text), {"role": "assistant", "content": answers[text]}])

        async def check(text: str) -> Any:
            return await checker.check_async(user(text))

        for text in texts:  # the answers, for the checks alone
            answers[text] = (await guarded_turn(text))["content"]
        variants: dict[str, Turn] = {
            "bare": bare_turn,
            "guarded": guarded_turn,
            "checks": checks,
            "check": check,
        }
        for turn in variants.values():  # warm: every check cached, connections open
            for text in texts:
                await turn(text)
        before = (await nim.astats(prompts=False)).requests_total
        walls: dict[str, list[float]] = {name: [] for name in variants}
        cpus: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        blocks = [texts[i : i + args.block] for i in range(0, len(texts), args.block)]
        gc.collect()
        for r in range(args.rounds):
            for b, block in enumerate(blocks):
                turn = r * len(blocks) + b
                order = names[turn % len(names) :] + names[: turn % len(names)]
                for name in order:
                    cpus[name].append(await timed_block(variants[name], block, walls[name]))
        after = (await nim.astats(prompts=False)).requests_total
        for rails in (bare, guarded, both, checker):
            await rails.aclose()
    probe1 = speed_probe_us()
    main_calls = 2 * args.rounds * len(texts)  # one per bare and per guarded turn; none for a check
    if after - before != main_calls:
        raise SystemExit(f"{after - before} NIM requests in the timed turns, not {main_calls}: not 100% hits")

    turns = args.rounds * len(texts)
    print(f"speed probe {probe0:.1f} -> {probe1:.1f} us (lower is faster); {turns} turns each")
    print(f"{'variant':<10}{'wall p50':>10}{'wall p90':>10}{'cpu/turn':>10}   (us)")
    cpu = {name: statistics.median(v) for name, v in cpus.items()}
    p50 = {name: pct(v, 0.5) for name, v in walls.items()}
    for name in names:
        print(f"{name:<10}{p50[name]:>10.1f}{pct(walls[name], 0.9):>10.1f}{cpu[name]:>10.1f}")
    over_wall = p50["guarded"] - p50["bare"]
    over_cpu = cpu["guarded"] - cpu["bare"]
    per_block = [(g - b) / b for g, b in zip(cpus["guarded"], cpus["bare"], strict=True)]
    share = 100 * over_wall / p50["bare"]
    print(f"overhead (guarded - bare), wall p50: {over_wall:.1f} us = {share:.1f}% of bare")
    print(
        f"overhead, cpu: {over_cpu:.1f} us = {100 * over_cpu / cpu['bare']:.1f}% of bare "
        f"(per-block median {100 * statistics.median(per_block):.1f}%); its floor, the two checks alone: "
        f"{cpu['checks']:.1f} us = {100 * cpu['checks'] / cpu['bare']:.1f}% of bare"
    )
    verdict = "PASS" if over_wall <= 0.10 * p50["bare"] else "FAIL"
    print(f"target overhead <= 10% of the bare turn (wall p50): {verdict}")
    verdict = "PASS" if p50["check"] <= 8.0 else "FAIL"
    print(f"target cached check_async p50 <= 8 us: {p50['check']:.1f} us {verdict}")


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--block", type=int, default=20, help="turns per block (blocks interleave)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
