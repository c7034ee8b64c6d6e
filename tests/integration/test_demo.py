"""``guardcache demo`` end to end, short and at time_scale 0: the nemoguards rails against four
emulated NIMs, per-model backend calls and cache stats, refusals by every rail, hit and miss turns
apart, and the third pass with the main model started during the input checks.

One run of the three passes (``demo``, once for the module) is read by the tests of what the passes
report; the CLI test runs its own, shorter one, through ``cli.run`` as the command does."""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
from collections.abc import Sequence

import pytest

from guardcache import REFUSAL
from guardcache.demo import cli
from guardcache.demo.report import (
    JUDGED,
    PATH_LABELS,
    one_line,
    p95_note,
    render_log_lines,
    render_refusals,
    render_table,
)
from guardcache.demo.runner import ENDPOINTS, GUARDS, RAILS, PassResult, capture_stats_lines, run_demo
from guardcache.demo.turns import PATHS, MainWork
from guardcache.demo.workload import Turn, build_workload, counts

pytestmark = pytest.mark.integration

STATS_LINE = re.compile(
    r"LFU Cache Statistics - Size: \d+/10000 \| Hits: \d+ \| Misses: \d+ \| Hit Rate: \d+\.\d\d% \| "
    r"Evictions: 0 \| Puts: \d+ \| Updates: 0"
)
# The rail that refuses each kind of turn (see guardcache.demo.workload).
RAIL_OF_KIND = {
    "unsafe": "content_safety",
    "off_topic": "topic_control",
    "jailbreak": "jailbreak_detection",
    "cut_reply": "output",
}


Demo = tuple[Sequence[Turn], PassResult, PassResult, PassResult]


@pytest.fixture(scope="module")
def demo() -> Demo:
    """The workload and its three passes (caching off, on, on + early main), run once: every test
    below only reads them. 240 turns keep each rail's refusals and the hit rates well clear of the
    bounds the tests check (at 120, caching on made 0.68x the guard calls of caching off, against a
    bound of 0.7x)."""
    workload = build_workload(240, seed=5)
    passes = asyncio.run(run_demo(workload, concurrency=16, time_scale=0, log_interval=60, in_process=True))
    return (workload, *passes)


