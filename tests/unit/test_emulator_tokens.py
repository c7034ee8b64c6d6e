"""The emulator's approximate tokenizer: prefix stability and the Llama-3.1 chat overhead."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from guardcache.emulator import Tokenizer, prompt_digest
from guardcache.emulator.samples import as_messages, content_safety_input
from guardcache.emulator.tokens import message_text, prompt_digest_of_tokens

TOKENIZER = Tokenizer()


@given(st.text(), st.text())
def test_tokens_of_a_prefix_are_a_prefix_of_the_tokens(a: str, b: str) -> None:
    whole = TOKENIZER.tokenize(a + b)
    full_chunks = len(a) // 4
    assert whole[:full_chunks] == TOKENIZER.tokenize(a)[:full_chunks]


@given(st.text(), st.integers(min_value=1, max_value=9))
def test_tokens_concatenate_back_to_the_text_and_count_matches(text: str, n: int) -> None:
    tokenizer = Tokenizer(n)
    tokens = tokenizer.tokenize(text)
    assert "".join(tokens) == text
    assert len(tokens) == tokenizer.count(text)
    assert all(len(t) == n for t in tokens[:-1])


@given(st.text(min_size=1), st.text(), st.text())
def test_chat_prompts_sharing_a_content_prefix_share_leading_tokens(common: str, x: str, y: str) -> None:
    first = TOKENIZER.render_chat([{"role": "user", "content": common + x}])
    second = TOKENIZER.render_chat([{"role": "user", "content": common + y}])
    shared = 26 + len(common) // 4  # 26 template tokens precede the user content
    assert first[:shared] == second[:shared]


def test_one_message_carries_31_tokens_of_llama31_template_overhead() -> None:
    tokens = TOKENIZER.render_chat([{"role": "user", "content": ""}])
    assert len(tokens) == 31  # bos, system block (4 + 16 preamble + eot), user header 4, eot, gen 4
    assert "".join(tokens).startswith("<|begin_of_text|><|start_header_id|>system")
    assert "".join(tokens).endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_an_explicit_system_message_replaces_the_default_system_block() -> None:
    tokens = TOKENIZER.render_chat([{"role": "system", "content": ""}, {"role": "user", "content": ""}])
    assert "Cutting Knowledge" not in "".join(tokens)
    assert len(tokens) == 1 + 5 + 5 + 4


def test_content_safety_check_is_about_400_tokens_like_the_real_template() -> None:
    tokens = TOKENIZER.render_chat(as_messages(content_safety_input("hi")))
    assert 390 <= len(tokens) <= 410


def test_content_parts_are_read_as_text() -> None:
    parts = [
        {"type": "text", "text": "a"},
        {"type": "image_url", "image_url": {}},
        {"type": "text", "text": "b"},
    ]
    assert message_text(parts) == "ab"
    assert message_text(None) == ""


def test_prompt_digest_is_the_sha256_of_the_rendered_prompt() -> None:
    messages = [{"role": "user", "content": "hello"}]
    assert prompt_digest(messages) == prompt_digest_of_tokens(TOKENIZER.render_chat(messages))
    assert prompt_digest(messages) != prompt_digest([{"role": "user", "content": "hello "}])
    assert len(prompt_digest(messages)) == 64
