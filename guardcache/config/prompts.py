"""Prompts as configuration: the ``prompts.yml`` schema, the shipped defaults, and picking a prompt.

``TaskPrompt`` is one prompt template for one task, as written in a ``prompts.yml``. The schema is
NeMo Guardrails' (``task``, ``content`` or ``messages``, ``output_parser``, ``max_tokens``, ``models``,
``stop``, ``max_length``, ``mode``) so a NeMo prompts file loads unchanged. A task may name the model
type it is for with NeMo's suffix, ``content_safety_check_input $model=content_safety``: the same
check can run against several guard models, each with the prompt format it was trained on.

The defaults ship as YAML data in ``guardcache/prompts/`` (one file per family of checks, e.g.
``content_safety.yml``) in the same format a user writes. A user prompt replaces the default with the
same ``(base task, model type)``; everything else keeps the default. Rendering a prompt is
``guardcache.prompts``' job; this module only validates and selects.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Sequence
from importlib import resources
from typing import Any

from pydantic import BaseModel, ValidationError, field_validator, model_validator

from guardcache.config.errors import FieldError, Loc, config_error, describe
from guardcache.config.fields import STRICT, PositiveInt
from guardcache.config.files import parse_mapping
from guardcache.errors import ConfigError
from guardcache.flows import FlowSpec, split_ref
from guardcache.prompts.render import takes_image_parts


def fixed_variables(variables: Collection[str]) -> dict[str, Any]:
    """Variables a task's template may read with one value whatever the turn: NeMo's task manager
    passes ``history`` to every prompt, but its guard actions give it no events, so outside topic
    control (whose check reads the conversation, keyed) it is ``None``. Not keyed: it never varies."""
    return {} if "history" in variables else {"history": None}


def judges_images(spec: FlowSpec, prompt: TaskPrompt) -> bool:
    """Whether a flow's check, with this prompt, can judge the images of the user's message (a
    vision rail): a chat check that reads the message, sends its rendered prompt as it is (no
    request builder: topic control builds a text request), and whose prompt passes
    ``{{ user_input }}`` whole, so the model gets the content parts (``prompts.takes_image_parts``,
    NeMo's rule for a list value)."""
    return (
        spec.backend == "chat"
        and spec.build_messages is None
        and "user_input" in spec.variables
        and takes_image_parts(prompt)
    )


def split_task(task: str) -> tuple[str, str | None]:
    """``"content_safety_check_input $model=content_safety"`` -> ``("content_safety_check_input",
    "content_safety")``; a task without ``$model=`` has model type ``None``."""
    name, args = split_ref(task)
    return name, args.get("model")


class PromptMessage(BaseModel):
    """One entry of a message-list prompt.

    ``type`` is the chat role (``system``, ``user``, ``assistant``...). A bare string entry in NeMo's
    format is a template expression that expands to several messages (e.g. ``{{ history |
    to_chat_messages }}``); it is kept with ``type=None`` so such a file still loads, but guardcache
    cannot render it.
    """

    model_config = STRICT

    type: str | None = None
    content: str


class TaskPrompt(BaseModel):
    """The prompt of one task (optionally for one model type): a template and how to read the answer."""

    model_config = STRICT

    task: str
    content: str | None = None
    messages: tuple[PromptMessage, ...] | None = None
    output_parser: str | None = None
    max_tokens: PositiveInt | None = None
    # NeMo's engine/model filter: the prompt applies only to models "<engine>" or "<engine>/<model>".
    models: tuple[str, ...] | None = None
    stop: tuple[str, ...] | None = None
    # Accepted for NeMo compatibility: the longest prompt in characters, and the prompting mode.
    max_length: PositiveInt = 16000
    mode: str = "standard"

    @field_validator("task")
    @classmethod
    def _task_is_readable(cls, task: str) -> str:
        split_task(task)  # ValueError -> "prompts[i].task: ..."
        return task

    @field_validator("messages", mode="before")
    @classmethod
    def _bare_strings_are_expressions(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"content": item} if isinstance(item, str) else item for item in value]
        return value

    @model_validator(mode="after")
    def _one_template(self) -> TaskPrompt:
        if (self.content is None) == (self.messages is None):
            which = "both" if self.content is not None else "neither"
            raise FieldError(f"give exactly one of 'content' or 'messages' (got {which})")
        return self

    @property
    def base_task(self) -> str:
        """The task without its ``$model=`` suffix, e.g. ``content_safety_check_input``."""
        return split_task(self.task)[0]

    @property
    def model_type(self) -> str | None:
        """The model type from the ``$model=`` suffix, or ``None`` for a prompt of any model."""
        return split_task(self.task)[1]

    @property
    def key(self) -> tuple[str, str | None]:
        """``(base_task, model_type)``: a user prompt replaces the default prompt with the same key."""
        return split_task(self.task)

    def applies_to(self, engine: str | None, model: str | None) -> bool:
        """Whether NeMo's ``models`` filter lets this prompt serve ``engine``/``model``."""
        if self.models is None:
            return True
        return engine in self.models or f"{engine}/{model}" in self.models


