"""Images in chat requests, as the emulated vision model reads them (and a text model refuses them).

A vision guard (``EmulatorConfig.vision``: Nemotron 3.5 Content Safety, the model of NeMo's
``content_safety_vision`` example) takes ``image_url`` parts in its messages. The emulator cannot
look at a picture, so what it "sees" in an image is deterministic and inspectable:

- a ``data:`` image's **caption**: the text after the marker ``emulator-caption:`` in its bytes (up to
  a NUL byte or a line break, at most 200 bytes), e.g. in a PNG ``tEXt`` chunk
  (``samples.png_image("a pistol")`` makes one); an image without the marker shows nothing;
- an https image's URL (it is never fetched): ``https://example.com/pistol.png`` shows ``pistol``.

That text is judged by the policy like the user's words, so a test gets a safe or an unsafe verdict
from the image alone. Each image also counts :data:`IMAGE_TOKENS` prompt tokens, one of them naming
its digest, so two images are two prompts in the stats and the prefix cache.

Like a real server, a text-only model answers a request with images 400 ("not a multimodal model"),
and a vision model answers 400 for a data URL it cannot decode. This reader is the emulator's own,
apart from ``guardcache.prompts.parts`` (the code under test); it is lenient where a server is.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CAPTION_MARKER = b"emulator-caption:"
IMAGE_TOKENS = 64
"""Prompt tokens one image costs (a vision encoder's tiles of patches, much reduced)."""
_CAPTION_MAX = 200


class ImageInputError(ValueError):
    """A request's image the model cannot take; the HTTP layer answers 400 with the message."""


@dataclass(frozen=True, slots=True)
class SeenImage:
    """What the emulated model sees of one image: its digest and the text it shows."""

    digest: str
    text: str


def has_images(messages: Sequence[Mapping[str, Any]]) -> bool:
    return any(_image_parts(message.get("content")) for message in messages)


def read_images(content: Any) -> list[SeenImage]:
    """The images of one message's content, in order; ``ImageInputError`` for one it cannot load."""
    return [_see(part.get("image_url")) for part in _image_parts(content)]


def image_tokens(image: SeenImage) -> list[str]:
    """The prompt tokens of one image: :data:`IMAGE_TOKENS`, the first naming its digest."""
    return [f"<image {image.digest[:16]}>", *["<image>"] * (IMAGE_TOKENS - 1)]


def _image_parts(content: Any) -> list[Mapping[str, Any]]:
    if not isinstance(content, list):
        return []
    return [p for p in content if isinstance(p, Mapping) and p.get("type") == "image_url"]


def _see(image_url: Any) -> SeenImage:
    url = image_url.get("url") if isinstance(image_url, Mapping) else None
    if not isinstance(url, str) or not url:
        raise ImageInputError("image_url.url must be a non-empty string")
    if url[:5].lower() == "data:":
        header, _, payload = url[5:].partition(",")
        if not header.lower().startswith("image/") or not header.lower().endswith(";base64"):
            raise ImageInputError("Failed to load image: only data:image/...;base64 URLs are supported")
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise ImageInputError("Failed to load image: invalid base64 data") from None
        return SeenImage(hashlib.sha256(data).hexdigest(), caption(data))
    if url[:8].lower() == "https://":
        return SeenImage(hashlib.sha256(url.encode("utf-8")).hexdigest(), url[8:])
    raise ImageInputError("Failed to load image: the URL must be https:// or a data: URL")


def caption(data: bytes) -> str:
    """The text after :data:`CAPTION_MARKER` in an image's bytes, or ``""``."""
    at = data.find(CAPTION_MARKER)
    if at < 0:
        return ""
    text = data[at + len(CAPTION_MARKER) : at + len(CAPTION_MARKER) + _CAPTION_MAX]
    for end in (b"\x00", b"\n"):
        text = text.split(end, 1)[0]
    return text.decode("utf-8", errors="replace").strip()


__all__ = [
    "CAPTION_MARKER",
    "IMAGE_TOKENS",
    "ImageInputError",
    "SeenImage",
    "caption",
    "has_images",
    "image_tokens",
    "read_images",
]
