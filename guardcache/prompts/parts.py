"""A user message's content parts, text and images (OpenAI's chat format), read strictly.

A message's ``content`` may be a list of parts: ``{"type": "text", "text": ...}`` and
``{"type": "image_url", "image_url": {"url": ..., "detail": ...}}``. A list of text parts alone is
the text it joins (as always); a list holding an image is read here into :class:`ContentParts`,
which only a vision rail may judge: a prompt whose message is exactly ``{{ user_input }}`` (see
``render.takes_image_parts``), to which NeMo's task manager passes the list as the message content.
Every other check judges text only and refuses images.

What is accepted, and why:
- an image is a ``data:image/<png|jpeg|gif|webp>;base64,<data>`` URL whose bytes are an image of
  the declared type (checked by its signature, so a mislabelled or non-image payload is refused
  here, not judged blind), or an ``https://`` URL, which guardcache never fetches (the guard model
  does);
- its identity is a SHA-256 digest: of the decoded bytes for a ``data:`` URL (the same bytes spelled
  twice are the same image), of the URL string for an https URL (the same URL is the same image to
  the cache, whatever it serves later). Nothing of an image is kept beyond the turn; cache keys hold
  the digest. A ``data:`` URL is passed on spelled canonically (``image/jpg`` becomes ``image/jpeg``;
  base64 with stray trailing bits is re-spelled), so every model sees one spelling of those bytes;
- limits (:class:`ImageLimits`): ``max_bytes`` decoded per image (10 MiB), ``max_images`` per message
  (16), https URLs of at most 8 KiB.

Anything else is a ``ValueError`` naming the part (``messages[0].content[2]: ...``) and what is wrong
with it: never a part dropped, never an unchecked pass. Nothing here does I/O.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

DEFAULT_MAX_IMAGE_BYTES = 10 * 1024 * 1024
"""The largest image accepted, decoded (``rails.max_image_bytes``)."""
DEFAULT_MAX_IMAGES = 16
"""The most image parts one message may hold (``rails.max_images``)."""
MAX_URL_CHARS = 8192
"""The longest https image URL accepted."""

#: The image media types accepted (``image/jpg``, a common misspelling, reads as ``image/jpeg``).
MEDIA_TYPES: Mapping[str, str] = {
    "image/png": "image/png",
    "image/jpeg": "image/jpeg",
    "image/jpg": "image/jpeg",
    "image/gif": "image/gif",
    "image/webp": "image/webp",
}
_ACCEPTED = "image/png, image/jpeg, image/gif, image/webp"
_DETAILS = frozenset({"auto", "low", "high"})


@dataclass(frozen=True, slots=True)
class ImageLimits:
    """How much image a message may carry; ``None`` where limits are taken means no images at all."""

    max_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    max_images: int = DEFAULT_MAX_IMAGES

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_images"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ImageLimits.{name} must be a whole number >= 1 (got {value!r})")


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str


@dataclass(frozen=True, slots=True)
class ImagePart:
    """One image, read. ``url`` is what models are sent: the https URL as given, or the data URL
    spelled canonically; ``media_type`` is None for an https URL; ``digest`` is the SHA-256 (hex) of
    the decoded bytes, or of the https URL; ``size`` the decoded bytes (0 for a URL)."""

    url: str = ""
    media_type: str | None = None
    digest: str = ""
    detail: str | None = None
    size: int = 0

    def as_dict(self) -> dict[str, Any]:
        image: dict[str, Any] = {"url": self.url}
        if self.detail is not None:
            image["detail"] = self.detail
        return {"type": "image_url", "image_url": image}

    def key_fields(self) -> tuple[str, str, str, str]:
        """What identifies the image in a cache key: never the image itself."""
        return ("image", self.media_type or "https", self.digest, self.detail or "")


Part = TextPart | ImagePart


class ContentParts(list[dict[str, Any]]):
    """The content of a user message that holds at least one image.

    A ``list`` of OpenAI part dicts (text as given, images as :attr:`ImagePart.url`), so the main
    model's client, JSON encoders and LangChain take it as message content unchanged; ``parts`` holds
    the same parts read, one per dict, in order. Made by :func:`read_parts` (or :meth:`of`), never
    changed afterwards.
    """

    __slots__ = ("parts",)

    parts: tuple[Part, ...]

    @classmethod
    def of(cls, parts: Sequence[Part]) -> ContentParts:
        content = cls(
            {"type": "text", "text": p.text} if isinstance(p, TextPart) else p.as_dict() for p in parts
        )
        content.parts = tuple(parts)
        return content

    @property
    def text(self) -> str:
        """The text parts, joined as a text-only list is (a line break between parts)."""
        return "\n".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def images(self) -> tuple[ImagePart, ...]:
        return tuple(p for p in self.parts if isinstance(p, ImagePart))

    def text_length(self) -> int:
        return sum(len(p.text) for p in self.parts if isinstance(p, TextPart))

    def map_text(self, fn: Callable[[str], str]) -> ContentParts:
        """The same parts with each text part's text passed through ``fn`` (normalization)."""
        return ContentParts.of([TextPart(fn(p.text)) if isinstance(p, TextPart) else p for p in self.parts])

    def key_fields(self) -> list[str]:
        """The parts as cache-key fields: a header no normalized text can equal (it starts with a
        line break, which normalization strips) holding the count, then each part in order, a text
        as ``text`` and its text, an image as :meth:`ImagePart.key_fields`: no choice of text can
        pass for an image."""
        fields = [f"\ncontent parts:{len(self.parts)}"]
        for part in self.parts:
            if isinstance(part, TextPart):
                fields += ("text", part.text)
            else:
                fields += part.key_fields()
        return fields

    def __repr__(self) -> str:  # never the image data (a data URL can be megabytes)
        shown = ", ".join(
            f"text({len(p.text)} chars)"
            if isinstance(p, TextPart)
            else f"image({p.media_type or 'https'}, {p.digest[:12]})"
            for p in self.parts
        )
        return f"ContentParts([{shown}])"


