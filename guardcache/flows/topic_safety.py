"""Topic control: is the user still on the topics the system prompt allows?

The request is NeMo's: a system message (the ``topic_safety_check_input $model=<type>`` prompt, with
NeMo's output restriction appended when the prompt does not already end with it), then the
conversation so far, then the user message; temperature 0.01, at most 10 tokens. The cache key covers
the system prompt (through the namespace), the history and the message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from guardcache.flows.spec import FlowSpec

OUTPUT_RESTRICTION = (
    'If any of the above conditions are violated, please respond with "off-topic". '
    'Otherwise, respond with "on-topic". '
    'You must respond with "on-topic" or "off-topic".'
)


def build_messages(rendered: list[dict[str, str]], variables: Mapping[str, Any]) -> list[dict[str, str]]:
    """System prompt + history + user message, from the rendered prompt's text."""
    system = "\n".join(m["content"] for m in rendered).strip()
    if not system.endswith(OUTPUT_RESTRICTION):
        system = f"{system}\n\n{OUTPUT_RESTRICTION}"
    history: Sequence[Mapping[str, str]] = variables.get("history") or ()
    return [
        {"role": "system", "content": system},
        *({"role": m["role"], "content": m["content"]} for m in history),
        {"role": "user", "content": variables["user_input"]},
    ]


TOPIC_SAFETY_INPUT = FlowSpec(
    name="topic safety check input",
    direction="input",
    required_args=("model",),
    prompt_task="topic_safety_check_input",
    variables=("user_input", "history"),
    default_parser="topic_safety",
    params=MappingProxyType({"temperature": 0.01, "max_tokens": 10}),
    build_messages=build_messages,
)

FLOWS = (TOPIC_SAFETY_INPUT,)
"""This check's flows, registered by ``guardcache.flows``."""

__all__ = ["FLOWS", "OUTPUT_RESTRICTION", "TOPIC_SAFETY_INPUT", "build_messages"]
