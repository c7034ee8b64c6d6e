"""What OpenTelemetry tracing costs a cached turn: off, off with opentelemetry imported, on with an SDK
provider whose processor drops every span, and a build without the hooks, side by side in one run.

The turn: ``LLMRails.check_async([user, assistant])`` of a config with content safety on the input
and the output (two cached checks per turn, both hits; an in-process emulated NIM answers the warm-up
only, and the timed loops make no backend call: checked). Variants, in interleaved rounds (the order
rotates from round to round, so load on the host hits them alike):

  no hooks     the tracing hooks taken out: ``request_scope.__enter__/__exit__``, ``Rail.run`` and
               ``checks.check.run_cached`` recompiled from their source without the lines that call
               ``guardcache.tracing`` (what the code was before the hooks); opentelemetry not imported
  off          the hooks in place, ``opentelemetry.trace`` not in ``sys.modules`` (taken out for the
               variant's block): a turn costs one dictionary lookup
  off+otel     opentelemetry imported, no provider set: a turn reads the global provider (None)
  on (drop)    an SDK ``TracerProvider`` with one ``SpanProcessor`` that drops every span: the spans
               are made (turn + 2 rails per turn), their attributes set, nothing is exported

Prints the median (and min) over rounds of microseconds per cached turn (wall clock, one turn at a
time on one loop), the ratio of each median to "no hooks", and the per-round ratio's median.

    python benchmarks/bench_tracing.py              # ~30 s
    python benchmarks/bench_tracing.py --quick      # ~5 s smoke

Needs the ``otel`` extra and opentelemetry-sdk (both in ``dev``). Not part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import statistics
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from typing import Any

from guardcache import LLMRails, RailsConfig, tracing
from guardcache.checks import check as check_module
from guardcache.emulator import EmulatorServer
from guardcache.llm import records
from guardcache.rails import rail as rail_module
from guardcache.testing.pytest_plugin import TEST_EMULATOR_CONFIG

TEXTS = [
    "How do I bake sourdough bread?",
    "What is the capital of France?",
    "Recommend a book about the sea.",
    "How long should I boil an egg?",
    "Explain photosynthesis simply.",
    "What are good stretches after running?",
    "How do plants drink water?",
    "Write a haiku about autumn.",
]
REPLY = "Here is a short and friendly answer."


def config(url: str) -> RailsConfig:
    return RailsConfig.from_content(
        yaml_content=f"""
models:
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    parameters: {{base_url: "{url}"}}
rails:
  input: {{flows: [content safety check input $model=content_safety]}}
  output: {{flows: [content safety check output $model=content_safety]}}
"""
    )


# -- a build without the hooks --------------------------------------------------------------------


def without_hooks(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` recompiled from its source minus the lines calling ``guardcache.tracing`` (and an
    ``if`` left with no body by that), in its own module's globals."""
    lines = textwrap.dedent(inspect.getsource(function)).splitlines()
    kept: list[str] = []
    for line in lines:
        if "tracing." in line:
            indent = len(line) - len(line.lstrip())
            if (
                kept
                and kept[-1].lstrip().startswith("if ")
                and len(kept[-1]) - len(kept[-1].lstrip()) < indent
            ):
                kept.pop()
            continue
        kept.append(line)
    namespace: dict[str, Any] = {}
    exec(
        compile("\n".join(kept), f"<{function.__qualname__} without hooks>", "exec"),
        function.__globals__,
        namespace,
    )
    hookless: Callable[..., Any] = namespace[function.__name__]
    return hookless


ORIGINAL = {
    "enter": records.request_scope.__enter__,
    "exit": records.request_scope.__exit__,
    "rail": rail_module.Rail.run,
    "run_cached": check_module.run_cached,
}
HOOKLESS = {
    "enter": without_hooks(records.request_scope.__enter__),
    "exit": without_hooks(records.request_scope.__exit__),
    "rail": without_hooks(rail_module.Rail.run),
    "run_cached": without_hooks(check_module.run_cached),
}


