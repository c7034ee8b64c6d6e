"""NeMo's multimodal content-safety example, unchanged, through LLMRails against emulated NIMs.

``tests/fixtures/nemo_configs/content_safety_vision`` is NeMo's ``examples/configs/
content_safety_vision`` as shipped: Nemotron 3.5 Content Safety as the input rail, a ``messages:``
prompt whose one message is ``{{ user_input }}``, ``nemotron_content_safety_parse_prompt_safety``.
``emulated()`` gives its guard a vision safety-guard emulator (an image's caption, in its bytes, is
what the emulator sees in it) and its main model an emulator that takes images. Shown here:

- a user message with image parts is sent to the guard as NeMo sends it (the user's message, its
  images as ``image_url`` parts, the model's ``chat_template_kwargs``); a safe image passes and
  reaches the main model, an unsafe one blocks with its categories;
- the verdict is cached on the text and each image's digest: the same image again (even spelled
  otherwise) makes no guard call, another image, another order or another URL does;
- an answer that is no verdict blocks and is not cached;
- a malformed image, too many or too large ones are a ``ValueError`` naming the part, before any
  call; a config without a vision rail (or with a text-only rail beside it) refuses images as before;
- streaming and ``check_async`` take the same images;
- ``guardcache serve``: ``parse_chat`` reads image parts only for a config that judges them (a 400
  naming the part otherwise, or for a malformed image); a server without a vision rail answers an
  image part 400 naming it.
"""

from __future__ import annotations

import argparse
import base64
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from guardcache import LLMRails, RailsConfig
from guardcache.emulator import EmulatorConfig, EmulatorServer, LatencyConfig, emulated
from guardcache.emulator.cli import add_arguments, build_config
from guardcache.emulator.samples import data_url, image_message, png_image
from guardcache.openai_wire import RequestError
from guardcache.prompts.parts import ImageLimits
from guardcache.rails import REFUSAL
from guardcache.server.protocol import parse_chat
from tests.integration.test_serve import ServeProcess

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_configs" / "content_safety_vision"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RAIL = "content safety check input $model=content_safety"
QUESTION = "What is the surface color that the object is placed on?"
CAT = png_image("a cat sleeping on a red sofa")
OTHER_CAT = png_image("a cat sleeping on a red sofa", pixel=(0, 0, 0))
PISTOL = png_image("a pistol on a table")


def vision_config(**rails: Any) -> RailsConfig:
    config = RailsConfig.from_path(FIXTURE)
    if not rails:
        return config
    yaml = (FIXTURE / "config.yml").read_text() + "".join(f"  {k}: {v}\n" for k, v in rails.items())
    return RailsConfig.from_content(yaml, prompts=(FIXTURE / "prompts.yml").read_text())


@pytest.fixture
async def vision() -> AsyncIterator[tuple[LLMRails, dict[str, EmulatorServer]]]:
    async with emulated(vision_config(), time_scale=0) as (config, servers):
        rails = LLMRails(config)
        yield rails, servers
        await rails.aclose()


def guard_calls(servers: dict[str, EmulatorServer]) -> int:
    return servers["content_safety"].stats().requests_total


async def test_an_image_turn_is_judged_by_the_vision_guard_as_nemo_sends_it(
    vision: tuple[LLMRails, dict[str, EmulatorServer]],
) -> None:
    rails, servers = vision
    assert rails.image_limits is not None
    check = rails._runtime.input_rails[0].check
    # NeMo's request: temperature ~0, the prompt's max_tokens, the model's chat_template_kwargs.
    assert check.params == {  # type: ignore[attr-defined]
        "temperature": 1e-20,
        "chat_template_kwargs": {"enable_thinking": False, "request_categories": "/categories"},
        "max_tokens": 100,
    }
    message = image_message(QUESTION, data_url(CAT))
    reply = await rails.generate_async(messages=[message])
    assert reply == {"role": "assistant", "content": f"You said: {QUESTION}"}
    turn = rails.explain()
    (result,) = turn.checks.input
    assert result.flow == RAIL and result.allowed and not result.from_cache and result.error is None
    # The guard got the user's message, its image as an image_url part (NeMo passes the list whole to
    # the prompt's "{{ user_input }}" message); the main model got the image too.
    assert servers["content_safety"].stats().calls_for([message]) == 1
    assert servers["main"].stats().calls_for([message]) == 1

    assert await rails.generate_async(messages=[image_message(QUESTION, data_url(PISTOL))]) == {
        "role": "assistant",
        "content": REFUSAL,
    }
    blocked = rails.explain().checks.blocked_by
    assert blocked is not None and blocked.categories == ("Guns and Illegal Weapons",)
    assert servers["main"].stats().requests_total == 1  # a blocked turn never reaches the main model
    # The image alone decides: the same words with the unsafe picture block, the text is harmless.
    assert await rails.generate_async(QUESTION) == f"You said: {QUESTION}"
    assert servers["content_safety"].stats().calls_for([{"role": "user", "content": QUESTION}]) == 1


