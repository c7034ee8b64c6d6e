"""``POST /beta/litellm_basic_guardrail_api``: LiteLLM's Generic Guardrail API, served by
guardcache's cached rails.

LiteLLM's proxy calls an external guard through this one contract (``guardrail:
generic_guardrail_api`` in its ``config.yaml``; the shape is LiteLLM's
``GenericGuardrailAPIRequest``/``GenericGuardrailAPIResponse``, read from litellm 1.108.7): a JSON
body with ``input_type`` (``"request"`` before the LLM call, ``"response"`` after it), ``texts``,
``images``, ``tool_calls``, ``tools``, ``structured_messages``, ``model`` and
``additional_provider_specific_params``; the answer's ``action`` is ``"NONE"`` (go on) or
``"BLOCKED"`` with a ``blocked_reason`` (LiteLLM raises it to its client), and guardcache's
``guardcache`` object beside them (LiteLLM reads only the fields it knows).

- ``"request"``: the input rails judge each text as the user's input, and each tool call (the
  conversation's, ``name(arguments)``); the images, when the config has a vision rail, with the
  last text, as one user message of text and images.
- ``"response"``: the output rails judge each text as the model's answer, and each of its tool
  calls.
- A block, or a rail without a verdict that the rules of docs/reliability.md block on, is
  ``BLOCKED``; ``blocked_reason`` names the rail and whether a verdict decided it. An input the
  guard cannot judge is ``BLOCKED``, never ``NONE``: images where no vision rail reads them, too.
- ``additional_provider_specific_params.config_id`` picks the config (needed when several are
  served). ``tools`` (the request's function definitions) and ``structured_messages`` (the same
  messages as ``texts``) are read by nothing: the definitions are the calling application's, and
  every text LiteLLM wants judged is in ``texts``.
- A request LiteLLM would never send (no ``input_type``, an unknown one, nothing to judge, a
  direction the config has no rails for, an unknown config) is a 4xx naming the field, which
  LiteLLM's default ``unreachable_fallback: fail_closed`` turns into a refused request.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.types import ASGIApp

from guardcache.openai_wire import RequestError, kind_of
from guardcache.rails.messages import read_messages
from guardcache.server import gateway
from guardcache.server.gateway import INPUT, OUTPUT, TEXT, TOOL_CALL, Checked, GatewayRoute, Item, Judging
from guardcache.server.responses import JSONResponse

INPUT_TYPES = {"request": INPUT, "response": OUTPUT}
"""LiteLLM's ``input_type`` -> the rails that judge it."""

IMAGES = "images"
"""An item's ``kind`` when it holds the request's images (with the last text, if any)."""


