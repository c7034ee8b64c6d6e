"""``TaskPrompt``: one prompt template for one task, as written in a ``prompts.yml``.

The schema is NeMo Guardrails' (``task``, ``content`` or ``messages``, ``output_parser``,
``max_tokens``, ``models``, ``stop``, ``max_length``, ``mode``) so a NeMo prompts file loads unchanged.
A task may name the model type it is for with NeMo's suffix,
``content_safety_check_input $model=content_safety``: the same check can run against several guard
models, each with the prompt format it was trained on.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from guardcache.config.errors import FieldError
from guardcache.config.fields import PositiveInt
from guardcache.flows import split_ref


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

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str | None = None
    content: str


class TaskPrompt(BaseModel):
    """The prompt of one task (optionally for one model type): a template and how to read the answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

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


__all__ = ["PromptMessage", "TaskPrompt", "split_task"]
