"""NemoGuard Content Safety rails: ``content safety check input|output $model=<type>``.

The prompt (shipped byte-exact in ``guardcache/prompts/content_safety.yml``, or the user's, e.g. a
Llama Guard or ShieldGemma prompt naming ``output_parser: is_content_safe``) is rendered and sent as
it is; temperature ~0 as NeMo's action. Templates may read ``reasoning_enabled``
(``rails.config.content_safety.reasoning.enabled``: Nemotron's ``/think`` switch).
"""

from __future__ import annotations

from types import MappingProxyType

from guardcache.flows.spec import FlowSpec

_PARAMS = MappingProxyType({"temperature": 1e-20})

INPUT = FlowSpec(
    name="content safety check input",
    direction="input",
    required_args=("model",),
    prompt_task="content_safety_check_input",
    variables=("user_input",),
    default_parser="nemoguard_parse_prompt_safety",
    params=_PARAMS,
)
OUTPUT = FlowSpec(
    name="content safety check output",
    direction="output",
    required_args=("model",),
    prompt_task="content_safety_check_output",
    variables=("user_input", "bot_response"),
    default_parser="nemoguard_parse_response_safety",
    params=_PARAMS,
)

FLOWS = (INPUT, OUTPUT)
"""This check's flows, registered by ``guardcache.flows``."""

__all__ = ["FLOWS", "INPUT", "OUTPUT"]