async def test_a_repeat_comes_from_the_cache_and_another_image_is_judged_anew(
    vision: tuple[LLMRails, dict[str, EmulatorServer]],
) -> None:
    rails, servers = vision
    await rails.generate_async(messages=[image_message(QUESTION, data_url(CAT))])
    assert guard_calls(servers) == 1
    # The same image again, its base64 spelled with other trailing bits and the text laid out
    # otherwise: the same judgement, no guard call.
    payload = base64.b64encode(CAT).decode()
    bare = payload.rstrip("=")
    odd = bare[:-1] + chr(ord(bare[-1]) + 1) + payload[len(bare) :]
    assert base64.b64decode(odd) == CAT
    again = image_message(f"  {QUESTION}\n", f"data:image/png;base64,{odd}")
    assert await rails.generate_async(messages=[again]) != {"role": "assistant", "content": REFUSAL}
    (hit,) = rails.explain().checks.input
    assert hit.from_cache and hit.allowed and guard_calls(servers) == 1
    assert any(call.from_cache for call in rails.explain().llm_calls)
    # Another image with the same text and caption, the same image with the parts in another order,
    # two copies of it: each is another input, judged anew.
    for other in (
        image_message(QUESTION, data_url(OTHER_CAT)),
        {
            "role": "user",
            "content": [image_message("", data_url(CAT))["content"][1], {"type": "text", "text": QUESTION}],
        },
        image_message(QUESTION, data_url(CAT), data_url(CAT)),
    ):
        calls = guard_calls(servers)
        await rails.generate_async(messages=[other])
        assert not rails.explain().checks.input[0].from_cache
        assert guard_calls(servers) == calls + 1
    # https images are keyed on their URL (never fetched): the same URL is a hit, another a call.
    url = "https://upload.wikimedia.org/wikipedia/commons/thumb/4/4f/SIG_Pro.jpg/320px-cat.jpg"
    calls = guard_calls(servers)
    for _ in range(2):
        await rails.generate_async(messages=[image_message(QUESTION, url)])
    assert guard_calls(servers) == calls + 1
    await rails.generate_async(messages=[image_message(QUESTION, url + "?v=2")])
    assert guard_calls(servers) == calls + 2
    stats = rails.model_caches["content_safety"].get_stats()
    assert stats.hits == 2 and stats.current_size == 6


async def test_an_unsafe_https_image_blocks_and_an_answer_that_is_no_verdict_is_not_cached(
    vision: tuple[LLMRails, dict[str, EmulatorServer]],
) -> None:
    rails, servers = vision
    unsafe = image_message("Is this legal to own?", "https://example.com/images/pistol.png")
    assert (await rails.check_async([unsafe])).blocked_by is not None
    guard = servers["content_safety"]
    for fault, why in (
        ("malformed_rate", "the answer has a line that is not a safety field"),  # prose
        ("duplicate_key_rate", "the answer states 'User Safety' twice"),  # safe, then unsafe
    ):
        await guard.aset_faults(**{fault: 1.0})
        message = image_message(f"A question about {fault}", data_url(CAT))
        result = await rails.check_async([message])
        assert not result.allowed and result.input[0].error == why, fault
        await guard.aset_faults(**{fault: 0.0})
        calls = guard_calls(servers)
        assert (await rails.check_async([message])).allowed  # nothing was cached: asked again
        assert guard_calls(servers) == calls + 1


