"""Images in a user message (OpenAI ``image_url`` content parts), read strictly for a vision rail.

- ``prompts.parts``: a text-only list is the text it joins, as before; a list with images is
  ``ContentParts`` (the part dicts models are sent, and the parts read); each image's identity is a
  SHA-256 digest (decoded bytes of a ``data:`` URL, the string of an https URL), never the image;
- every malformed part, an image over ``max_bytes``, more than ``max_images`` images, an unknown part
  type, a URL that is neither https nor a data URL is a ``ValueError`` naming the part;
- ``rails.messages.read_messages``: images only when the config can judge them, only in the last
  user message; refused as before otherwise;
- the cache key of a vision check covers the text and each image's digest, in order; no text can
  pass for an image;
- ``prompts.takes_image_parts`` (NeMo's rule: a message that is exactly ``{{ user_input }}``) and
  ``RailsConfig.image_limits``: which configs accept images;
- the Nemotron Content Safety answer parsers (``User Safety: ...`` lines), read strictly.
"""

from __future__ import annotations

import base64
import hashlib
import socket
from pathlib import Path
from typing import Any

import pytest

from guardcache import RailsConfig
from guardcache.cache import Namespace
from guardcache.checks.catalog import PARSERS
from guardcache.checks.check import TurnTexts, digest, key_fields
from guardcache.config.prompts import TaskPrompt
from guardcache.emulator.samples import data_url, image_message, png_image
from guardcache.errors import InputRejectedError, ParseError
from guardcache.prompts import render_messages, takes_image_parts
from guardcache.prompts.parts import ContentParts, ImageLimits, ImagePart, TextPart, read_parts
from guardcache.rails.messages import message_text, read_messages

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_configs"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CAT = png_image("a cat")
PISTOL = png_image("a pistol")
LIMITS = ImageLimits()


def parts(*items: Any) -> list[Any]:
    return list(items)


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def image(url: str, **extra: Any) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url, **extra}}


def read(content: list[Any], limits: ImageLimits | None = LIMITS) -> Any:
    return read_parts(content, "messages[0].content", limits)


def error_of(content: list[Any], limits: ImageLimits | None = LIMITS) -> str:
    with pytest.raises(ValueError) as info:
        read(content, limits)
    return str(info.value)


# -- reading parts ---------------------------------------------------------------------------------


def test_a_text_only_list_is_the_text_it_joins_as_before() -> None:
    assert read(parts(text("hello"), "there")) == "hello\nthere"
    assert read(parts(text("hello")), None) == "hello"


def test_a_list_with_an_image_is_content_parts_sent_as_part_dicts() -> None:
    url = data_url(CAT)
    content = read(parts(text("What is this?"), image(url)))
    assert isinstance(content, ContentParts) and isinstance(content, list)
    assert content == [text("What is this?"), image(url)]
    assert content.parts[0] == TextPart("What is this?")
    assert content.parts[1] == ImagePart(url, "image/png", hashlib.sha256(CAT).hexdigest(), None, len(CAT))
    assert content.text == "What is this?"
    assert [i.digest for i in content.images] == [hashlib.sha256(CAT).hexdigest()]
    assert url not in repr(content)  # a data URL can be megabytes: never shown


def test_a_data_image_is_identified_by_its_decoded_bytes_and_sent_spelled_canonically() -> None:
    canonical = data_url(CAT)
    payload = canonical.split(",", 1)[1]
    # The same bytes spelled another way: stray bits in the last base64 character, image/jpg for
    # a JPEG, upper-case media type: one image, one digest, one spelling sent on.
    last = payload.rstrip("=")
    odd = last[:-1] + chr(ord(last[-1]) + 1) + "=" * (len(payload) - len(last))
    assert base64.b64decode(odd) == CAT and odd != payload
    same = read(parts(image(f"data:image/png;base64,{odd}"))).images[0]
    assert same.digest == hashlib.sha256(CAT).hexdigest() and same.url == canonical
    assert read(parts(image(f"data:IMAGE/PNG;BASE64,{payload}"))).images[0].url == canonical
    jpeg = b"\xff\xd8\xff\xe0" + b"\x00" * 16
    read_jpg = read(parts(image(data_url(jpeg, "image/jpg")))).images[0]
    assert read_jpg.media_type == "image/jpeg" and read_jpg.url == data_url(jpeg, "image/jpeg")
    assert read(parts(image(canonical))).images[0].url is not None


