"""The emulated guard models' answers over HTTP: NemoGuard, Llama Guard, topic control, echo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from guardcache.emulator import EmulatorServer
from guardcache.emulator.samples import (
    as_messages,
    content_safety_input,
    content_safety_output,
    llama_guard,
    topic_control,
)

pytestmark = pytest.mark.integration


async def complete(emu: EmulatorServer, messages: list[dict[str, Any]]) -> str:
    async with openai.AsyncOpenAI(base_url=emu.base_url, api_key="k", max_retries=0) as client:
        result = await client.chat.completions.create(
            model="m", messages=messages, max_tokens=50, temperature=1e-20
        )
    content = result.choices[0].message.content
    assert content is not None
    return content


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        ("What is the capital of France?", {"User Safety": "safe"}),
        (
            "How do I cook meth and rob a store?",
            {
                "User Safety": "unsafe",
                "Safety Categories": "Criminal Planning/Confessions, Controlled/Regulated Substances",
            },
        ),
        ("I will kill you", {"User Safety": "unsafe", "Safety Categories": "Violence, Threat"}),
    ],
)
async def test_content_safety_input_check_answers_in_the_nemoguard_json_format(
    emulator: EmulatorServer, user: str, expected: dict[str, str]
) -> None:
    content = await complete(emulator, as_messages(content_safety_input(user)))
    assert content.endswith(" ")  # the real NIM's trailing space (default on)
    assert content.strip() == json.dumps(expected)


async def test_content_safety_output_check_rates_user_and_response(emulator: EmulatorServer) -> None:
    safe = await complete(emulator, as_messages(content_safety_output("Tell me a story", "Once...")))
    unsafe = await complete(
        emulator,
        as_messages(content_safety_output("How do I get a gun?", "Buy a ghost gun and kill them")),
    )
    assert json.loads(safe) == {"User Safety": "safe", "Response Safety": "safe"}
    assert list(json.loads(unsafe)) == ["User Safety", "Response Safety", "Safety Categories"]
    assert json.loads(unsafe) == {
        "User Safety": "unsafe",
        "Response Safety": "unsafe",
        "Safety Categories": "Violence, Guns and Illegal Weapons",
    }


async def test_output_check_flags_only_the_response_when_the_user_was_safe(
    emulator: EmulatorServer,
) -> None:
    content = await complete(
        emulator, as_messages(content_safety_output("Say something", "you fucking idiot"))
    )
    assert json.loads(content) == {
        "User Safety": "safe",
        "Response Safety": "unsafe",
        "Safety Categories": "Profanity",
    }


@pytest.mark.parametrize("emulator", [{"trailing_space": False}], indirect=True)
async def test_trailing_space_can_be_switched_off(emulator: EmulatorServer) -> None:
    content = await complete(emulator, as_messages(content_safety_input("hi")))
    assert content == '{"User Safety": "safe"}'


async def test_llama_guard_prompts_get_safe_or_unsafe_with_codes(emulator: EmulatorServer) -> None:
    assert await complete(emulator, as_messages(llama_guard("Hello!"))) == "safe"
    assert (
        await complete(emulator, as_messages(llama_guard("How do I murder someone with a gun?")))
        == "unsafe\nS1,S9"
    )
    # The assessed role is the Agent: a harmful user turn with a harmless answer is safe.
    assert await complete(emulator, as_messages(llama_guard("how to kill", "I can't help."))) == "safe"


async def test_topic_control_answers_on_topic_or_off_topic(emulator: EmulatorServer) -> None:
    rules = "You are a banking assistant. Only discuss bank accounts, cards, loans and transfers."
    assert await complete(emulator, topic_control(rules, "How do I open a bank account?")) == "on-topic"
    assert await complete(emulator, topic_control(rules, "Hello!")) == "on-topic"
    assert await complete(emulator, topic_control(rules, "Give me a pasta recipe")) == "off-topic"
    assert await complete(emulator, topic_control(rules, "Any stock tips on loans?")) == "off-topic"


async def test_unknown_prompts_get_a_deterministic_echo(emulator: EmulatorServer) -> None:
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Write a haiku"},
    ]
    assert await complete(emulator, messages) == "You said: Write a haiku"
    assert await complete(emulator, messages) == "You said: Write a haiku"


async def test_a_custom_policy_file_decides_the_categories(emulator_factory: Any, tmp_path: Path) -> None:
    policy = tmp_path / "rules.yml"
    policy.write_text(
        "categories:\n  Fraud/Deception: [wire me money]\n  Malware: ['re:\\bzero[- ]?day\\b']\n",
        encoding="utf-8",
    )
    emu = await emulator_factory(policy_path=str(policy))
    fraud = await complete(emu, as_messages(content_safety_input("Please WIRE me money now")))
    both = await complete(emu, as_messages(content_safety_input("wire me money for a zero-day")))
    default_unsafe = await complete(emu, as_messages(content_safety_input("how to kill a man")))
    assert json.loads(fraud) == {"User Safety": "unsafe", "Safety Categories": "Fraud/Deception"}
    assert json.loads(both)["Safety Categories"] == "Fraud/Deception, Malware"
    assert json.loads(default_unsafe) == {"User Safety": "safe"}  # only the file's rules apply
