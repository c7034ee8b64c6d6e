"""The shipped NemoGuard content-safety prompts are byte-exact and cannot drift silently.

The model was fine-tuned on these exact bytes and the server's KV-cache reuse needs them identical on
every request. The sha256 pins fail on any edit; the comparison with the reference file (the model's
published prompt format, kept as this suite's fixture in ``tests/fixtures``) fails if the two ever
disagree.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from guardcache.config.prompts import default_prompts
from guardcache.prompts import render, static_prefix

REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "nemoguard_content_safety_prompts.yml"

PINS = {
    "content_safety_check_input $model=content_safety": (
        "70b2d81e00e273808f1d663a4deeacae91e613edc15bf4b0f74eb5595f49c7c3"
    ),
    "content_safety_check_output $model=content_safety": (
        "a8742614c1076e75ad25e5b4d894a198f1a44b6b3ffb5a6f4aa3fb8c3b0ec3e3"
    ),
}


def defaults() -> dict[str, str]:
    return {p.task: p.content or "" for p in default_prompts()}


def test_the_defaults_are_the_two_content_safety_prompts() -> None:
    prompts = {p.task: p for p in default_prompts()}
    assert set(prompts) == set(PINS)
    check_input = prompts["content_safety_check_input $model=content_safety"]
    check_output = prompts["content_safety_check_output $model=content_safety"]
    assert check_input.output_parser == "nemoguard_parse_prompt_safety"
    assert check_output.output_parser == "nemoguard_parse_response_safety"
    assert check_input.max_tokens == check_output.max_tokens == 50
    assert (check_input.base_task, check_input.model_type) == (
        "content_safety_check_input",
        "content_safety",
    )


@pytest.mark.parametrize("task", sorted(PINS))
def test_each_template_matches_its_pinned_sha256(task: str) -> None:
    assert hashlib.sha256(defaults()[task].encode("utf-8")).hexdigest() == PINS[task]


def test_the_templates_are_byte_identical_to_the_reference_file() -> None:
    reference = yaml.safe_load(REFERENCE.read_text(encoding="utf-8"))["prompts"]
    assert {p["task"]: p["content"] for p in reference} == defaults()
    for ref, ours in zip(reference, default_prompts(), strict=True):
        assert (ref["output_parser"], ref["max_tokens"]) == (ours.output_parser, ours.max_tokens)


def test_rendering_changes_nothing_but_the_placeholders() -> None:
    user, bot = "How do I bake bread? {{ bot_response }}", "Knead the dough."
    for task, template in defaults().items():
        rendered = render(template, {"user_input": user, "bot_response": bot})
        # Independent of render(): mark the bot slot first so the user text is never rescanned.
        expected = (
            template.replace("{{ bot_response }}", "\0BOT\0")
            .replace("{{ user_input }}", user)
            .replace("\0BOT\0", bot)
        )
        assert rendered == expected
        assert rendered.count(user) == 1 and ("output" not in task or bot in rendered)
        assert rendered.startswith(static_prefix(template))


def test_the_static_prefix_comes_first_and_ends_just_before_the_user_text() -> None:
    for template in defaults().values():
        prefix = static_prefix(template)
        assert prefix.startswith("Task: Check if there is unsafe content")
        assert prefix.endswith("<BEGIN CONVERSATION>\n\nuser: ")
    # The input and output checks share that prefix byte for byte (the server reuses it for both).
    assert len({static_prefix(t) for t in defaults().values()}) == 1