def test_both_passes_report_per_model_stats_and_refusals_by_every_rail(demo: Demo) -> None:
    workload, off, on, early = demo
    n = counts(workload)

    # Each pass keeps the workload's first refused turn of each rail, as its user saw it.
    flows = {"content_safety": "content safety check input", "output": "content safety check output"}
    for result in (off, on, early):
        assert set(result.refusals) == set(RAILS)
        for kind, rail in RAIL_OF_KIND.items():
            first = next(i for i, t in enumerate(workload) if t.kind == kind)
            shown = result.refusals[rail]
            assert (shown.position, shown.text, shown.reply) == (first, workload[first].text, REFUSAL)
            assert shown.flow.startswith(flows.get(rail, ""))
            # What the rail judged: the user's message for an input rail, the main model's answer
            # (the emulator's echo, cut at the demo's max_tokens) for the output rail.
            if rail == "output":
                assert shown.judged_from == "main"
                assert shown.judged.startswith(f"You said: {shown.text[:40]}")
                assert len(shown.judged) < len(f"You said: {shown.text}")  # cut: what content safety flagged
            else:
                assert (shown.judged_from, shown.judged) == ("user", shown.text)
    assert on.refusals["content_safety"].categories  # content safety names what it found
    shown_text = render_refusals(on)
    assert f"user: {one_line(on.refusals['content_safety'].text)}  {JUDGED}\n" in shown_text
    assert f"bot:  {REFUSAL}" in shown_text
    # The output rail's refusal reads as what it is: the answer it judged, on one line, marked.
    judged = on.refusals["output"].judged
    assert f"main: {one_line(judged)}  {JUDGED}\n" in shown_text
    assert one_line(judged).endswith(" ".join(judged.split())[-20:])  # its end, where the cut word is

    input_blocked = n["unsafe"] + n["off_topic"] + n["jailbreak"]
    for result in (off, on):
        assert result.turns == len(workload) == len(result.latencies)
        assert result.failed_checks == 0
        for kind, rail in RAIL_OF_KIND.items():  # exactly one rail refuses each kind: no race
            assert result.refused[rail] == n[kind] > 0, (kind, result.refused)
        assert set(result.refused) == set(RAILS)
        assert result.calls["main"] == len(workload) - input_blocked
    # Caching off: every turn asks every guard (but a check cancelled by another input rail's block
    # may not have reached its server); content safety also judges each reply.
    for guard in ("topic_control", "jailbreak_detection"):
        assert len(workload) - input_blocked <= off.calls[guard] <= len(workload)
    assert off.calls["content_safety"] >= off.calls["main"] + len(workload) - input_blocked
    assert off.hits == {} and off.hit_rate() is None and off.log_lines == []

    # Caching on: one backend call per distinct check at most, hits on every guard model.
    distinct = len({" ".join(t.text.split()) for t in workload})
    for guard in GUARDS:
        assert on.calls[guard] < off.calls[guard]
        assert on.calls[guard] <= on.misses[guard]  # joiners of an in-flight check count as hits
        assert on.hits[guard] + on.misses[guard] >= distinct
        rate = on.hit_rate(guard)
        assert rate is not None and rate > 0.25
    assert on.guard_calls < 0.7 * off.guard_calls
    assert sum(on.prompt_tokens.values()) < sum(off.prompt_tokens.values())
    assert sum(off.cached_prompt_tokens.values()) > 0  # KV reuse of the guard prompts' prefix

    # The stats lines: at least the final one per guard model, each in the exact format.
    assert {model for model, _ in on.log_lines} == set(GUARDS)
    for _, line in on.log_lines:
        assert STATS_LINE.fullmatch(line), line
    finals = {model: line for model, line in on.log_lines}  # the last line of each model
    for guard in GUARDS:
        assert f"Hits: {on.hits[guard]} | Misses: {on.misses[guard]} |" in finals[guard]

    table = render_table((off, on, early))
    for label in (
        "guard backend calls",
        "content safety",
        "topic control",
        "jailbreak detection",
        "total",
        "cache hit rate",
        "latency p99",
        "wall time",
        "KV-cache reused",
        "content safety (output)",
        "main tokens on input-blocked turns",
        "main LLM call alone, p50",
        *PATH_LABELS.values(),
    ):
        assert label in table
    assert "checks without a verdict" not in table
    logged = render_log_lines(on).splitlines()
    assert len(logged) == len(on.log_lines)
    assert all(
        re.match(r"  (content safety|topic control|jailbreak detection): +LFU Cache", x) for x in logged
    )


def test_stats_lines_name_the_cache_that_logged() -> None:
    from guardcache.cache import LFUCache

    a, b = LFUCache(10, track_stats=True), LFUCache(10, track_stats=True)
    a.put("k", 1)
    with capture_stats_lines({"content_safety": a, "topic_control": b}) as handler:
        b.log_stats_now()
        a.log_stats_now()
        logging.getLogger("guardcache.cache.lfu").info("LFU Cache Statistics - from somewhere else")
    assert [model for model, _ in handler.lines] == ["topic_control", "content_safety", "?"]
    assert handler.lines[1][1].startswith("LFU Cache Statistics - Size: 1/10 |")


