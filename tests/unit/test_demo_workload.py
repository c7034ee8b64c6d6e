"""The demo's workload against the emulated guard models: each message that should be refused is
refused by exactly ONE rail of the demo's config (so the per-rail counts cannot depend on which of
the parallel input rails answers first), and every other message passes every rail."""

from __future__ import annotations

import pytest
import yaml

from guardcache.cache.keys import normalize_text
from guardcache.config import RailsConfig
from guardcache.demo.runner import CONFIG_DIR, GUARDS, demo_config, emulator_configs
from guardcache.demo.workload import BLOCKED_KINDS, build_workload, counts, message_pool, message_pool_kinds
from guardcache.emulator import EmulatorConfig, Policy
from guardcache.emulator.model import GuardModel
from guardcache.emulator.tokens import Tokenizer
from guardcache.flows.topic_safety import build_messages

POLICY = Policy.default()
MODEL = GuardModel(POLICY)
RULES = yaml.safe_load((CONFIG_DIR / "prompts.yml").read_text(encoding="utf-8"))["prompts"][0]["content"]


def _main_max_tokens() -> int:
    data = yaml.safe_load((CONFIG_DIR / "config.yml").read_text(encoding="utf-8"))
    return int(next(m for m in data["models"] if m["type"] == "main")["parameters"]["max_tokens"])


def reply(text: str) -> str:
    """What the emulated main model answers: the echo, cut at the demo's max_tokens."""
    tokens = Tokenizer(EmulatorConfig().chars_per_token).tokenize(f"You said: {text}")
    return "".join(tokens[: _main_max_tokens()])


def rails_blocking(text: str) -> list[str]:
    """The workload kinds whose rail blocks a turn sending ``text``: the input rails judge the
    normalized text; the output rail judges the reply of a turn they let through (the main model gets
    the text as sent, so an extra space moves where its reply is cut)."""
    judged = normalize_text(text)
    topic = MODEL.decide(build_messages([{"role": "system", "content": RULES}], {"user_input": judged}))
    found = [
        kind
        for kind, hit in (
            ("unsafe", bool(POLICY.violations(judged))),
            ("off_topic", topic.content.strip() == "off-topic"),
            ("jailbreak", MODEL.classify_jailbreak(judged)[0]),
        )
        if hit
    ]
    if not found and POLICY.violations(normalize_text(reply(text))):
        found.append("cut_reply")
    return found


@pytest.mark.parametrize(("text", "kind"), message_pool_kinds())
def test_each_pool_message_is_refused_by_its_rail_only(text: str, kind: str) -> None:
    assert rails_blocking(text) == ([] if kind == "safe" else [kind])


def test_every_turn_is_labelled_by_the_rail_that_refuses_it() -> None:
    workload = build_workload(1000, seed=3)
    assert any("  " in t.text for t in workload) and any(t.unique for t in workload)
    for turn in set(workload):  # one-off messages and whitespace variants included
        assert rails_blocking(turn.text) == ([] if turn.kind == "safe" else [turn.kind]), turn


def test_the_workload_has_every_kind_and_is_deterministic() -> None:
    workload = build_workload(3000)
    n = counts(workload)
    assert workload == build_workload(3000)
    assert all(n[kind] > 20 for kind in BLOCKED_KINDS), n
    assert sum(n[kind] for kind in BLOCKED_KINDS) < 0.15 * len(workload)
    assert 600 < n["unique"] < 900
    assert sum(unsafe for _, unsafe in message_pool()) == sum(k == "unsafe" for _, k in message_pool_kinds())


@pytest.mark.parametrize("cache", [True, False])
def test_demo_config_is_the_nemoguards_folder_with_caches_switched(cache: bool) -> None:
    urls = {e: f"http://127.0.0.1:{9000 + i}/v1" for i, e in enumerate(emulator_configs(0))}
    config = demo_config(urls, cache=cache, log_interval=2.5)
    on_disk = RailsConfig.from_path(CONFIG_DIR)
    assert config.model_types == on_disk.model_types == ["main", *GUARDS]
    assert config.rails.input.parallel
    assert [r.text for r in config.rails.input.flow_refs()] == [
        "content safety check input $model=content_safety",
        "topic safety check input $model=topic_control",
        "jailbreak detection model",
    ]
    assert [r.text for r in config.rails.output.flow_refs()] == [
        "content safety check output $model=content_safety"
    ]
    assert config.rails.config.jailbreak_detection.url == f"{urls['jailbreak_detection']}/classify"
    for guard in GUARDS:
        settings = config.model(guard).cache
        assert settings.enabled is cache
        if cache:
            assert settings.maxsize == 10000
            assert settings.stats.enabled and settings.stats.log_interval == 2.5
    assert config.prompt_for("topic_safety_check_input", "topic_control").content == RULES
