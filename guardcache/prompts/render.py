"""Rendering prompt templates: NeMo Guardrails' Jinja syntax in a sandbox, compiled once per text.

A guard prompt is mostly static text with a few holes for untrusted text. What this module keeps
true, whatever the template uses (``{{ name }}``, ``{% if %}``, loops, filters; see ``jinja``):
- SINGLE-PASS: a variable's value is inserted as text and never evaluated again, so a user message
  holding ``{{ bot_response }}`` or ``{% if %}`` cannot steer the template;
- a missing variable is an error, never an empty string, and a render depends only on the template,
  the variables and the settings (a check can key its cache on them and render only on a miss);
- a template made only of ``{{ name }}`` placeholders renders the same bytes as guardcache's former
  renderer (``legacy``), so the shipped NemoGuard prompts keep the bytes the model was trained on and
  the static prefix a server reuses from its KV cache (``static_prefix``);
- templates are checked when the config loads (``template_problems``): a typo such as
  ``{{ user_inptu }}`` or an unknown filter is a config error, not a literal sent to the model.

``settings`` are read-only values the runtime gives every template of a check (``reasoning_enabled``
and the other ``KNOWN_SETTINGS``: the values NeMo's task manager and actions give its prompts beside
the checked texts); where a function takes them, ``None`` means the defaults.

A whole prompt is anything shaped like a ``RenderablePrompt`` (the config's ``TaskPrompt`` is): this
package renders templates and never validates configuration, so it does not import the config.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

from guardcache.prompts import jinja
from guardcache.prompts.jinja import Settings, compile_template
from guardcache.prompts.legacy import PLACEHOLDER
from guardcache.prompts.parts import ContentParts

_FINGERPRINT_VERSION = "guardcache.prompt.v1"


class RenderableMessage(Protocol):
    """One entry of a message-list prompt: a chat role (``None``: a NeMo message expression) and a
    template."""

    @property
    def type(self) -> str | None: ...
    @property
    def content(self) -> str: ...


class RenderablePrompt(Protocol):
    """What rendering and fingerprinting read of a prompt (``guardcache.config.prompts.TaskPrompt``):
    one template (``content``) or a list of them (``messages``), and the answer settings."""

    @property
    def task(self) -> str: ...
    @property
    def content(self) -> str | None: ...
    @property
    def messages(self) -> Sequence[RenderableMessage] | None: ...
    @property
    def output_parser(self) -> str | None: ...
    @property
    def max_tokens(self) -> int | None: ...
    @property
    def stop(self) -> Sequence[str] | None: ...


def placeholders(template: str) -> list[str]:
    """The names a template reads (variables and settings), in order of first appearance, without
    repeats. ``ValueError`` if it does not compile."""
    return list(compile_template(template).names)


def template_problems(
    template: str,
    allowed: Collection[str],
    *,
    settings: Collection[str] | None = None,
    fixed: Mapping[str, Any] | None = None,
) -> list[str]:
    """What is wrong with a template whose task provides the variables ``allowed`` (and the
    ``fixed`` ones, with their values); empty if fine.

    Reported, each with its line: Jinja syntax errors; unknown filters and tests, and NeMo filters
    guardcache refuses (dialog-history ones, ``random``); ``include``/``extends``/``import``; names
    that are neither an allowed variable nor a setting (``settings``, default: every known setting);
    and a template that fails when rendered on sample text with the default settings.
    """
    return jinja.template_problems(template, allowed, settings=settings, fixed=fixed)


def render(template: str, variables: Mapping[str, str], settings: Mapping[str, Any] | None = None) -> str:
    """Render ``template`` (compiled on first use, then cached) with ``variables`` and ``settings``.

    Values are inserted verbatim and never scanned again. Variables the template does not use are
    ignored; a variable it reads without a value raises ``KeyError`` naming it, a non-string value
    ``TypeError``, a template failing at run time ``jinja.TemplateRenderError`` and one that does not
    compile ``jinja.TemplateCompileError`` (both ``ValueError``; templates are validated at load, so
    these mean the caller passed the wrong variables or settings).
    """
    return compile_template(template).render(variables, settings)


def render_messages(
    prompt: RenderablePrompt, variables: Mapping[str, Any], settings: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Render a prompt to OpenAI-style ``{"role", "content"}`` dicts.

    A content prompt becomes one ``user`` message (how NemoGuard models expect it); a message-list
    prompt gives one message per entry, even one whose content renders empty. NeMo's bare-string
    message expressions (``"{{ history | to_chat_messages }}"``) expand to a conversation history,
    which guard checks do not have: they raise ``ValueError`` (and are refused when the config loads).

    A variable whose value is :class:`ContentParts` (a user message with images) is the content of a
    message whose template is exactly that variable (``{{ user_input }}``): the message carries the
    parts as they are, as NeMo's task manager passes a list there. Such a value cannot be rendered
    into text: a template that reads it otherwise fails (``KeyError``; see :func:`takes_image_parts`).
    """
    bound = Settings.of(settings)
    parts = {name: value for name, value in variables.items() if isinstance(value, ContentParts)}
    texts = {name: value for name, value in variables.items() if name not in parts} if parts else variables
    if prompt.content is not None:
        return [{"role": "user", "content": compile_template(prompt.content).render(texts, bound)}]
    out: list[dict[str, Any]] = []
    for message in prompt.messages or ():
        if message.type is None:
            raise ValueError(
                f"prompt {prompt.task!r}: message expression {_clip(message.content)} is not "
                "supported: guard checks have no conversation history; give each message a type"
            )
        whole = single_variable(message.content) if parts else None
        if whole is not None and whole in parts:
            out.append({"role": message.type, "content": list(parts[whole])})
            continue
        content = compile_template(message.content).render(texts, bound)
        out.append({"role": message.type, "content": content})
    return out


