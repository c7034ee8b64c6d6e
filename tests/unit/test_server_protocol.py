"""Reading chat-completions requests: what passes to the main model, what is refused, and how."""

from __future__ import annotations

import json
from typing import Any

import pytest

from guardcache.openai_wire import RequestError
from guardcache.server.answers import DONE, ChunkWriter, chat_completion, error_event
from guardcache.server.protocol import parse_chat, parse_json

FUNCTION = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
USER = [{"role": "user", "content": "hi"}]


def test_a_minimal_request() -> None:
    chat = parse_chat({"messages": USER})
    assert chat.messages == [{"role": "user", "content": "hi"}]
    assert (chat.model, chat.config_id, chat.stream, chat.include_usage, chat.params) == (
        None,
        None,
        False,
        False,
        {},
    )


def test_generation_parameters_pass_through_and_nulls_are_dropped() -> None:
    chat = parse_chat(
        {
            "messages": USER,
            "model": "m",
            "temperature": 0.5,
            "top_p": 1,
            "max_tokens": 12,
            "stop": ["\n"],
            "seed": 3,
            "presence_penalty": None,
            "user": "u-1",
            "stream": True,
            "stream_options": {"include_usage": True},
            "metadata": {"ignored": True},
        }
    )
    assert chat.params == {
        "temperature": 0.5,
        "top_p": 1,
        "max_tokens": 12,
        "stop": ["\n"],
        "seed": 3,
        "user": "u-1",
    }
    assert chat.stream and chat.include_usage and chat.model == "m"


def test_roles_are_read_as_the_rails_read_them() -> None:
    chat = parse_chat(
        {"messages": [{"role": "developer", "content": "x"}, {"role": "human", "content": "y"}]}
    )
    assert [m["role"] for m in chat.messages] == ["system", "user"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([], None),
        ({"messages": None}, "messages"),
        ({"messages": {}}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "assistant", "content": "x"}]}, "messages"),
        ({"messages": [{"content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": {"a": 1}}]}, "messages[0].content"),
        ({"messages": USER, "temperature": 3}, "temperature"),
        ({"messages": USER, "temperature": True}, "temperature"),
        ({"messages": USER, "temperature": float("nan")}, "temperature"),
        ({"messages": USER, "max_tokens": 1.5}, "max_tokens"),
        ({"messages": USER, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"messages": USER, "stream": 1}, "stream"),
        ({"messages": USER, "stream_options": []}, "stream_options"),
        ({"messages": USER, "stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
        ({"messages": USER, "n": 3}, "n"),
        ({"messages": USER, "tools": [{"type": "function"}]}, "tools[0].function"),
        ({"messages": USER, "tools": {"type": "function"}}, "tools"),
        ({"messages": USER, "tools": [FUNCTION] * 129}, "tools"),
        ({"messages": USER, "tools": [{"type": "web_search"}]}, "tools[0].type"),
        (
            {"messages": USER, "tools": [{"type": "function", "function": {"name": "a b"}}]},
            "tools[0].function.name",
        ),
        (
            {"messages": USER, "tools": [{**FUNCTION, "function": {"name": "f", "parameters": []}}]},
            "tools[0].function.parameters",
        ),
        ({"messages": USER, "tool_choice": "sometimes"}, "tool_choice"),
        ({"messages": USER, "tool_choice": "required"}, "tool_choice"),
        (
            {
                "messages": USER,
                "tools": [FUNCTION],
                "tool_choice": {"type": "function", "function": {"name": "g"}},
            },
            "tool_choice",
        ),
        ({"messages": USER, "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"messages": USER, "functions": [{"name": "f"}]}, "functions"),
        (
            {"messages": [{"role": "assistant", "content": None, "tool_calls": {"id": "x"}}, *USER]},
            "messages[0].tool_calls",
        ),
        ({"messages": USER, "config_id": ["a"]}, "config_id"),
        ({"messages": USER, "config_ids": ["a", "b"]}, "config_ids"),
        ({"messages": USER, "config_id": "a", "config_ids": ["b"]}, "config_ids"),
    ],
)
def test_what_cannot_be_served_is_a_400_naming_the_field(body: Any, param: str | None) -> None:
    with pytest.raises(RequestError) as caught:
        parse_chat(body)
    assert caught.value.status == 400 and caught.value.param == param
    error = caught.value.body()["error"]
    assert error["type"] == "invalid_request_error" and error["message"].endswith(".")


def test_harmless_tool_fields_are_accepted() -> None:
    """No tools, a choice of none and one choice: served, and what reaches the main model is the
    choice alone (an empty tool list and n=1 say nothing it needs)."""
    chat = parse_chat({"messages": USER, "tools": [], "tool_choice": "none", "n": 1})
    assert chat.messages == USER
    assert chat.params == {"tool_choice": "none"}


def test_tool_fields_reach_the_main_model_as_they_were_sent() -> None:
    choice = {"type": "function", "function": {"name": "f"}}
    body = {"messages": USER, "tools": [FUNCTION], "tool_choice": choice, "parallel_tool_calls": False}
    params = parse_chat(body).params
    assert params == {"tools": [FUNCTION], "tool_choice": choice, "parallel_tool_calls": False}


def test_a_tool_schema_deeper_than_the_json_depth_limit_is_a_400_naming_the_tool() -> None:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(70):
        schema = {"type": "object", "properties": {"a": schema}}
    body = {
        "messages": USER,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}],
    }
    with pytest.raises(RequestError) as caught:
        parse_json(json.dumps(body).encode())
    assert caught.value.param == "tools[0].function.parameters" and caught.value.code == "json_too_deep"