class LiteLLMHandler(GatewayRoute):
    """The LiteLLM guardrail route: a body in, ``{"action", "blocked_reason"}`` (or a 4xx) out."""

    MODE = "litellm"
    POSITION = "text"

    def judging(self, body: Any, started: float) -> Judging | ASGIApp:
        """LiteLLM's texts, images and tool calls as items (images no rail can judge: answered
        ``BLOCKED`` at once)."""
        config_id, direction, texts, images, calls = self._read(body)
        rails = self.state.rails[config_id]
        gateway.need_rails(rails.runner, direction, config_id, "input_type")
        if images and (direction == OUTPUT or rails.image_limits is None):
            return self._unjudged_images(config_id, direction, started)
        return Judging(config_id, rails.runner, self._items(config_id, direction, texts, images, calls))

    def answer(self, judging: Judging, checked: Checked) -> dict[str, Any]:
        """``NONE``, or ``BLOCKED`` with the reason (never a user's text)."""
        reason = blocked_reason(checked)
        return {"action": "NONE"} if reason is None else {"action": "BLOCKED", "blocked_reason": reason}

    def _read(self, body: Any) -> tuple[str, str, list[str], list[str], list[str]]:
        """The config id, the direction, the texts, the images and the tool calls' texts."""
        if not isinstance(body, dict):
            raise RequestError(f"The request body must be a JSON object, not {kind_of(body)}.")
        input_type = body.get("input_type")
        if input_type not in INPUT_TYPES:
            shown = repr(input_type) if isinstance(input_type, str) else kind_of(input_type)
            raise RequestError(
                f"'input_type' must be 'request' or 'response', not {shown}.",
                param="input_type",
                code="invalid_input_type",
            )
        params = body.get("additional_provider_specific_params")
        if params is not None and not isinstance(params, dict):
            raise RequestError(
                "'additional_provider_specific_params' must be an object.",
                param="additional_provider_specific_params",
            )
        try:
            config_id = gateway.select_config_id(self.state, (params, "additional_provider_specific_params."))
        except RequestError as exc:
            if exc.code == "config_id_required":
                exc.param = "additional_provider_specific_params.config_id"
                exc.message = (
                    f"Several configs are served ({', '.join(self.state.rails)}): name one with "
                    "'additional_provider_specific_params.config_id' in LiteLLM's guardrail entry."
                )
                exc.args = (exc.message,)
            raise
        texts = _strings(body.get("texts"), "texts")
        images = _strings(body.get("images"), "images")
        calls = gateway.tool_call_texts(body.get("tool_calls"), "tool_calls")
        if not texts and not images and not calls:
            raise RequestError(
                "Nothing to check: 'texts', 'images' and 'tool_calls' are empty.",
                param="texts",
                code="nothing_to_check",
            )
        return config_id, INPUT_TYPES[input_type], texts, images, calls

    def _items(
        self, config_id: str, direction: str, texts: list[str], images: list[str], calls: list[str]
    ) -> list[Item]:
        def variables(text: Any) -> dict[str, Any]:
            if direction == INPUT:
                return {"user_input": text, "history": ()}
            return {"user_input": "", "history": (), "bot_response": text}

        items = [Item(direction, i, TEXT, variables(text)) for i, text in enumerate(texts)]
        if images:  # (input only: checked by the caller) with the last text, as one user message
            last = texts[-1] if texts else None
            parts: list[dict[str, Any]] = [{"type": "text", "text": last}] if last is not None else []
            parts += [{"type": "image_url", "image_url": {"url": url}} for url in images]
            try:
                message = read_messages(
                    [{"role": "user", "content": parts}], images=self.state.rails[config_id].image_limits
                )[0]
            except (TypeError, ValueError) as exc:
                raise RequestError(f"'images': {exc}.", param="images") from None
            at = len(texts) - 1 if texts else 0
            if texts:
                items.pop()
            items.append(Item(direction, at, IMAGES, variables(message["content"])))
        items += [Item(direction, j, TOOL_CALL, variables(text)) for j, text in enumerate(calls)]
        return items

    def _unjudged_images(self, config_id: str, direction: str, started: float) -> ASGIApp:
        """Images no rail of the config can judge: blocked without a verdict (never NONE)."""
        self.state.metrics.observe_failed_turn(
            config_id, "litellm", f"blocked_{direction}", time.monotonic() - started
        )
        where = "the output rails never judge images" if direction == OUTPUT else "no vision rail reads them"
        return JSONResponse(
            {
                "action": "BLOCKED",
                "blocked_reason": (
                    f"guardcache: the images were not judged ({where} in config {config_id!r}): "
                    "blocked without a verdict"
                ),
                "guardcache": {"config_id": config_id, "reason": "no_verdict", "rails": [], "cache_hits": 0},
            }
        )


def blocked_reason(checked: Checked) -> str | None:
    """LiteLLM's ``blocked_reason``: which rail blocked what, and whether a verdict decided it
    (``verdict``) or the rail got none (``no verdict``, with the failure's class); None when
    nothing blocked. No user text: LiteLLM hands it to its client and its logs."""
    found = checked.blocked
    if found is None:
        return None
    outcome, result = found
    item = outcome.item
    what = "request" if item.direction == INPUT else "response"
    where = f"tool_calls[{item.at}]" if item.kind == TOOL_CALL else f"texts[{item.at}]"
    if result.error is None:
        categories = f"; categories: {', '.join(result.categories)}" if result.categories else ""
        return f"guardcache: rail '{result.flow}' blocked the {what} ({where}) by its verdict{categories}"
    return (
        f"guardcache: rail '{result.flow}' blocked the {what} ({where}) without a verdict "
        f"({result.error_kind})"
    )


def _strings(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RequestError(f"'{where}' must be an array of strings.", param=where)
    return value


__all__ = ["INPUT_TYPES", "LiteLLMHandler", "blocked_reason"]