def use(functions: dict[str, Any]) -> None:
    records.request_scope.__enter__ = functions["enter"]  # type: ignore[method-assign]
    records.request_scope.__exit__ = functions["exit"]  # type: ignore[method-assign]
    rail_module.Rail.run = functions["rail"]  # type: ignore[method-assign]
    check_module.run_cached = functions["run_cached"]


# -- the provider states ----------------------------------------------------------------------------


class Otel:
    """Switches between: not imported (taken out of sys.modules), imported without a provider, and an
    SDK provider whose only processor drops every span."""

    def __init__(self) -> None:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
        from opentelemetry.util._once import Once

        class Drop(SpanProcessor):
            def on_start(self, span: Any, parent_context: Any = None) -> None:
                pass

            def on_end(self, span: Any) -> None:
                pass

        self.trace, self.once = trace, Once
        self.provider = TracerProvider()
        self.provider.add_span_processor(Drop())
        self.hidden: dict[str, Any] = {}

    def _set(self, provider: Any) -> None:
        self.trace._TRACER_PROVIDER_SET_ONCE = self.once()
        self.trace._TRACER_PROVIDER = None
        if provider is not None:
            self.trace.set_tracer_provider(provider)

    def state(self, name: str) -> None:
        sys.modules.update(self.hidden)
        self.hidden.clear()
        self._set(self.provider if name == "on (drop)" else None)
        if name in ("no hooks", "off"):
            self.hidden = {m: mod for m, mod in sys.modules.items() if m.startswith("opentelemetry")}
            for m in self.hidden:
                del sys.modules[m]
        tracing.refresh()


VARIANTS = ("no hooks", "off", "off+otel", "on (drop)")


async def block(rails: LLMRails, turns: Sequence[list[dict[str, str]]], n: int) -> float:
    """Microseconds per turn over ``n`` sequential cached turns."""
    k = len(turns)
    started = time.perf_counter()
    for i in range(n):
        await rails.check_async(turns[i % k])
    return (time.perf_counter() - started) / n * 1e6


async def run(args: argparse.Namespace) -> None:
    server = EmulatorServer(TEST_EMULATOR_CONFIG)
    await server.start()
    try:
        rails = LLMRails(config(server.base_url))
        turns = [[{"role": "user", "content": t}, {"role": "assistant", "content": REPLY}] for t in TEXTS]
        for t in turns:  # warm: every check of every turn in the cache
            await rails.check_async(t)
        before = (await server.astats(prompts=False)).requests_total
        otel = Otel()
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        gc.collect()
        for r in range(args.rounds):
            order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]
            for variant in order:
                otel.state(variant)
                use(HOOKLESS if variant == "no hooks" else ORIGINAL)
                await block(rails, turns, args.turns // 10)  # settle
                times[variant].append(await block(rails, turns, args.turns))
        otel.state("off")
        use(ORIGINAL)
        after = (await server.astats(prompts=False)).requests_total
        assert after == before, f"the timed turns made {after - before} backend calls"
        assert rails.explain().cache_hits == 2
    finally:
        await server.stop()

    base = times["no hooks"]
    print(
        f"cached check_async turn (2 cached checks), {args.rounds} rounds x {args.turns} turns, interleaved"
    )
    print(f"{'variant':<12} {'us/turn p50':>12} {'min':>8} {'vs no hooks':>12} {'per-round ratio':>16}")
    for variant in VARIANTS:
        ts = times[variant]
        ratio = statistics.median(ts) / statistics.median(base)
        per_round = statistics.median(t / b for t, b in zip(ts, base, strict=True))
        p50 = statistics.median(ts)
        print(f"{variant:<12} {p50:>12.2f} {min(ts):>8.2f} {ratio:>11.3f}x {per_round:>15.3f}x")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--turns", type=int, default=4000)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.turns = 5, 1000
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