def read_parts(content: Sequence[Any], where: str, images: ImageLimits | None) -> str | ContentParts:
    """A list ``content`` (at ``where``, e.g. ``messages[0].content``): the joined text when it holds
    no image, else :class:`ContentParts`. ``images`` None refuses image parts (the config cannot
    judge them). ``ValueError`` naming the part for anything that is not a valid part."""
    parts: list[Part] = []
    count = 0
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        if isinstance(part, str):
            parts.append(TextPart(part))
            continue
        if not isinstance(part, Mapping):
            raise ValueError(
                f"{at}: a content part must be an object with a 'type', not {type(part).__name__}"
            )
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise ValueError(f"{at}: a text part needs 'text' as a string (got {_kind(text)})")
            parts.append(TextPart(text))
        elif kind == "image_url":
            if images is None:
                raise ValueError(
                    f"{at}: only text parts can be checked (got image_url): images are read only "
                    "when every rail that reads the message is a vision rail (a prompt whose message "
                    "is exactly '{{ user_input }}', as in NeMo's content_safety_vision example)"
                )
            count += 1
            if count > images.max_images:
                raise ValueError(
                    f"{at}: more than {images.max_images} image parts in one message "
                    "(the limit, rails.max_images)"
                )
            parts.append(read_image(part.get("image_url"), at, images))
        else:
            got = repr(kind) if isinstance(kind, str) else f"no 'type' ({_kind(kind)})"
            raise ValueError(f"{at}: unknown part type {got} (known: text, image_url)")
    if not count:
        return "\n".join(p.text for p in parts if isinstance(p, TextPart))
    return ContentParts.of(parts)


