"""NeMo's self checks and Llama Guard rails: a task prompt asking "should this be blocked?".

``self check input``/``output`` run on a model of type ``self_check_input``/``self_check_output``
when one is configured, else on ``main`` (as NeMo); ``llama guard check input``/``output`` on the
``llama_guard`` model. Their prompts come from the user's ``prompts.yml`` (NeMo ships none).
Parameters follow NeMo's actions: the lowest temperature and NeMo's 1024-token default.
"""

from __future__ import annotations

from types import MappingProxyType

from guardcache.flows.spec import FlowSpec

_SELF_CHECK_PARAMS = MappingProxyType({"temperature": 0.001, "max_tokens": 1024})
_LLAMA_GUARD_PARAMS = MappingProxyType({"temperature": 0.0})

SELF_CHECK_INPUT = FlowSpec(
    name="self check input",
    direction="input",
    prompt_task="self_check_input",
    variables=("user_input",),
    models=("self_check_input", "main"),
    default_parser="is_content_safe",
    params=_SELF_CHECK_PARAMS,
)
SELF_CHECK_OUTPUT = FlowSpec(
    name="self check output",
    direction="output",
    prompt_task="self_check_output",
    variables=("user_input", "bot_response"),
    models=("self_check_output", "main"),
    default_parser="is_content_safe",
    params=_SELF_CHECK_PARAMS,
)
LLAMA_GUARD_INPUT = FlowSpec(
    name="llama guard check input",
    direction="input",
    prompt_task="llama_guard_check_input",
    variables=("user_input",),
    models=("llama_guard",),
    default_parser="is_content_safe",
    params=_LLAMA_GUARD_PARAMS,
)
LLAMA_GUARD_OUTPUT = FlowSpec(
    name="llama guard check output",
    direction="output",
    prompt_task="llama_guard_check_output",
    variables=("user_input", "bot_response"),
    models=("llama_guard",),
    default_parser="is_content_safe",
    params=_LLAMA_GUARD_PARAMS,
)

FLOWS = (SELF_CHECK_INPUT, SELF_CHECK_OUTPUT, LLAMA_GUARD_INPUT, LLAMA_GUARD_OUTPUT)
"""This check's flows, registered by ``guardcache.flows``."""

__all__ = ["FLOWS", "LLAMA_GUARD_INPUT", "LLAMA_GUARD_OUTPUT", "SELF_CHECK_INPUT", "SELF_CHECK_OUTPUT"]
