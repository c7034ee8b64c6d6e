"""The package's default prompts, the user's overrides, and picking the prompt for a check.

Defaults ship as YAML data in this package (one file per family of checks, e.g.
``content_safety.yml``) in the same format a user writes in ``prompts.yml``. A user prompt replaces
the default with the same ``(base task, model type)``; everything else keeps the default.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from importlib import resources
from typing import Any

from pydantic import ValidationError

from guardcache.config.errors import Loc, config_error, describe
from guardcache.config.files import parse_mapping
from guardcache.errors import ConfigError
from guardcache.prompts.templates import TaskPrompt, split_task

_PACKAGE = "guardcache.prompts"


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


__all__ = ["default_prompts", "select_prompt", "task_key", "with_defaults"]