def read_image(value: Any, at: str, limits: ImageLimits) -> ImagePart:
    """An ``image_url`` part's object (``{"url": ..., "detail": ...}``), read; ``at`` names the part."""
    if not isinstance(value, Mapping):
        raise ValueError(
            f"{at}: an image_url part needs 'image_url' as an object with a 'url' (got {_kind(value)})"
        )
    url = value.get("url")
    if not isinstance(url, str):
        raise ValueError(f"{at}: image_url.url must be a string (got {_kind(url)})")
    detail = value.get("detail")
    if detail is not None and detail not in _DETAILS:
        raise ValueError(f"{at}: image_url.detail must be 'auto', 'low' or 'high' (got {_kind(detail)})")
    scheme = url.partition(":")[0].lower() if ":" in url else ""
    if scheme == "data":
        return _data_image(url, at, limits, detail)
    if scheme == "https":
        return _https_image(url, at, detail)
    shown = f"{scheme}:" if scheme and len(scheme) <= 16 and scheme.isascii() else "no scheme"
    raise ValueError(
        f"{at}: an image must be an https:// URL or a data:image/...;base64 URL (got {shown}); "
        "guardcache never fetches an image"
    )


def _https_image(url: str, at: str, detail: str | None) -> ImagePart:
    if len(url) > MAX_URL_CHARS:
        raise ValueError(f"{at}: the image URL is {len(url)} characters long, over {MAX_URL_CHARS}")
    if not url.isascii() or any(ch.isspace() or not ch.isprintable() for ch in url):
        raise ValueError(f"{at}: the image URL holds spaces, control or non-ASCII characters")
    try:
        host = urlsplit(url).hostname
    except ValueError:
        host = None
    if not host:
        raise ValueError(f"{at}: the image URL names no host")
    return ImagePart(url, None, hashlib.sha256(url.encode("ascii")).hexdigest(), detail, 0)


def _data_image(url: str, at: str, limits: ImageLimits, detail: str | None) -> ImagePart:
    header, comma, payload = url[5:].partition(",")
    if not comma:
        raise ValueError(f"{at}: the data: URL has no ',' before its data")
    media, *flags = (p.strip().lower() for p in header.split(";"))
    if flags != ["base64"]:
        raise ValueError(f"{at}: the data: URL is not base64 (expected data:image/<type>;base64,<data>)")
    if not media.startswith("image/"):
        shown = repr(media[:40]) if media else "none (text/plain)"
        raise ValueError(f"{at}: the data: URL's media type {shown} is not an image media type")
    canonical = MEDIA_TYPES.get(media)
    if canonical is None:
        raise ValueError(f"{at}: image media type {media[:40]!r} is not accepted (accepted: {_ACCEPTED})")
    most = limits.max_bytes
    if len(payload) > 4 * -(-most // 3):  # longer than the base64 of the largest image: too big
        raise ValueError(
            f"{at}: the image is about {len(payload) * 3 // 4:,} bytes, over the limit of {most:,} "
            "bytes (rails.max_image_bytes)"
        )
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{at}: the data: URL's data is not valid base64") from None
    if len(data) > most:
        raise ValueError(
            f"{at}: the image is {len(data):,} bytes, over the limit of {most:,} bytes "
            "(rails.max_image_bytes)"
        )
    found = sniff(data)
    if found != canonical:
        seen = f"it looks like {found}" if found else "its bytes are no PNG, JPEG, GIF or WebP image"
        raise ValueError(f"{at}: the data is not the {canonical} its media type says ({seen})")
    if not (header == f"{canonical};base64" and _canonical_base64(payload, data)):
        url = f"data:{canonical};base64,{base64.b64encode(data).decode('ascii')}"
    return ImagePart(url, canonical, hashlib.sha256(data).hexdigest(), detail, len(data))


def _canonical_base64(payload: str, data: bytes) -> bool:
    """Whether ``payload`` (valid base64 of ``data``) is the one canonical spelling: every whole
    group of four characters spells its three bytes one way, so only the last group can differ."""
    if len(payload) != 4 * -(-len(data) // 3):
        return False
    tail = len(data) % 3 or 3
    return base64.b64encode(data[len(data) - tail :]).decode("ascii") == payload[-4:]


def sniff(data: bytes) -> str | None:
    """The accepted image type ``data`` is, by its signature, or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return "a string"
    return type(value).__name__


__all__ = [
    "DEFAULT_MAX_IMAGES",
    "DEFAULT_MAX_IMAGE_BYTES",
    "MAX_URL_CHARS",
    "MEDIA_TYPES",
    "ContentParts",
    "ImageLimits",
    "ImagePart",
    "Part",
    "TextPart",
    "read_image",
    "read_parts",
    "sniff",
]
