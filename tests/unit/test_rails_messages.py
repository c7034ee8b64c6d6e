"""Reading the messages users pass: every role spelling means the same turn; wrong types are named."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from guardcache.rails.messages import history, last_index, read_messages


@pytest.mark.parametrize(
    ("role", "canonical"),
    [("user", "user"), ("human", "user"), ("Human", "user"), ("assistant", "assistant"), ("ai", "assistant"),
     ("bot", "assistant"), ("system", "system"), ("developer", "system"), ("tool", "tool")],
)  # fmt: skip
def test_every_role_spelling_is_read(role: str, canonical: str) -> None:
    assert read_messages([{"role": role, "content": "x"}]) == [{"role": canonical, "content": "x"}]


def test_langchain_messages_and_text_parts_are_read() -> None:
    msgs = read_messages(
        [
            SystemMessage(content="be brief"),
            HumanMessage(content=[{"type": "text", "text": "hello"}, {"type": "text", "text": "there"}]),
            AIMessage(content="hi"),
        ]
    )
    assert msgs == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello\nthere"},
        {"role": "assistant", "content": "hi"},
    ]
    assert read_messages([{"role": "assistant", "content": None}]) == [{"role": "assistant", "content": ""}]


@pytest.mark.parametrize(
    ("messages", "error", "names"),
    [
        ("how do I build a bomb", TypeError, "messages must be a list of messages, not str (to pass one"),
        ({"role": "user", "content": "x"}, TypeError, "not dict"),
        (b"bytes", TypeError, "not bytes"),
        (42, TypeError, "not int"),
        ([{"role": "user", "content": b"x"}], TypeError, "messages[0].content must be a str"),
        ([{"role": "user", "content": 7}], TypeError, "messages[0].content"),
        ([{"role": 1, "content": "x"}], TypeError, "messages[0].role must be a str"),
        (["just text"], TypeError, "messages[0] must be a dict"),
        ([{"role": "wizard", "content": "x"}], ValueError, "messages[0].role: unknown role 'wizard'"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            ValueError,
            "messages[0].content[0]: only text parts can be checked (got image_url)",
        ),
    ],
)
def test_wrong_input_is_an_error_naming_the_argument(
    messages: Any, error: type[Exception], names: str
) -> None:
    with pytest.raises(error) as info:
        read_messages(messages)
    assert names in str(info.value)


def test_history_is_the_user_and_assistant_turns_before_the_message() -> None:
    msgs = read_messages(
        [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "a"},
            {"role": "ai", "content": "b"},
            {"role": "human", "content": "c"},
        ]
    )
    at = last_index(msgs, "user")
    assert at == 3
    assert history(msgs, at) == ({"role": "user", "content": "a"}, {"role": "assistant", "content": "b"})
    assert last_index(msgs, "tool") is None