def test_config_ids_as_nemo_sends_them() -> None:
    assert parse_chat({"messages": USER, "config_ids": ["shop"]}).config_id == "shop"
    assert parse_chat({"messages": USER, "config_id": "shop", "config_ids": ["shop"]}).config_id == "shop"


@pytest.mark.parametrize("raw", [b"", b"{", b"\xff\xfe", b"nope"])
def test_bodies_that_are_not_json(raw: bytes) -> None:
    with pytest.raises(RequestError) as caught:
        parse_json(raw)
    assert caught.value.code == "invalid_json"


def test_the_completion_body_is_openais_with_the_extension() -> None:
    body = chat_completion("id-1", "m", "text", "content_filter", None, {"blocked": True})
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "text"}
    assert body["choices"][0]["finish_reason"] == "content_filter"
    assert body["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    assert body["guardcache"] == {"blocked": True} and body["object"] == "chat.completion"


def _event(data: bytes) -> Any:
    assert data.startswith(b"data: ") and data.endswith(b"\n\n")
    return json.loads(data[6:-2])


def test_chunks_are_valid_json_events() -> None:
    writer = ChunkWriter("chatcmpl-1", 'model "quoted"', created=5)
    first = _event(writer.content('he said "hi"\n', first=True))
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": 'he said "hi"\n'}
    assert (
        first["model"] == 'model "quoted"'
        and first["created"] == 5
        and first["object"] == "chat.completion.chunk"
    )
    assert _event(writer.content("ünï"))["choices"][0]["delta"] == {"content": "ünï"}
    final = _event(writer.final("content_filter", {"blocked": True, "rail": "r"}))
    assert final["choices"][0]["finish_reason"] == "content_filter" and final["choices"][0]["delta"] == {}
    assert final["guardcache"] == {"blocked": True, "rail": "r"}
    assert _event(error_event("boom", "upstream_error", "x"))["error"]["code"] == "x"
    assert DONE == b"data: [DONE]\n\n"


def test_events_are_the_bytes_of_the_one_json_writer() -> None:
    """Byte for byte: compact UTF-8 JSON, written by ``dumps_body`` as the plain answers are (a
    non-ASCII model name or text is UTF-8, never ``\\u`` escapes; control characters are escaped)."""
    writer = ChunkWriter("chatcmpl-1", "mödel", created=5)
    head = 'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":5,"model":"mödel"'
    choice = head + ',"choices":[{"index":0,"delta":'
    open_ = '"logprobs":null,"finish_reason":null}]}\n\n'
    first = writer.content('ü "q"\n\x00', first=True)
    assert first == (choice + '{"role":"assistant","content":"ü \\"q\\"\\n\\u0000"},' + open_).encode()
    assert writer.content("x") == (choice + '{"content":"x"},' + open_).encode()
    extension = {"blocked": True, "rail": "r", "no_verdict": ["é"], "config_id": "c"}
    assert (
        writer.final("content_filter", extension)
        == (
            choice + '{},"logprobs":null,"finish_reason":"content_filter"}],'
            '"guardcache":{"blocked":true,"rail":"r","no_verdict":["é"],"config_id":"c"}}\n\n'
        ).encode()
    )
    usage = type("U", (), {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7})()
    counts = '{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}'
    assert writer.usage(usage) == (head + ',"choices":[],"usage":' + counts + "}\n\n").encode()
    assert writer.usage(None) == (head + ',"choices":[],"usage":null}\n\n').encode()
    assert error_event("boom", "upstream_error", "x") == (
        b'data: {"error":{"message":"boom","type":"upstream_error","param":null,"code":"x"}}\n\n'
    )
