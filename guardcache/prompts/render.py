"""Rendering prompt templates: ``{{ name }}`` placeholders, substituted in one pass.

Deliberately not Jinja. A guard prompt is static text with a few holes for untrusted text, and:
- substitution is SINGLE-PASS: a user message containing ``{{ bot_response }}`` (or a stray ``{{``)
  is inserted verbatim and never expanded again, so user text cannot steer the template;
- the static text is byte-identical on every call, which keeps the model's accuracy (it was trained
  on those bytes) and the server's KV-cache prefix reuse;
- the placeholders of a template can be checked when the config loads, so a typo such as
  ``{{ user_inptu }}`` is a config error instead of a literal sent to the model.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping

from guardcache.prompts.templates import TaskPrompt

# ``{{ name }}`` with optional whitespace inside the braces.
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
# Anything that looks like template syntax, to find what ``PLACEHOLDER`` does not support.
_ANY_EXPRESSION = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.DOTALL)
_FINGERPRINT_VERSION = "guardcache.prompt.v1"


def placeholders(template: str) -> list[str]:
    """The placeholder names of a template, in order of first appearance, without repeats."""
    return list(dict.fromkeys(PLACEHOLDER.findall(template)))


def template_problems(template: str, allowed: Collection[str]) -> list[str]:
    """What is wrong with a template whose placeholders may only be ``allowed``; empty if it is fine.

    Reported: unknown placeholders, Jinja filters/blocks/comments (``{{ x | f }}``, ``{% if %}``),
    and an opening ``{{`` that is never closed.
    """
    problems: list[str] = []
    names = ", ".join(sorted(allowed)) or "none"
    for match in _ANY_EXPRESSION.finditer(template):
        text = match.group(0)
        simple = PLACEHOLDER.fullmatch(text)
        if simple is None:
            problems.append(
                f"unsupported template syntax {_clip(text)}: only {{{{ name }}}} placeholders "
                f"are supported (this task can use: {names})"
            )
        elif simple.group(1) not in allowed:
            problems.append(f"unknown placeholder {text} (this task can use: {names})")
    rest = _ANY_EXPRESSION.sub("", template)
    if "{{" in rest or "{%" in rest:
        problems.append("an opening '{{' or '{%' is never closed")
    return problems


def render(template: str, variables: Mapping[str, str]) -> str:
    """Replace every ``{{ name }}`` with ``variables[name]``, in a single pass.

    Inserted values are never scanned again. Variables the template does not use are ignored; a
    placeholder without a value raises ``KeyError`` naming it (templates are validated at load time,
    so this means the caller passed the wrong variables).
    """

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        try:
            text = variables[name]
        except KeyError:
            raise KeyError(
                f"no value for placeholder {{{{ {name} }}}} (given: {', '.join(variables) or 'none'})"
            ) from None
        if not isinstance(text, str):
            raise TypeError(f"value of {name!r} must be a str, not {type(text).__name__}")
        return text

    return PLACEHOLDER.sub(value, template)


def render_messages(prompt: TaskPrompt, variables: Mapping[str, str]) -> list[dict[str, str]]:
    """Render a message-list prompt to OpenAI-style ``{"role", "content"}`` dicts.

    A content prompt becomes one ``user`` message (how NemoGuard models expect it). NeMo's bare-string
    message expressions cannot be rendered without Jinja and raise ``ValueError``.
    """
    if prompt.content is not None:
        return [{"role": "user", "content": render(prompt.content, variables)}]
    out: list[dict[str, str]] = []
    for message in prompt.messages or ():
        if message.type is None:
            raise ValueError(
                f"prompt {prompt.task!r}: message expression {_clip(message.content)} needs Jinja; "
                "guardcache renders only messages with a type and {{ name }} placeholders"
            )
        out.append({"role": message.type, "content": render(message.content, variables)})
    return out


def static_prefix(template: str) -> str:
    """The text before the first placeholder: the part a server can reuse from its KV cache."""
    match = PLACEHOLDER.search(template)
    return template if match is None else template[: match.start()]


def fingerprint(prompt: TaskPrompt) -> str:
    """A short, stable hex digest of everything in a prompt that shapes the model's answer.

    Covers the template (``content`` or every message's role and text), ``output_parser``,
    ``max_tokens`` and ``stop``; changing any byte of them changes the fingerprint. The cache namespace
    includes it, so an edited template can never be served a verdict computed with the old one. The
    task name and NeMo's ``models``/``max_length``/``mode`` are left out: they select a prompt, they do
    not change what the model sees.
    """
    payload = {
        "v": _FINGERPRINT_VERSION,
        "content": prompt.content,
        "messages": None if prompt.messages is None else [[m.type, m.content] for m in prompt.messages],
        "output_parser": prompt.output_parser,
        "max_tokens": prompt.max_tokens,
        "stop": None if prompt.stop is None else list(prompt.stop),
    }
    encoded = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(encoded.encode("utf-8")).hexdigest()[:16]


def _clip(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


__all__ = [
    "PLACEHOLDER",
    "fingerprint",
    "placeholders",
    "render",
    "render_messages",
    "static_prefix",
    "template_problems",
]