def test_the_cli_prints_the_table_and_each_models_stats_lines(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(
        turns=60,
        concurrency=8,
        alpha=0.99,
        unique=0.25,
        time_scale=0.0,
        log_interval=60.0,
        seed=0,
        in_process=True,
    )
    propagate = logging.getLogger("guardcache.cache.lfu").propagate
    assert cli.run(args) == 0
    assert logging.getLogger("guardcache.cache.lfu").propagate == propagate  # restored
    out = capsys.readouterr().out
    header = out.splitlines()[0]
    n = counts(build_workload(60, seed=0))
    assert header.startswith(
        f"guardcache demo: 60 turns ({n['unique']} never repeated; {n['unsafe']} unsafe, "
    )
    assert f"{n['off_topic']} off-topic, {n['jailbreak']} jailbreak attempts" in header
    assert "refused turns" in out and "caching on" in out and "+ early main" in out
    assert cli.HEADER in out  # how turns are sorted into hit and miss, before the table
    closing = " ".join(out[out.index("How to read it:") :].split("\n\n")[0].split())
    assert "max(input check, main call) + output check" in closing

    # A refused turn is shown as its user saw it: even 60 turns hold an unsafe one.
    assert n["unsafe"] >= 1
    unsafe = next(t.text for t in build_workload(60, seed=0) if t.kind == "unsafe")
    refused = out[out.index("A refused turn of each rail") :].split("\n\n")[0]
    unsafe_line = re.escape(f"user: {one_line(unsafe)}  {JUDGED}")
    assert re.search(rf"content safety \(input\): +{unsafe_line}\n", refused)
    assert f"bot:  {REFUSAL}  [" in refused
    # ... and a reply the output rail refused shows the answer it judged (60 turns hold one).
    assert n["cut_reply"] >= 1
    assert re.search(rf"content safety \(output\): +user: .*\n +main: You said: .*  {JUDGED}\n", refused)

    # Why p95 barely moves, with the numbers the table printed: p95 of all turns, and the misses
    # (turns that are not hit turns) of the caching-on pass.
    table = out.splitlines()
    p95 = next(line for line in table if line.startswith("  latency p95")).split()  # all turns' row
    hit_turns = next(line for line in table if line.startswith(PATH_LABELS["hit"])).split()
    found = re.search(r"^(Why p95|What sets p95).*?(?=\n\n)", out, re.MULTILINE | re.DOTALL)
    assert found, out
    note = " ".join(found.group(0).split())
    assert f"p95 {p95[2]} ms -> {p95[4]} ms" in note, (p95, note)
    assert f"{60 - int(hit_turns[-2])} of 60 turns" in note, (hit_turns, note)
    for label in ("content safety:", "topic control:", "jailbreak detection:"):
        assert re.search(rf"^  {label} +LFU Cache Statistics - Size: ", out, re.MULTILINE), label
    assert len(ENDPOINTS) == 4


def input_rail(rail: str | None) -> bool:
    return rail is not None and rail != "output"


def test_hit_and_miss_turns_and_the_early_main_pass_are_consistent(demo: Demo) -> None:
    workload, off, on, early = demo
    for result in (off, on, early):  # every turn sorted once, by its own record
        assert sum(result.path_turns(p) for p in PATHS) == result.turns == len(workload)
        assert sorted(result.turn_paths) == sorted(p for p in PATHS for _ in range(result.path_turns(p)))
        assert sorted(x for p in PATHS for x in result.by_path[p]) == sorted(result.latencies)
    # Caching off: no check answered from a cache, so every turn asked an input NIM.
    assert off.path_turns("input_miss") == len(workload)
    # Caching on: each distinct text that passes the input rails had a turn whose checks asked
    # (the first), and repeated ones were answered from cache.
    passing = {" ".join(t.text.split()) for t in workload if t.kind in ("safe", "cut_reply")}
    for result in (on, early):
        assert len(passing) <= result.path_turns("input_miss") < len(workload)
        assert result.path_turns("hit") > 0
        assert result.during_main is (result is early)

    # The early start changes when the main model runs, never what is refused, nor by which rail.
    assert early.refused_turns == on.refused_turns == off.refused_turns
    assert early.calls["main"] >= on.calls["main"] + early.main_work.discarded

    # Main-model work on input-blocked turns: none unless the main model started early, and then
    # at least one started main call per blocked turn whose input check went to a NIM.
    for result in (off, on):
        assert result.main_work == MainWork() and result.wasted_main_tokens == 0
        assert result.main_abandoned == 0 and result.wasted_main_share() == 0.0
    started = early.main_work.cancelled + early.main_work.discarded
    blocked_missing = sum(
        input_rail(rail) and path == "input_miss"
        for rail, path in zip(early.refused_turns, early.turn_paths, strict=True)
    )
    blocked = sum(input_rail(rail) for rail in early.refused_turns)
    assert 0 < blocked_missing <= started <= blocked
    assert early.main_abandoned <= early.main_work.cancelled  # some may not have reached the server
    assert (early.wasted_main_tokens > 0) == (early.main_abandoned + early.main_work.discarded > 0)
    share = early.wasted_main_share()
    assert share is not None and 0 < share < 0.5
    table = render_table((off, on, early))
    row = next(line for line in table.splitlines() if line.startswith("main tokens on input-blocked"))
    assert row.split()[-2:] == [str(early.wasted_main_tokens), f"({share:.2%})"]


def test_the_table_shows_each_pass_and_ratio_columns() -> None:
    def result(name: str, latencies: list[float], path: str) -> PassResult:
        return PassResult(
            name=name,
            turns=len(latencies),
            wall=1.0,
            latencies=latencies,
            calls=dict.fromkeys(ENDPOINTS, 1),
            prompt_tokens=dict.fromkeys(GUARDS, 10),
            cached_prompt_tokens=dict.fromkeys(GUARDS, 0),
            refused=dict.fromkeys(RAILS, 0),
            by_path={path: latencies},
        )

    off = result("caching off", [0.4, 0.4], "input_miss")
    on = result("caching on", [0.2, 0.2], "input_miss")
    early = result("+ early main", [0.1, 0.1], "input_miss")
    lines = render_table((off, on, early)).splitlines()
    assert lines[0].split() == ["caching", "off", "caching", "on", "+", "early", "main", "on/off", "early/on"]
    miss = lines.index(next(x for x in lines if x.startswith(PATH_LABELS["input_miss"])))
    assert lines[miss + 1].split()[-4:] == ["100", "ms", "0.50x", "0.50x"]
    hit = lines.index(next(x for x in lines if x.startswith(PATH_LABELS["hit"])))
    assert lines[hit + 1].split()[-3:] == ["-", "-", "-"]  # no hit turns: no latency, no ratio


def test_the_p95_note_says_what_the_slowest_turns_were() -> None:
    def result(name: str, by_path: dict[str, list[float]]) -> PassResult:
        latencies = [x for xs in by_path.values() for x in xs]
        return PassResult(
            name=name,
            turns=len(latencies),
            wall=1.0,
            latencies=latencies,
            calls=dict.fromkeys(ENDPOINTS, 1),
            prompt_tokens=dict.fromkeys(GUARDS, 10),
            cached_prompt_tokens=dict.fromkeys(GUARDS, 0),
            refused=dict.fromkeys(RAILS, 0),
            by_path=by_path,
        )

    off = result("caching off", {"input_miss": [0.30 + i / 10_000 for i in range(100)]})
    # 40% misses: every turn at or above p95 is one, so p95 stays where the misses are.
    on = result("caching on", {"hit": [0.1] * 60, "input_miss": [0.31 + i / 10_000 for i in range(40)]})
    note = " ".join(p95_note(off, on).split())
    assert note.startswith("Why p95 barely moves (caching off -> on: p95 310 ms -> 314 ms, 1.01x;"), note
    assert "p50 305 ms -> 100 ms, 0.33x" in note
    assert (
        "40 of 100 turns (40%) still asked a NIM" in note
        and "5 of the 5 turns at or above p95 are misses" in note
    )
    assert "hit turns' p95 is 100 ms" in note
    # 2% misses: the turns at or above p95 are hits, and the note says p95 moved.
    on = result("caching on", {"hit": [0.1 + i / 10_000 for i in range(98)], "input_miss": [0.05, 0.06]})
    note = " ".join(p95_note(off, on).split())
    assert note.startswith("Why p95 moves (caching off -> on: p95 310 ms -> 109 ms, 0.35x;"), note
    assert (
        "only 2 of 100 turns (2%) asked a NIM" in note and "5 of the 5 turns at or above p95 are hits" in note
    )


def test_every_workload_holds_an_unsafe_turn_to_show() -> None:
    for turns in (1, 2, 5, 20, 60):
        for seed in range(6):
            workload = build_workload(turns, seed=seed)
            assert len(workload) == turns and counts(workload)["unsafe"] >= 1, (turns, seed)
