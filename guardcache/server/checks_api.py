"""``POST /v1/checks``: NeMo Guardrails' server's checks route, served by guardcache's cached rails.

A gateway or platform sends the conversation and keeps its own LLM call; the answer is NeMo's
(``{"status": "passed" | "blocked", "content", "rail"}``: a NeMo client works unchanged) with
guardcache's ``guardcache`` object beside it (each rail's verdict and whether the cache served it,
``reason``, ``no_verdict``). What runs, as NeMo's ``check_async`` (``guardrails.rail_types``
omitted):

- the input rails on the last user message, and on each tool result (role ``tool``: text nobody
  trusted, wherever it stands, as a chat turn judges them), each with the conversation before it
  as history;
- the output rails on the last message when it is the assistant's: its text, and each of its tool
  calls as ``name(arguments)``, with the last user message before it as the user's input.

``guardrails.rail_types`` (``["input"]``, ``["output"]`` or both) picks the directions instead
(output: the last assistant message, wherever it is). A direction asked for (or, when none is
named, every direction the messages call for) that the config has no rails for, or that has no
message to judge, is a 400 naming the field: guardcache never answers "passed" with no rail run.
Where NeMo answers such requests (and other bad ones) with 422, guardcache answers 400 in OpenAI's
error shape, as its other routes. ``guardrails.context`` is accepted and read by nothing: no
guardcache prompt reads per-request variables besides the messages. NeMo's ``status: "modified"``
never occurs (no guardcache rail rewrites text).
"""

from __future__ import annotations

from typing import Any

from guardcache.openai_wire import RequestError, kind_of
from guardcache.rails.messages import Message, history, last_index, message_text, read_messages
from guardcache.server import gateway
from guardcache.server.gateway import (
    INPUT,
    MESSAGE,
    OUTPUT,
    TOOL_CALL,
    TOOL_RESULT,
    Checked,
    GatewayRoute,
    Item,
    Judging,
)

RAIL_TYPES = (INPUT, OUTPUT)
"""The ``guardrails.rail_types`` guardcache runs; NeMo's others (``tool_call``, ``tool_result``,
``dialog``, ``retrieval``) are a 400 naming the field."""


class ChecksHandler(GatewayRoute):
    """The ``/v1/checks`` route: a body in, NeMo's answer (or a 4xx) out."""

    MODE = "checks"
    POSITION = "message"

    def judging(self, body: Any, started: float) -> Judging:
        """The request's messages and what runs on them (``context``: the messages and the index
        of the one whose text a passed answer returns)."""
        config_id, raw_messages, rail_types = self._read(body)
        rails = self.state.rails[config_id]
        try:
            messages = read_messages(raw_messages, images=rails.image_limits)
        except (TypeError, ValueError) as exc:
            text = str(exc)
            param = text.split(":", 1)[0].split(" ", 1)[0] if text.startswith("messages[") else "messages"
            raise RequestError(f"{text}.", param=param) from None
        items, content_at = _items(messages, raw_messages, rail_types, config_id, rails.runner)
        return Judging(config_id, rails.runner, items, (messages, content_at))

    def answer(self, judging: Judging, checked: Checked) -> dict[str, Any]:
        """NeMo's: passed with the checked text, or blocked with the refusal and the rail."""
        messages, content_at = judging.context
        found = checked.blocked
        if found is None:
            content = messages[content_at]["content"] if content_at is not None else ""
            return {"status": "passed", "content": message_text(content)}
        user_at = last_index(messages, "user")
        refusal = judging.runner.refusal(messages[user_at]["content"] if user_at is not None else "")
        return {"status": "blocked", "content": refusal, "rail": found[1].flow}

    def _read(self, body: Any) -> tuple[str, list[Any], tuple[str, ...] | None]:
        """The config id, the messages (NeMo's ``context`` messages left out) and the rail types
        asked for (None: from the messages)."""
        if not isinstance(body, dict):
            raise RequestError(f"The request body must be a JSON object, not {kind_of(body)}.")
        guardrails = body.get("guardrails")
        if guardrails is None:
            guardrails = {}
        elif not isinstance(guardrails, dict):
            raise RequestError(
                f"'guardrails' must be an object, not {kind_of(guardrails)}.", param="guardrails"
            )
        if guardrails.get("state") is not None:
            raise RequestError(
                "'guardrails.state': a conversation state is not accepted.", param="guardrails.state"
            )
        context = guardrails.get("context")
        if context is not None and not isinstance(context, dict):
            raise RequestError("'guardrails.context' must be an object.", param="guardrails.context")
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise RequestError(f"'model' must be a string, not {kind_of(model)}.", param="model")
        sources = ((guardrails, "guardrails."), (body, ""))
        config_id = gateway.select_config_id(self.state, *sources, model=model or None)
        raw_messages = body.get("messages")
        if not isinstance(raw_messages, list):
            raise RequestError(
                f"'messages' must be an array of messages, not {kind_of(raw_messages)}.", param="messages"
            )
        raw_messages = [m for m in raw_messages if not (isinstance(m, dict) and m.get("role") == "context")]
        if not raw_messages:
            raise RequestError("'messages' is empty: send the messages to check.", param="messages")
        return config_id, raw_messages, _rail_types(guardrails.get("rail_types"))