async def test_streaming_and_check_async_take_the_same_images(
    vision: tuple[LLMRails, dict[str, EmulatorServer]],
) -> None:
    rails, _ = vision
    stream = rails.stream_async(messages=[image_message(QUESTION, data_url(CAT))])
    assert "".join([piece async for piece in stream]) == f"You said: {QUESTION}"
    assert stream.blocked is None
    blocked = rails.stream_async(messages=[image_message(QUESTION, data_url(PISTOL))])
    assert "".join([piece async for piece in blocked]) == REFUSAL and blocked.blocked == "input"
    result = await rails.check_async(
        [{"role": "system", "content": "You describe pictures."}, image_message(QUESTION, data_url(CAT))]
    )
    assert result.allowed and result.input[0].from_cache


@pytest.mark.parametrize(
    ("content", "where", "what"),
    [
        (
            [
                {"type": "text", "text": QUESTION},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,not base64!"}},
            ],
            "messages[0].content[1]",
            "is not valid base64",
        ),
        (
            [{"type": "image_url", "image_url": {"url": data_url(CAT, "image/jpeg")}}],
            "messages[0].content[0]",
            "is not the image/jpeg its media type says",
        ),
        (
            [{"type": "image_url", "image_url": {"url": data_url(b"%PDF-1.7", "application/pdf")}}],
            "messages[0].content[0]",
            "is not an image media type",
        ),
        (
            [{"type": "text", "text": QUESTION}, {"type": "input_audio", "input_audio": {"data": ""}}],
            "messages[0].content[1]",
            "unknown part type 'input_audio'",
        ),
        (
            [{"type": "image_url", "image_url": {"url": "http://example.com/cat.png"}}],
            "messages[0].content[0]",
            "https://",
        ),
    ],
)
async def test_a_malformed_part_is_a_value_error_naming_it_before_any_call(
    vision: tuple[LLMRails, dict[str, EmulatorServer]], content: list[Any], where: str, what: str
) -> None:
    rails, servers = vision
    for call in (
        lambda: rails.generate_async(messages=[{"role": "user", "content": content}]),
        lambda: rails.check_async([{"role": "user", "content": content}]),
    ):
        with pytest.raises(ValueError) as info:
            await call()
        assert str(info.value).startswith(f"{where}: ") and what in str(info.value)
    with pytest.raises(ValueError, match=what.replace("(", r"\(")):
        rails.stream_async(messages=[{"role": "user", "content": content}])
    assert guard_calls(servers) == 0 and servers["main"].stats().requests_total == 0


async def test_the_size_and_count_limits_come_from_the_config() -> None:
    async with emulated(vision_config(max_image_bytes=len(CAT), max_images=2), time_scale=0) as (
        config,
        servers,
    ):
        rails = LLMRails(config)
        assert (await rails.check_async([image_message(QUESTION, data_url(CAT), data_url(CAT))])).allowed
        larger = png_image("a cat sleeping on a red sofa, seen from the door")
        with pytest.raises(ValueError, match=r"^messages\[0\].content\[1\]: the image is .* over the limit"):
            await rails.check_async([image_message(QUESTION, data_url(larger))])
        with pytest.raises(ValueError, match=r"^messages\[0\].content\[3\]: more than 2 image parts"):
            await rails.check_async([image_message(QUESTION, *[data_url(CAT)] * 3)])
        with pytest.raises(
            ValueError, match=r"^messages\[0\].content\[1\]: images are only checked in the last user"
        ):
            await rails.generate_async(
                messages=[
                    image_message(QUESTION, data_url(PISTOL)),
                    {"role": "assistant", "content": "A pistol."},
                    {"role": "user", "content": "How do I clean it?"},
                ]
            )
        assert guard_calls(servers) == 1
        await rails.aclose()


async def test_a_config_without_a_vision_rail_refuses_images_as_before() -> None:
    text_only = RailsConfig.from_path(EXAMPLES / "nemo_content_safety")
    # The vision rail plus the NemoGuard output prompt, a text-only rail that reads the same message.
    output = "  output:\n    flows:\n      - content safety check output $model=content_safety\n"
    yaml = (FIXTURE / "config.yml").read_text() + output
    mixed = RailsConfig.from_content(yaml, prompts=(FIXTURE / "prompts.yml").read_text())
    for config in (text_only, mixed):
        async with emulated(config, time_scale=0) as (pointed, servers):
            rails = LLMRails(pointed)
            assert rails.image_limits is None
            with pytest.raises(ValueError) as info:
                await rails.generate_async(messages=[image_message(QUESTION, data_url(CAT))])
            assert str(info.value).startswith(
                "messages[0].content[1]: only text parts can be checked (got image_url)"
            )
            assert sum(s.stats().requests_total for s in servers.values()) == 0
            await rails.aclose()
    async with emulated(text_only, time_scale=0) as (pointed, _):
        rails = LLMRails(pointed)
        assert await rails.generate_async(QUESTION) == f"You said: {QUESTION}"  # text as always
        await rails.aclose()


