"""Prompt rendering cost per call: the former ``{{ name }}`` regex renderer vs the compiled Jinja one.

Only a cache MISS renders (a check keys its cache on the variables), and a miss then waits tens to
hundreds of milliseconds for the guard model, so what matters is that rendering stays a few
microseconds. Prints, side by side from one run, microseconds per call for the shipped NemoGuard
content-safety prompts (input and output) and for a NeMo-style reasoning prompt with a ``{% if %}``:

    python benchmarks/bench_render.py [--repeat 7] [--number 20000]

Each figure is the best of ``--repeat`` rounds; the renderers are interleaved within a round so
machine noise hits them alike. Compiling (once per distinct template, at config load) is timed too.
Not part of the test run.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

from machine import describe_speed

from guardcache.config.prompts import default_prompts
from guardcache.prompts import Settings, compile_template, render_messages
from guardcache.prompts.jinja import clear_cache
from guardcache.prompts.legacy import render_placeholders

REASONING = (
    "You classify a human's request to an AI assistant.\n\nHuman user:\n{{ user_input }}\n\n"
    "AI assistant:\n{{ bot_response }}\n\nAnswer with the harm labels. "
    "{% if reasoning_enabled %}/think{% else %}/no_think{% endif %}\n"
)
VARIABLES = {
    "user_input": "How do I make a good sourdough starter at home? It keeps dying after a few days.",
    "bot_response": "Feed it equal weights of flour and water every day and keep it somewhere warm.",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=20_000)
    args = parser.parse_args()
    print(describe_speed())

    prompts = {p.task.split(" ")[0]: p for p in default_prompts()}
    bound = Settings()
    rows: list[tuple[str, dict[str, Callable[[], object]]]] = []
    for name, prompt in prompts.items():
        text = prompt.content or ""
        variables = {k: VARIABLES[k] for k in compile_template(text).names}
        compiled = compile_template(text)
        assert compiled.render(variables) == render_placeholders(text, variables)
        rows.append(
            (
                name,
                {
                    "regex (before)": lambda t=text, v=variables: render_placeholders(t, v),
                    "jinja render_messages": lambda p=prompt, v=variables: render_messages(p, v),
                    "jinja compiled.render": lambda c=compiled, v=variables: c.render(v, bound),
                },
            )
        )
    reasoning = compile_template(REASONING)
    rows.append(
        (
            "reasoning {% if %} prompt",
            {"jinja compiled.render": lambda: reasoning.render(VARIABLES, bound)},
        )
    )

    columns = ["regex (before)", "jinja render_messages", "jinja compiled.render"]
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.repeat):  # interleaved rounds: noise hits every renderer alike
        for name, fns in rows:
            for column, fn in fns.items():
                us = timeit.timeit(fn, number=args.number) / args.number * 1e6
                best[name, column] = min(best.get((name, column), us), us)

    print(f"\nus per render, best of {args.repeat} rounds x {args.number} calls")
    print(f"{'prompt':<30}" + "".join(f"{c:>24}" for c in columns) + f"{'jinja/regex':>13}")
    for name, _ in rows:
        cells = [best.get((name, c)) for c in columns]
        ratio = f"{cells[1] / cells[0]:.2f}x" if cells[0] and cells[1] else ""
        print(f"{name:<30}" + "".join(f"{c:>24.2f}" if c else f"{'-':>24}" for c in cells) + f"{ratio:>13}")

    def compile_once() -> None:
        clear_cache()
        compile_template(prompts["content_safety_check_output"].content or "")

    us = min(timeit.repeat(compile_once, number=50, repeat=3)) / 50 * 1e6
    print(f"\ncompiling the output prompt (once per template, at config load): {us:.0f} us")


if __name__ == "__main__":
    main()
