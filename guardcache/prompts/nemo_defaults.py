"""What NeMo Guardrails' task manager gives every prompt when the config says nothing: the general
instructions and the sample conversation of NeMo's ``default_config.yml``
(``nemoguardrails/rails/llm/default_config.yml``; NVIDIA/NeMo-Guardrails, Apache-2.0).

NeMo renders ``{{ general_instructions }}`` as the content of the config's first ``instructions``
entry of type ``general`` and ``{{ sample_conversation }}`` (and ``sample_conversation_two_turns``)
as the config's ``sample_conversation``; a config without them gets these defaults. Kept as the YAML
NeMo ships and read with the same loader, so a guard prompt that reads them renders NeMo's bytes.
"""

from __future__ import annotations

import functools

import yaml

_DEFAULT_CONFIG = """\
sample_conversation: |
  user "Hello there!"
    express greeting
  bot express greeting
    "Hello! How can I assist you today?"
  user "What can you do for me?"
    ask about capabilities
  bot respond about capabilities
    "As an AI assistant, I can help you with a wide range of tasks. This includes question answering on various topics, generating text for various purposes and providing suggestions based on your preferences."
  user "Tell me a bit about the history of NVIDIA."
    ask general question
  bot response for general question
    "NVIDIA is a technology company that specializes in designing and manufacturing graphics processing units (GPUs) and other computer hardware. The company was founded in 1993 by Jen-Hsun Huang, Chris Malachowsky, and Curtis Priem."
  user "tell me more"
    request more information
  bot provide more information
    "Initially, the company focused on developing 3D graphics processing technology for the PC gaming market. In 1999, NVIDIA released the GeForce 256, the world's first GPU, which was a major breakthrough for the gaming industry. The company continued to innovate in the GPU space, releasing new products and expanding into other markets such as professional graphics, mobile devices, and artificial intelligence."
  user "thanks"
    express appreciation
  bot express appreciation and offer additional help
    "You're welcome. If you have any more questions or if there's anything else I can help you with, please don't hesitate to ask."

instructions:
  - type: "general"
    content:
      Below is a conversation between a helpful AI assistant and a user.
      The bot is designed to generate human-like text based on the input that it receives.
      The bot is talkative and provides lots of specific details.
      If the bot does not know the answer to a question, it truthfully says it does not know.
"""  # noqa: E501 (NeMo's file, byte for byte)


@functools.cache
def _defaults() -> dict[str, object]:
    data: dict[str, object] = yaml.safe_load(_DEFAULT_CONFIG)
    return data


def default_sample_conversation() -> str:
    """NeMo's default ``sample_conversation`` (a Colang 1 dialog, ending with a newline)."""
    value = _defaults()["sample_conversation"]
    assert isinstance(value, str)
    return value


def default_instructions() -> list[dict[str, str]]:
    """NeMo's default ``instructions``: one ``general`` instruction."""
    value = _defaults()["instructions"]
    assert isinstance(value, list)
    return [dict(item) for item in value]


def general_instructions(instructions: list[dict[str, str]] | None) -> str:
    """What NeMo renders as ``general_instructions``: the content of the first ``general``
    instruction, ``""`` if there is none (NeMo's ``_get_general_instructions``)."""
    for instruction in instructions or ():
        if instruction.get("type") == "general":
            return instruction.get("content", "")
    return ""


__all__ = ["default_instructions", "default_sample_conversation", "general_instructions"]