# -- guardcache serve ------------------------------------------------------------------------------


def test_parse_chat_reads_images_only_for_a_config_that_judges_them() -> None:
    body = {"model": "gpt-4o-mini", "messages": [image_message(QUESTION, data_url(CAT))]}
    for images in (None, lambda config_id, model: None):
        with pytest.raises(RequestError) as info:
            parse_chat(body, images)
        assert info.value.status == 400 and info.value.param == "messages[0].content[1]"
        assert "only text parts can be checked (got image_url)" in info.value.message
    asked: list[tuple[str | None, str | None]] = []

    def limits(config_id: str | None, model: str | None) -> ImageLimits:
        asked.append((config_id, model))
        return ImageLimits()

    chat = parse_chat({**body, "config_id": "vision"}, limits)
    assert asked == [("vision", "gpt-4o-mini")]
    assert chat.messages == [image_message(QUESTION, data_url(CAT))]
    bad = {"messages": [image_message(QUESTION, "data:image/png;base64,%%%")]}
    with pytest.raises(RequestError) as info:
        parse_chat(bad, limits)
    assert info.value.param == "messages[0].content[1]" and "is not valid base64" in info.value.message
    parse_chat({"messages": [{"role": "user", "content": "text only"}]}, limits)
    assert len(asked) == 2  # asked only for a request with an image part


def serve_configs(folder: Path, main_url: str, guard_url: str, nemoguard_url: str) -> Path:
    """``vision/``: NeMo's example with the emulators' URLs; ``text/``: a NemoGuard text config (on
    its own NemoGuard emulator: the vision guard answers in its own format)."""
    vision = folder / "vision"
    vision.mkdir(parents=True)
    config = (FIXTURE / "config.yml").read_text()
    config = config.replace(
        "model: gpt-4o-mini\n", f"model: gpt-4o-mini\n    parameters: {{base_url: '{main_url}'}}\n"
    )
    config = config.replace(
        "    parameters:\n      chat_template",
        f"    parameters:\n      base_url: '{guard_url}'\n      chat_template",
    )
    (vision / "config.yml").write_text(config)
    (vision / "prompts.yml").write_text((FIXTURE / "prompts.yml").read_text())
    text = folder / "text"
    text.mkdir()
    (text / "config.yml").write_text(
        f"""
models:
  - type: main
    engine: nim
    model: meta/llama-3.1-8b-instruct
    parameters: {{base_url: '{main_url}'}}
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    parameters: {{base_url: '{nemoguard_url}'}}
rails:
  input: {{flows: [{RAIL}]}}
"""
    )
    return folder


@pytest.fixture(scope="module")
def vision_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    latency = LatencyConfig(time_scale=0)
    main = EmulatorConfig(port=0, model="gpt-4o-mini", vision=True, latency=latency)
    guard = EmulatorConfig(
        port=0, model="nvidia/nemotron-3.5-content-safety", vision=True, safety_guard=True, latency=latency
    )
    nemoguard = EmulatorConfig(port=0, latency=latency)
    with (
        EmulatorServer(main).in_thread() as m,
        EmulatorServer(guard).in_thread() as g,
        EmulatorServer(nemoguard).in_thread() as n,
    ):
        folder = serve_configs(tmp_path_factory.mktemp("vision"), m.base_url, g.base_url, n.base_url)
        server = ServeProcess(folder).start()
        yield server
        server.stop()


def post(server: ServeProcess, config_id: str, message: dict[str, Any]) -> httpx.Response:
    body = {"model": "gpt-4o-mini", "config_id": config_id, "messages": [message]}
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=10)


def test_serve_refuses_an_image_part_without_a_vision_rail(vision_server: ServeProcess) -> None:
    answer = post(vision_server, "text", image_message(QUESTION, data_url(CAT)))
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "messages[0].content[1]" and error["type"] == "invalid_request_error"
    assert error["message"].startswith(
        "messages[0].content[1]: only text parts can be checked (got image_url)"
    )
    assert post(vision_server, "text", {"role": "user", "content": QUESTION}).status_code == 200