def _rail_types(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    where = "guardrails.rail_types"
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise RequestError(f"'{where}' must be a non-empty array of rail types (input, output).", param=where)
    for v in value:
        if v not in RAIL_TYPES:
            raise RequestError(
                f"'{where}': rail type {v!r} is not run by guardcache (it runs: input, output).",
                param=where,
                code="unsupported_rail_type",
            )
    return tuple(dict.fromkeys(value))


def _items(
    messages: list[Message],
    raw: list[Any],
    rail_types: tuple[str, ...] | None,
    config_id: str,
    runner: Any,
) -> tuple[list[Item], int | None]:
    """What to judge, and the index of the message whose text a passed answer returns (NeMo's
    ``content``: the assistant's when the output rails ran, else the user's)."""
    user_at = last_index(messages, "user")
    tools_at = [i for i, message in enumerate(messages) if message["role"] == "tool"]
    bot_last = messages[-1]["role"] == "assistant"
    if rail_types is None:
        directions = []
        if (user_at is not None or tools_at) and runner.input_rails:
            directions.append(INPUT)
        if bot_last and runner.output_rails:
            directions.append(OUTPUT)
        if not directions:
            raise RequestError(
                f"Nothing to check: config {config_id!r} has "
                f"{'no input rails' if not runner.input_rails else 'input rails'} and "
                f"{'no output rails' if not runner.output_rails else 'output rails'}, and the "
                "messages need a user message or tool result (input rails) or end with the "
                "assistant's (output rails).",
                param="messages",
                code="nothing_to_check",
            )
    else:
        directions = list(rail_types)
        for direction in directions:
            gateway.need_rails(runner, direction, config_id, "guardrails.rail_types")
    items: list[Item] = []
    content_at = user_at
    if INPUT in directions:
        if user_at is None and not tools_at:
            raise RequestError(
                "'guardrails.rail_types': the input rails need a user message or a tool result.",
                param="messages",
                code="nothing_to_check",
            )
        if user_at is not None:
            items.append(Item(INPUT, user_at, MESSAGE, _input(messages, user_at)))
        for i in tools_at:
            items.append(Item(INPUT, i, TOOL_RESULT, _input(messages, i)))
    if OUTPUT in directions:
        bot_at = last_index(messages, "assistant")
        if bot_at is None:
            raise RequestError(
                "'guardrails.rail_types': the output rails need an assistant message.",
                param="messages",
                code="nothing_to_check",
            )
        content_at = bot_at
        asked = last_index(messages[:bot_at], "user")
        base = {
            "user_input": messages[asked]["content"] if asked is not None else "",
            "history": history(messages, asked if asked is not None else 0),
        }
        calls = raw[bot_at].get("tool_calls") if isinstance(raw[bot_at], dict) else None
        texts = gateway.tool_call_texts(calls, f"messages[{bot_at}].tool_calls")
        content = messages[bot_at]["content"]
        if content or not texts:  # an assistant turn that only called tools: its calls are judged
            items.append(Item(OUTPUT, bot_at, MESSAGE, {**base, "bot_response": content}))
        for text in texts:
            items.append(Item(OUTPUT, bot_at, TOOL_CALL, {**base, "bot_response": text}))
    return items, content_at


def _input(messages: list[Message], at: int) -> dict[str, Any]:
    content = messages[at]["content"]
    if messages[at]["role"] == "tool":
        content = message_text(content)
    return {"user_input": content, "history": history(messages, at)}


__all__ = ["RAIL_TYPES", "ChecksHandler"]
