"""Property: for any text a user can type (surrogates, controls, RTL marks, huge), a rail either
yields a verdict or blocks: it never raises, and never allows without a verdict from the model."""

from __future__ import annotations

import asyncio
import json

import httpx2
from hypothesis import given, settings
from hypothesis import strategies as st

from guardcache.cache import LFUCache
from guardcache.checks.check import LLMCheck
from guardcache.checks.content_safety.parsers import parse_prompt_safety
from guardcache.config.prompts import default_prompts
from guardcache.flows import KNOWN_FLOWS, FlowRef
from guardcache.llm import ChatClient, RetryPolicy
from guardcache.rails.rail import Rail


class Model:
    """Answers like the NIM: unsafe when the user line mentions a bomb; counts the verdicts it gave."""

    def __init__(self) -> None:
        self.verdicts = 0

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        text = body["messages"][0]["content"]
        self.verdicts += 1
        start = text.index("<BEGIN CONVERSATION>\n\nuser: ") + len("<BEGIN CONVERSATION>\n\nuser: ")
        user_text = text[start : text.rindex("\n\n<END CONVERSATION>")]
        rating = "unsafe" if "bomb" in user_text else "safe"
        return httpx2.Response(
            200,
            json={
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": f'{{"User Safety": "{rating}"}}'},
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            },
        )


def make_rail(model: Model, on_error: str) -> Rail:
    ref = FlowRef.parse("content safety check input $model=content_safety")
    spec = KNOWN_FLOWS[ref.name]
    prompt = next(p for p in default_prompts() if p.base_task == "content_safety_check_input")
    client = ChatClient(
        "http://nim.test/v1",
        model="m",
        transport=httpx2.MockTransport(model),
        retry=RetryPolicy(max_retries=0),
    )
    check = LLMCheck(
        spec=spec,
        prompt=prompt,
        parser=parse_prompt_safety,
        client=client,
        cache=LFUCache(64),
        model_type="content_safety",
        model_name="m",
        max_input_chars=2000,
    )
    return Rail(ref=ref, spec=spec, check=check, on_error=on_error)


HOSTILE = st.one_of(
    st.text(alphabet=st.characters(codec=None), max_size=200),  # any code point, lone surrogates too
    st.text(alphabet=st.sampled_from("\u202e\u202d\u200b\u00a0\u2028\x00\x1c\x85\r\n\t bomb"), max_size=60),
    st.builds(lambda t, n: t * n, st.text(min_size=1, max_size=5), st.integers(300, 1200)),  # huge
)


@settings(max_examples=300, deadline=None)
@given(text=HOSTILE, on_error=st.sampled_from(["allow", "block"]))
def test_any_text_gets_a_verdict_or_a_block(text: str, on_error: str) -> None:
    model = Model()
    rail = make_rail(model, on_error)
    result = asyncio.run(rail.run({"user_input": text}))  # never raises
    if result.allowed:
        assert result.error is None and model.verdicts == 1  # allowed only on the model's word
    if "bomb" in text and model.verdicts:
        assert not result.allowed