_PACKAGE = "guardcache.prompts"  # where the default prompts ship (data files only)


@functools.cache
def default_prompts() -> tuple[TaskPrompt, ...]:
    """Every prompt shipped in ``guardcache/prompts/*.yml``, in file-name order (read once)."""
    prompts: list[TaskPrompt] = []
    files = sorted(
        (f for f in resources.files(_PACKAGE).iterdir() if f.name.endswith((".yml", ".yaml"))),
        key=lambda f: f.name,
    )
    for file in files:
        name = f"{_PACKAGE}/{file.name}"
        data = parse_mapping(file.read_text(encoding="utf-8"), name)
        for i, raw in enumerate(data.get("prompts") or []):
            try:
                prompts.append(TaskPrompt.model_validate(raw))
            except ValidationError as exc:  # a packaging bug, reported like a user's error
                problems = [
                    (("prompts", i, *loc), message)
                    for err in exc.errors()
                    for loc, message in describe(err, TaskPrompt)
                ]
                raise config_error(problems, _constant(name)) from None
            if prompts[-1].key in {p.key for p in prompts[:-1]}:
                raise ConfigError(f"{name}: prompts[{i}]: task {raw.get('task')!r} is defined twice")
    return tuple(prompts)


def _constant(text: str) -> Callable[[Loc], str]:
    return lambda _loc: text


def task_key(item: Any) -> tuple[str, str | None] | None:
    """``(base task, model type)`` of a raw prompt mapping or a ``TaskPrompt``; ``None`` if unreadable."""
    if isinstance(item, TaskPrompt):
        task: Any = item.task
    else:
        task = item.get("task") if isinstance(item, dict) else None
    if not isinstance(task, str):
        return None
    try:
        return split_task(task)
    except ValueError:
        return None


def with_defaults(user: Sequence[Any], defaults: Iterable[TaskPrompt]) -> list[Any]:
    """The user's prompts (raw or parsed, in their order), then each default they do not override.

    User prompts come first so that an error at ``prompts[i]`` still points at the user's i-th prompt.
    """
    overridden = {key for key in map(task_key, user) if key is not None}
    return [*user, *(d for d in defaults if d.key not in overridden)]


def select_prompt(
    prompts: Sequence[TaskPrompt],
    task: str,
    model_type: str | None,
    *,
    engine: str | None = None,
    model: str | None = None,
) -> TaskPrompt | None:
    """The prompt for ``task`` run against the model of type ``model_type`` (``None`` if none fits).

    ``task`` is a base task (``content_safety_check_input``) or a full one with ``$model=``. A prompt
    written for this model type wins over one written for any model type; among those, one whose
    ``models`` filter names ``engine/model`` wins over one naming ``engine``, which wins over one with
    no filter. Prompts whose filter excludes the model are never chosen. Ties go to the earliest.
    """
    base, typed = split_task(task)
    if typed is not None and model_type is not None and typed != model_type:
        raise ValueError(f"task {task!r} names model type {typed!r} but {model_type!r} was asked")
    model_type = typed or model_type
    best: TaskPrompt | None = None
    best_score = -1
    for prompt in prompts:
        p_base, p_type = prompt.key
        if p_base != base or p_type not in (model_type, None) or not prompt.applies_to(engine, model):
            continue
        score = (4 if p_type is not None else 0) + _filter_score(prompt, engine, model)
        if score > best_score:
            best, best_score = prompt, score
    return best


def _filter_score(prompt: TaskPrompt, engine: str | None, model: str | None) -> int:
    if prompt.models is None:
        return 0
    return 2 if f"{engine}/{model}" in prompt.models else 1


__all__ = [
    "PromptMessage",
    "TaskPrompt",
    "default_prompts",
    "fixed_variables",
    "judges_images",
    "select_prompt",
    "split_task",
    "task_key",
    "with_defaults",
]