_SINGLE_VARIABLE = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def single_variable(template: str) -> str | None:
    """The variable a template is made of alone (``{{ user_input }}``, spaces around it allowed), or
    None: NeMo's task manager passes a list value (multimodal content) whole to such a message."""
    found = _SINGLE_VARIABLE.fullmatch(template.strip())
    return found.group(1) if found is not None else None


def takes_image_parts(prompt: RenderablePrompt, variable: str = "user_input") -> bool:
    """Whether a prompt can carry a user message's images to its model: a message-list prompt with
    a message that is exactly ``{{ user_input }}`` (it gets the content parts, images included, as in
    NeMo), and no other template reading ``user_input`` (it would need the image as text). Every
    other prompt judges text only, and its check refuses images."""
    if prompt.messages is None:
        return False
    whole = False
    for message in prompt.messages:
        if message.type is not None and single_variable(message.content) == variable:
            whole = True
            continue
        try:
            names = compile_template(message.content).names
        except ValueError:  # not a template guardcache renders (refused when the config loads)
            return False
        if variable in names:
            return False
    return whole


def static_prefix(template: str) -> str:
    """The literal text every render of ``template`` starts with, whatever the variables and
    settings: the part a server can reuse from its KV cache. It ends where the first expression or
    tag (``{{``, ``{%``) begins, less any whitespace a ``{%-`` strips. ``ValueError`` if the template
    does not compile."""
    return compile_template(template).static_prefix


def fingerprint(prompt: RenderablePrompt, settings: Mapping[str, Any] | None = None) -> str:
    """A short, stable hex digest of everything in a prompt that shapes the model's answer.

    Covers the template (``content`` or every message's role and text), ``output_parser``,
    ``max_tokens`` and ``stop``, and the value of each setting the template reads (given or default);
    changing any byte of them changes the fingerprint. The cache namespace includes it, so an edited
    template or a changed setting can never be served a verdict computed with the old one. The task
    name and NeMo's ``models``/``max_length``/``mode`` are left out: they select a prompt, they do not
    change what the model sees. Neither are settings the template does not read, so a template that
    reads none keeps the fingerprint it had before settings existed.
    """
    payload: dict[str, Any] = {
        "v": _FINGERPRINT_VERSION,
        "content": prompt.content,
        "messages": None if prompt.messages is None else [[m.type, m.content] for m in prompt.messages],
        "output_parser": prompt.output_parser,
        "max_tokens": prompt.max_tokens,
        "stop": None if prompt.stop is None else list(prompt.stop),
    }
    read = _settings_read(prompt, Settings.of(settings))
    if read:
        payload["settings"] = read
    encoded = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(encoded.encode("utf-8")).hexdigest()[:16]


def _settings_read(prompt: RenderablePrompt, settings: Settings) -> list[list[Any]]:
    """``[name, value]`` for each setting the prompt's templates read (``[name]`` if undefined)."""
    texts = [prompt.content] if prompt.content is not None else [m.content for m in prompt.messages or ()]
    names: set[str] = set()
    for text in texts:
        try:
            names.update(compile_template(text).names)
        except ValueError:  # not a template guardcache renders (refused when the config loads)
            continue
    return [
        [name, _encode(settings[name])] if name in settings else [name]
        for name in sorted(names & jinja.KNOWN_SETTINGS.keys())
    ]


def _encode(value: Any) -> Any:
    """Frozen setting data as JSON that keeps what rendering sees: mapping order and list vs map."""
    if isinstance(value, Mapping):
        return {"map": [[key, _encode(item)] for key, item in value.items()]}
    if isinstance(value, tuple):
        return {"list": [_encode(item) for item in value]}
    return value


def _clip(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


__all__ = [
    "PLACEHOLDER",
    "RenderableMessage",
    "RenderablePrompt",
    "fingerprint",
    "placeholders",
    "render",
    "render_messages",
    "single_variable",
    "static_prefix",
    "takes_image_parts",
    "template_problems",
]
