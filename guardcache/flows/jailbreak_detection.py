"""``jailbreak detection model``: POST ``{"input": text}`` to the JailbreakDetect NIM.

The endpoint is ``rails.config.jailbreak_detection.nim_base_url`` + ``nim_server_endpoint`` (bearer
token from its ``api_key_env_var``); the answer is ``{"jailbreak": bool, "score": float}``. Verdicts
are cached under the ``jailbreak_detection`` type: with the defaults, or with the ``cache:`` of a
model entry of that type (optional; ``cache: {enabled: false}`` there turns it off). Unlike NeMo, a
failed call is not "not a jailbreak": it is a failure the rail's ``on_error`` decides (block by
default).
"""

from __future__ import annotations

from guardcache.flows.spec import FlowSpec

MODEL_TYPE = "jailbreak_detection"

JAILBREAK_DETECTION = FlowSpec(
    name="jailbreak detection model",
    direction="input",
    variables=("user_input",),
    backend="classify",
    models=(MODEL_TYPE,),
    model_required=False,
    default_parser="jailbreak_detection",
)

FLOWS = (JAILBREAK_DETECTION,)
"""This check's flows, registered by ``guardcache.flows``."""

__all__ = ["FLOWS", "JAILBREAK_DETECTION", "MODEL_TYPE"]