def test_serve_judges_an_image_part_with_a_vision_rail(vision_server: ServeProcess) -> None:
    safe = post(vision_server, "vision", image_message(QUESTION, data_url(CAT)))
    assert safe.status_code == 200, safe.text
    assert safe.json()["choices"][0]["message"]["content"] == f"You said: {QUESTION}"
    unsafe = post(vision_server, "vision", image_message(QUESTION, data_url(PISTOL)))
    assert unsafe.status_code == 200 and unsafe.headers["x-guardcache-blocked"] == "input"
    assert unsafe.json()["choices"][0]["finish_reason"] == "content_filter"
    bad = post(vision_server, "vision", image_message(QUESTION, "data:image/png;base64,%%%"))
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages[0].content[1]"
    assert "is not valid base64" in bad.json()["error"]["message"]


# -- a vision output rail, and the emulator itself -------------------------------------------------

OUTPUT_PROMPT = """
  - task: content_safety_check_output $model=content_safety
    messages:
      - type: user
        content: "{{ user_input }}"
      - type: assistant
        content: "{{ bot_response }}"
    output_parser: nemotron_content_safety_parse_response_safety
    max_tokens: 100
"""


async def test_an_output_rail_with_the_same_rule_judges_the_answer_with_the_images() -> None:
    output = "  output:\n    flows:\n      - content safety check output $model=content_safety\n"
    yaml = (FIXTURE / "config.yml").read_text() + output
    config = RailsConfig.from_content(yaml, prompts=(FIXTURE / "prompts.yml").read_text() + OUTPUT_PROMPT)
    assert config.image_rails()[1] == [] and len(config.image_rails()[0]) == 2
    async with emulated(config, time_scale=0) as (pointed, servers):
        rails = LLMRails(pointed)
        message = image_message(QUESTION, data_url(CAT))
        assert await rails.generate_async(messages=[message]) == {
            "role": "assistant",
            "content": f"You said: {QUESTION}",
        }
        inputs, outputs = rails.explain().checks.input, rails.explain().checks.output
        assert [r.allowed for r in (*inputs, *outputs)] == [True, True]
        answer = {"role": "assistant", "content": f"You said: {QUESTION}"}
        assert servers["content_safety"].stats().calls_for([message, answer]) == 1
        await rails.aclose()


async def test_the_emulator_refuses_images_it_cannot_take() -> None:
    body = {"messages": [image_message(QUESTION, data_url(CAT))], "max_tokens": 20}
    latency = LatencyConfig(time_scale=0)
    async with (
        EmulatorServer(EmulatorConfig(port=0, latency=latency)) as text_model,
        EmulatorServer(EmulatorConfig(port=0, vision=True, safety_guard=True, latency=latency)) as guard,
        httpx.AsyncClient(timeout=10) as http,
    ):
        refused = await http.post(f"{text_model.base_url}/chat/completions", json=body)
        assert refused.status_code == 400 and "not a multimodal model" in refused.json()["message"]
        bad = {"messages": [image_message(QUESTION, "data:image/png;base64,%%%")]}
        assert (await http.post(f"{guard.base_url}/chat/completions", json=bad)).status_code == 400
        judged = await http.post(f"{guard.base_url}/chat/completions", json=body)
        assert judged.json()["choices"][0]["message"]["content"] == "User Safety: safe"
        conversation = {
            "messages": [
                image_message("Is it loaded?", data_url(PISTOL)),
                {"role": "assistant", "content": "No."},
            ]
        }
        judged = await http.post(f"{guard.base_url}/chat/completions", json=conversation)
        assert judged.json()["choices"][0]["message"]["content"] == (
            "User Safety: unsafe\nResponse Safety: safe\nSafety Categories: Guns and Illegal Weapons"
        )
        # Each image costs prompt tokens of its own, so two images are two prompts.
        assert judged.json()["usage"]["prompt_tokens"] > 64


def test_the_emulator_command_serves_a_vision_guard() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    config = build_config(parser.parse_args(["--vision", "--safety-guard", "--port", "0"]))
    assert config.vision and config.safety_guard
    assert not build_config(parser.parse_args([])).vision
