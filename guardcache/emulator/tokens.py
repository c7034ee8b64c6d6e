"""An approximate, prefix-stable tokenizer and the Llama-3.1 chat template.

The emulator needs token counts that behave like a real tokenizer where it matters for caching:
two prompts that share a long text prefix share (almost) as many leading tokens. Fixed-size chunks
of characters give exactly that: for any strings ``a`` and ``b``,
``tokenize(a + b)[: len(a) // n] == tokenize(a)[: len(a) // n]`` (``n`` = chars per token), and the
chunk that straddles the boundary differs, just as a real BPE merges the space after ``user:`` with
the first word of the user text. Roughly 4 characters per token matches English under Llama-3.

The chat template follows Llama-3.1: special tokens count as one token each, and the default system
block (the "Cutting Knowledge Date" preamble) is added unless the chat starts with a system message,
so a one-message prompt carries 31 tokens of overhead: 26 before its content and 5 after. An image
part (a vision model's request) is ``images.IMAGE_TOKENS`` tokens where it stands, the first naming
its digest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from .images import has_images, image_tokens, read_images

BEGIN_OF_TEXT = "<|begin_of_text|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
END_OF_TURN = "<|eot_id|>"
HEADER_BREAK = "\n\n"

DEFAULT_SYSTEM_PREAMBLE = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"


def message_text(content: Any) -> str:
    """The text of a message's ``content``: a string, None, or OpenAI content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return str(content)


class Tokenizer:
    """Chunks text into ``chars_per_token``-character tokens and renders chat prompts to tokens."""

    __slots__ = ("chars_per_token", "system_preamble")

    def __init__(self, chars_per_token: int = 4, system_preamble: str = DEFAULT_SYSTEM_PREAMBLE) -> None:
        if chars_per_token < 1:
            raise ValueError("chars_per_token must be >= 1")
        self.chars_per_token = chars_per_token
        self.system_preamble = system_preamble

    def tokenize(self, text: str) -> list[str]:
        """Fixed-size chunks of ``text``; the last chunk may be shorter."""
        n = self.chars_per_token
        return [text[i : i + n] for i in range(0, len(text), n)]

    def count(self, text: str) -> int:
        """``len(self.tokenize(text))`` without building the list."""
        return -(-len(text) // self.chars_per_token)

    def render_chat(self, messages: Sequence[Mapping[str, Any]]) -> list[str]:
        """The token sequence a Llama-3.1 server builds for ``messages``, generation header included.

        The default system block is only added when the first message is not a system message, as
        in Llama-3.1's template; ``"".join(tokens)`` is the rendered prompt text.
        """
        tokens: list[str] = [BEGIN_OF_TEXT]
        has_system = bool(messages) and messages[0].get("role") == "system"
        if not has_system and self.system_preamble:
            self._turn(tokens, "system", self.system_preamble)
        for message in messages:
            content = message.get("content")
            role = str(message.get("role", "user"))
            if has_images([message]):
                self._multimodal_turn(tokens, role, cast("list[Any]", content))  # has_images: a list
            else:
                self._turn(tokens, role, message_text(content))
        tokens += [START_HEADER, "assistant", END_HEADER, HEADER_BREAK]
        return tokens

    def _turn(self, tokens: list[str], role: str, text: str) -> None:
        tokens += [START_HEADER, role, END_HEADER, HEADER_BREAK]
        tokens += self.tokenize(text)
        tokens.append(END_OF_TURN)

    def _multimodal_turn(self, tokens: list[str], role: str, content: list[Any]) -> None:
        """Text parts as text, each image as its image tokens, in order (``ImageInputError`` for an
        image that does not load)."""
        tokens += [START_HEADER, role, END_HEADER, HEADER_BREAK]
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "image_url":
                (image,) = read_images([part])
                tokens += image_tokens(image)
            else:
                tokens += self.tokenize(message_text([part]))
        tokens.append(END_OF_TURN)


def prompt_digest_of_tokens(tokens: Iterable[str]) -> str:
    """sha256 hex digest of the rendered prompt text: the key of ``requests_by_prompt``."""
    return hashlib.sha256("".join(tokens).encode("utf-8")).hexdigest()


def prompt_digest(
    messages: Sequence[Mapping[str, Any]],
    *,
    system_preamble: str = DEFAULT_SYSTEM_PREAMBLE,
) -> str:
    """The key under which the emulator counts requests for ``messages`` in its stats.

    Clients use it to ask "how many times did the backend see this exact prompt?". Pass the
    emulator's ``system_preamble`` if it was changed from the default.
    """
    rendered = Tokenizer(4, system_preamble).render_chat(messages)
    return prompt_digest_of_tokens(rendered)


def input_digest(text: str) -> str:
    """The stats key of a ``/v1/classify`` input (sha256 of the text)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
