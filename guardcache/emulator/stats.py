"""``EmulatorStats``: the ``/admin/stats`` document as an immutable value you can diff.

The same type comes back whether the stats were read directly from an in-process emulator or over
HTTP from a thread or a child process, so tests are written once for every mode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .tokens import DEFAULT_SYSTEM_PREAMBLE, input_digest, prompt_digest


@dataclass(frozen=True, slots=True)
class EmulatorStats:
    """Counters since start or the last reset, plus the current state.

    ``requests_by_status`` keys are HTTP codes as strings (``"200"``, ``"429"``...), ``"dropped"``
    (the emulator closed the connection without a response) or ``"disconnected"`` (the client left
    first). ``requests_by_prompt`` maps ``prompt_digest(messages)`` (chat) or ``input_digest(text)``
    (classify) to calls; it is empty when the stats were fetched with ``prompts=False``.
    ``abandoned_*``: chat requests that reached a running slot and ended undelivered (the client
    disconnected, or the server stopped), with the prompt tokens they prefilled and the completion
    tokens decoded before the end; not in ``prompt_tokens``/``completion_tokens``, which count
    delivered answers. A cancelled speculative main call shows up here.
    """

    requests_total: int
    requests_by_status: Mapping[str, int]
    requests_by_endpoint: Mapping[str, int]
    requests_by_prompt: Mapping[str, int]
    distinct_prompts: int
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int
    requests_with_cached_tokens: int
    faults: Mapping[str, int]
    running: int
    waiting: int
    down: bool
    kv_cache: Mapping[str, Any]
    fault_config: Mapping[str, Any]
    model: str
    abandoned_requests: int = 0
    abandoned_prompt_tokens: int = 0
    abandoned_completion_tokens: int = 0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EmulatorStats:
        def frozen(key: str) -> Mapping[str, Any]:
            return MappingProxyType(dict(data.get(key) or {}))

        return cls(
            requests_total=int(data["requests_total"]),
            requests_by_status=frozen("requests_by_status"),
            requests_by_endpoint=frozen("requests_by_endpoint"),
            requests_by_prompt=frozen("requests_by_prompt"),
            distinct_prompts=int(data["distinct_prompts"]),
            prompt_tokens=int(data["prompt_tokens"]),
            completion_tokens=int(data["completion_tokens"]),
            cached_prompt_tokens=int(data["cached_prompt_tokens"]),
            requests_with_cached_tokens=int(data["requests_with_cached_tokens"]),
            faults=frozen("faults"),
            running=int(data["running"]),
            waiting=int(data["waiting"]),
            down=bool(data["down"]),
            kv_cache=frozen("kv_cache"),
            fault_config=frozen("fault_config"),
            model=str(data["model"]),
            abandoned_requests=int(data.get("abandoned_requests", 0)),
            abandoned_prompt_tokens=int(data.get("abandoned_prompt_tokens", 0)),
            abandoned_completion_tokens=int(data.get("abandoned_completion_tokens", 0)),
        )

    def status(self, code: int | str) -> int:
        """Requests that ended with ``code`` (0 if none)."""
        return int(self.requests_by_status.get(str(code), 0))

    def calls_for(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        system_preamble: str = DEFAULT_SYSTEM_PREAMBLE,
    ) -> int:
        """How many chat requests carried exactly these messages."""
        key = prompt_digest(messages, system_preamble=system_preamble)
        return int(self.requests_by_prompt.get(key, 0))

    def calls_for_prompt(self, prompt: str) -> int:
        """Calls for a prompt sent as the single user message (how guard checks are sent)."""
        return self.calls_for([{"role": "user", "content": prompt}])

    def calls_for_input(self, text: str) -> int:
        """How many ``/v1/classify`` requests carried exactly this input."""
        return int(self.requests_by_prompt.get(input_digest(text), 0))