def test_an_https_image_is_identified_by_its_url_and_never_fetched(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an image URL was fetched")

    monkeypatch.setattr(socket, "socket", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    url = "https://upload.wikimedia.org/wikipedia/commons/thumb/4/4f/SIG_Pro.jpg/320px-SIG_Pro.jpg"
    found = read(parts(text("What is the surface color?"), image(url, detail="low"))).images[0]
    assert found == ImagePart(url, None, hashlib.sha256(url.encode()).hexdigest(), "low", 0)
    assert found.as_dict() == image(url, detail="low")


def test_webp_and_gif_are_images_too() -> None:
    webp = b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 8
    gif = b"GIF89a" + b"\x00" * 8
    assert read(parts(image(data_url(webp, "image/webp")))).images[0].media_type == "image/webp"
    assert read(parts(image(data_url(gif, "image/gif")))).images[0].media_type == "image/gif"


@pytest.mark.parametrize(
    ("content", "names"),
    [
        (
            parts(text("a"), image("data:image/png,abc")),
            "messages[0].content[1]: the data: URL is not base64",
        ),
        (
            parts(image("data:image/png;base64,@@@@")),
            "messages[0].content[0]: the data: URL's data is not valid base64",
        ),
        (parts(image("data:image/png;base64,iVBOR")), "content[0]: the data: URL's data is not valid base64"),
        (parts(image("data:image/png;base64")), "content[0]: the data: URL has no ','"),
        (
            parts(image(data_url(CAT, "text/plain"))),
            "content[0]: the data: URL's media type 'text/plain' is not an image",
        ),
        (
            parts(image("data:;base64," + base64.b64encode(CAT).decode())),
            "media type none (text/plain) is not an image",
        ),
        (
            parts(image(data_url(CAT, "image/svg+xml"))),
            "content[0]: image media type 'image/svg+xml' is not accepted",
        ),
        (
            parts(image(data_url(CAT, "image/jpeg"))),
            "is not the image/jpeg its media type says (it looks like image/png)",
        ),
        (parts(image(data_url(b"<svg onload=alert(1)>"))), "its bytes are no PNG, JPEG, GIF or WebP image"),
        (parts(image(data_url(b""))), "its bytes are no PNG, JPEG, GIF or WebP image"),
        (
            parts(image("http://example.com/cat.png")),
            "content[0]: an image must be an https:// URL or a data:image",
        ),
        (parts(image("file:///etc/passwd")), "(got file:)"),
        (parts(image("cat.png")), "(got no scheme)"),
        (parts(image("https://")), "content[0]: the image URL names no host"),
        (parts(image("https://example.com/a cat.png")), "content[0]: the image URL holds spaces"),
        (
            parts(image("https://example.com/" + "a" * 9000)),
            "content[0]: the image URL is 9020 characters long",
        ),
        (
            parts(image(data_url(CAT), detail="huge")),
            "content[0]: image_url.detail must be 'auto', 'low' or 'high'",
        ),
        (
            parts(text("a"), {"type": "image_url", "image_url": "https://x.org/a.png"}),
            "content[1]: an image_url part needs 'image_url' as an object",
        ),
        (
            parts({"type": "image_url", "image_url": {"detail": "low"}}),
            "content[0]: image_url.url must be a string",
        ),
        (
            parts(text("a"), {"type": "input_audio", "input_audio": {}}),
            "content[1]: unknown part type 'input_audio' (known: text, image_url)",
        ),
        (parts({"text": "no type"}), "content[0]: unknown part type no 'type'"),
        (parts(text("a"), 7), "content[1]: a content part must be an object with a 'type', not int"),
        (parts({"type": "text", "text": 5}), "content[0]: a text part needs 'text' as a string"),
    ],
)
def test_a_bad_part_is_a_value_error_naming_it_and_what_is_wrong(content: list[Any], names: str) -> None:
    assert names in error_of(content)


def test_an_image_over_the_size_limit_is_refused_before_and_after_decoding() -> None:
    small = ImageLimits(max_bytes=len(CAT) - 1)
    assert "content[0]: the image is" in error_of(parts(image(data_url(CAT))), small)
    assert f"over the limit of {len(CAT) - 1:,} bytes (rails.max_image_bytes)" in error_of(
        parts(image(data_url(CAT))), small
    )
    huge = "data:image/png;base64," + "A" * (4 * 1024 * 1024)  # refused without decoding 3 MB
    assert "the image is about 3,145,728 bytes, over the limit" in error_of(
        parts(image(huge)), ImageLimits(max_bytes=1024)
    )
    assert read(parts(image(data_url(CAT))), ImageLimits(max_bytes=len(CAT))).images[0].size == len(CAT)


def test_more_images_than_the_limit_is_refused_naming_the_first_one_over() -> None:
    two = ImageLimits(max_images=2)
    content = parts(text("a"), image(data_url(CAT)), image(data_url(PISTOL)), image(data_url(CAT)))
    assert "messages[0].content[3]: more than 2 image parts in one message" in error_of(content, two)
    assert len(read(content[:3], two).images) == 2
    assert len(read([image(data_url(CAT))] * 16).images) == 16  # the default: 16
    assert "content[16]: more than 16" in error_of([image(data_url(CAT))] * 17)


def test_limits_are_whole_numbers_of_at_least_one() -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="max_bytes"):
            ImageLimits(max_bytes=bad)  # type: ignore[arg-type]


# -- messages --------------------------------------------------------------------------------------


def test_without_a_vision_rail_an_image_part_is_refused_as_before() -> None:
    with pytest.raises(ValueError) as info:
        read_messages([image_message("hi", data_url(CAT))])
    assert "messages[0].content[1]: only text parts can be checked (got image_url)" in str(info.value)
    assert "images are read only when every rail that reads the message is a vision rail" in str(info.value)


def test_images_are_read_only_in_the_last_user_message() -> None:
    msgs = read_messages(
        [{"role": "system", "content": "be brief"}, image_message("What is this?", data_url(CAT))],
        images=LIMITS,
    )
    assert msgs[0] == {"role": "system", "content": "be brief"}
    assert (
        isinstance(msgs[1]["content"], ContentParts) and message_text(msgs[1]["content"]) == "What is this?"
    )
    assert message_text("plain") == "plain"
    for messages, where in (
        (
            [
                image_message("a", data_url(CAT)),
                {"role": "assistant", "content": "b"},
                {"role": "user", "content": "c"},
            ],
            "messages[0].content[1]",
        ),
        (
            [{"role": "user", "content": "a"}, {"role": "assistant", "content": [image(data_url(CAT))]}],
            "messages[1].content[0]",
        ),
    ):
        with pytest.raises(ValueError) as info:
            read_messages(messages, images=LIMITS)
        assert f"{where}: images are only checked in the last user message" in str(info.value)


def test_content_read_already_is_kept_and_checked_against_the_limits_again() -> None:
    msgs = read_messages([image_message("a", data_url(CAT), data_url(PISTOL))], images=LIMITS)
    again = read_messages(msgs, images=LIMITS)
    assert again[0]["content"] is msgs[0]["content"]
    with pytest.raises(ValueError, match=r"messages\[0\].content\[2\]: more than 1 image parts"):
        read_messages(msgs, images=ImageLimits(max_images=1))
    with pytest.raises(ValueError, match="only text parts can be checked"):
        read_messages(msgs)


# -- keys ------------------------------------------------------------------------------------------

NAMESPACE = Namespace.of("content_safety", "nvidia/nemotron-3.5-content-safety", "f" * 16, {})


def key(content: Any) -> bytes:
    texts = TurnTexts(("user_input",), 32768, images=True).read({"user_input": content})
    return digest(NAMESPACE, key_fields(texts, ("user_input",)))


def content_of(*items: Any) -> Any:
    return read_messages([{"role": "user", "content": list(items)}], images=LIMITS)[0]["content"]


def test_the_key_covers_the_text_and_each_image_digest_in_order() -> None:
    cat, pistol = data_url(CAT), data_url(PISTOL)
    base = key(content_of(text("What is this?"), image(cat)))
    # The same image (another spelling of its bytes) and the same text up to layout: one key.
    spelled = f"data:image/png;base64,{base64.b64encode(CAT).decode()}"
    assert key(content_of(text("What  is this?\n"), image(spelled))) == base
    assert key(content_of(text("What is this?"), image(pistol))) != base  # another image
    assert key(content_of(image(cat), text("What is this?"))) != base  # another order
    assert key(content_of(text("What is that?"), image(cat))) != base  # another text
    assert key(content_of(text("What is this?"), image(cat, detail="high"))) != base
    assert key(content_of(text("What is this?"), image(cat), image(cat))) != base
    https = key(content_of(text("What is this?"), image("https://example.com/cat.png")))
    assert https != base and https != key(
        content_of(text("What is this?"), image("https://example.com/cat2.png"))
    )


def test_no_text_passes_for_content_with_an_image() -> None:
    content = content_of(text("hi"), image(data_url(CAT)))
    fields = content.key_fields()
    assert fields[0].startswith("\n")  # normalization strips a leading line break: no text starts so
    spoof = "\n".join(fields)
    assert key(spoof) != key(content) and key(fields[0]) != key(content)


def test_text_parts_are_normalized_and_limited_together() -> None:
    content = content_of(text("  a\t b  "), image(data_url(CAT)), text("c\r\n"))
    texts = TurnTexts(("user_input",), 32768, images=True).read({"user_input": content})
    assert texts["user_input"] == [text("a b"), image(data_url(CAT)), text("c")]
    with pytest.raises(InputRejectedError, match="text parts are 5 characters long together"):
        TurnTexts(("user_input",), 4, images=True).read(
            {"user_input": content_of(text("abc"), image(data_url(CAT)), text("de"))}
        )


def test_a_text_only_check_refuses_images_as_an_input_it_cannot_judge() -> None:
    with pytest.raises(InputRejectedError, match="this rail judges text only"):
        TurnTexts(("user_input",), 32768).read({"user_input": content_of(text("a"), image(data_url(CAT)))})


# -- prompts and configs ---------------------------------------------------------------------------

VISION_PROMPT = {
    "task": "content_safety_check_input $model=content_safety",
    "messages": [{"type": "user", "content": "{{ user_input }}"}],
    "output_parser": "nemotron_content_safety_parse_prompt_safety",
}


def prompt(**fields: Any) -> TaskPrompt:
    return TaskPrompt.model_validate({**VISION_PROMPT, **fields})


def test_a_prompt_takes_images_when_a_message_is_exactly_user_input() -> None:
    assert takes_image_parts(prompt())
    system = {"type": "system", "content": "Judge the user's text and images."}
    assert takes_image_parts(prompt(messages=[system, {"type": "user", "content": "  {{user_input}}\n"}]))
    assert not takes_image_parts(prompt(messages=[{"type": "user", "content": "User: {{ user_input }}"}]))
    mixed = [
        {"type": "system", "content": "about {{ user_input }}"},
        {"type": "user", "content": "{{ user_input }}"},
    ]
    assert not takes_image_parts(prompt(messages=mixed))
    assert not takes_image_parts(prompt(messages=None, content="{{ user_input }}"))


def test_the_parts_are_the_content_of_that_message_and_everything_else_renders_as_text() -> None:
    content = content_of(text("What is this?"), image(data_url(CAT)))
    system = {"type": "system", "content": "Judge it. {{ general_instructions }}"}
    rendered = render_messages(
        prompt(messages=[system, VISION_PROMPT["messages"][0]]),
        {"user_input": content},
        {"general_instructions": "Be strict."},
    )
    assert rendered == [
        {"role": "system", "content": "Judge it. Be strict."},
        {"role": "user", "content": [text("What is this?"), image(data_url(CAT))]},
    ]
    assert type(rendered[1]["content"]) is list
    assert render_messages(prompt(), {"user_input": "plain"}) == [{"role": "user", "content": "plain"}]
    with pytest.raises(KeyError):  # a template that would need the image as text fails loudly
        render_messages(prompt(messages=None, content="User: {{ user_input }}"), {"user_input": content})


def test_nemos_vision_example_accepts_images_and_other_configs_refuse_them() -> None:
    vision = RailsConfig.from_path(FIXTURES / "content_safety_vision")
    assert vision.image_rails() == (["content safety check input $model=content_safety"], [])
    assert vision.image_limits() == ImageLimits(10 * 1024 * 1024, 16)
    nemoguards = RailsConfig.from_path(EXAMPLES / "nemoguards")
    assert nemoguards.image_limits() is None
    yaml = (FIXTURES / "content_safety_vision" / "config.yml").read_text()
    prompts = (FIXTURES / "content_safety_vision" / "prompts.yml").read_text()
    limited = RailsConfig.from_content(yaml + "  max_image_bytes: 1000\n  max_images: 2\n", prompts=prompts)
    assert limited.image_limits() == ImageLimits(1000, 2)
    # A text-only rail reading the same message (the default output prompt, a JailbreakDetect NIM)
    # cannot judge its images: the config refuses them.
    both = yaml.replace(
        "      - content safety check input $model=content_safety\n",
        "      - content safety check input $model=content_safety\n  output:\n    flows:\n"
        "      - content safety check output $model=content_safety\n",
    )
    mixed = RailsConfig.from_content(both, prompts=prompts)
    assert mixed.image_rails()[1] == ["content safety check output $model=content_safety"]
    assert mixed.image_limits() is None


# -- the vision model's answers --------------------------------------------------------------------

PROMPT_SAFETY = PARSERS["nemotron_content_safety_parse_prompt_safety"]
RESPONSE_SAFETY = PARSERS["nemotron_content_safety_parse_response_safety"]


@pytest.mark.parametrize(
    ("answer", "allowed", "categories"),
    [
        ("User Safety: safe", True, ()),
        ("User Safety: safe\n", True, ()),
        ("user safety:  SAFE  ", True, ()),
        (
            "User Safety: unsafe\nSafety Categories: Guns and Illegal Weapons, Violence",
            False,
            ("Guns and Illegal Weapons", "Violence"),
        ),
        ("User Safety: unsafe", False, ()),
        ("<think>\nThe picture shows a cat.\n</think>\n\nUser Safety: safe", True, ()),
        # An input check rated for an agent turn saw one the user typed: unsafe, as for the JSON answers.
        ("User Safety: safe\nResponse Safety: safe", False, ()),
    ],
)
def test_the_prompt_parser_reads_the_user_safety_line(
    answer: str, allowed: bool, categories: tuple[str, ...]
) -> None:
    verdict = PROMPT_SAFETY(answer)
    assert (verdict.allowed, verdict.categories) == (allowed, categories)


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "safe",
        "User Safety: probably safe",
        "User Safety: safe.",
        "User Safety: saf",  # cut at max_tokens
        "User Safety: safe\nUser Safety: unsafe",  # a verdict twice: neither can be trusted
        "User Safety: unsafe\nUser Safety: safe",
        "Sure! Here is my assessment.\nUser Safety: safe",
        "User Safety: safe\nNote: the image is fine",
        "<think>\nThe user asks about a pistol",  # the trace was cut before the verdict
        "User Safety: safe\nSafety Categories: Violence",  # safe, yet categories violated
        '{"User Safety": "safe"}',
    ],
)
def test_an_answer_that_is_no_verdict_is_a_parse_error(answer: str) -> None:
    with pytest.raises(ParseError):
        PROMPT_SAFETY(answer)


def test_the_response_parser_reads_the_response_safety_line_only() -> None:
    assert RESPONSE_SAFETY("User Safety: unsafe\nResponse Safety: safe\nSafety Categories: Violence").allowed
    unsafe = RESPONSE_SAFETY("User Safety: safe\nResponse Safety: unsafe\nSafety Categories: Threat")
    assert not unsafe.allowed and unsafe.categories == ("Threat",)
    with pytest.raises(ParseError, match="no 'Response Safety' rating"):
        RESPONSE_SAFETY("User Safety: safe")
