"""Configuration of the NIM emulator: frozen values validated on construction.

Every constant of the latency and cache model lives here so a benchmark can state exactly which
backend it ran against (``EmulatorConfig.to_dict()``), and so the child-process mode can hand the
whole configuration to ``python -m guardcache.emulator`` as one JSON document.

Defaults model an 8B NemoGuard NIM on one H100 (see ``LatencyConfig``); ``time_scale=0`` turns every
modelled delay off for fast tests without changing token or cache accounting.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from guardcache.config.files import ConfigReader
from guardcache.errors import ConfigError

ReuseMode = Literal["early", "after_finish", "off"]
CachedTokensField = Literal["always", "nonzero", "never"]

REUSE_MODES: tuple[str, ...] = get_args(ReuseMode)
CACHED_TOKENS_FIELDS: tuple[str, ...] = get_args(CachedTokensField)
BLOCK_SIZES: tuple[int, ...] = (16, 32, 64, 128)

DEFAULT_MODEL = "nvidia/llama-3.1-nemoguard-8b-content-safety"


def _require(ok: bool, name: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"emulator config field {name!r}: {message}")


def _non_negative(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        _require(
            isinstance(value, int | float) and not isinstance(value, bool),
            name,
            f"must be a number, got {value!r}",
        )
        _require(math.isfinite(value) and value >= 0, name, f"must be >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class LatencyConfig:
    """Timing of one request; all milliseconds are multiplied by ``time_scale`` before sleeping.

    A request costs ``request_overhead_ms`` (HTTP, tokenization, scheduling in the NIM frontend),
    then waits for one of ``max_running`` slots (FIFO), then prefill:
    ``max(ttft_floor_ms, ttft_base_ms + prefill_ms_per_token * uncached_tokens)``, which yields the
    first token; each further token costs ``decode_base_ms + decode_ms_per_running * running``.

    Calibration (8B model, one H100, per the reference): TTFT is the reference's 4 ms + 0.03 ms per
    uncached token with a 5 ms floor. A warm content-safety check is ~400 prompt tokens with 256
    cached, so prefill is ~8.4 ms; a "safe" answer is 6 tokens and an unsafe one with two categories
    ~29, which gives ~61 ms and ~190 ms end to end, the reference's figures. Those two figures pin
    the two free constants: 5.6 ms per decoded token (the reference's 4.6 + 0.03 x concurrency
    formula is too fast to reach 190 ms, its BF16 6.5 too slow for 60-70 ms) and 24 ms of fixed
    per-request overhead. 64 running requests, like a typical NIM max batch.

    ``/v1/classify`` (NemoGuard JailbreakDetect: an embedding model and a small classifier head, one
    forward pass, no decoding) takes ``classify_ms + classify_ms_per_token * input_tokens`` in a
    running slot: 14 ms for a 100-token input, 32 ms for 1,000, the 10-30 ms such a NIM answers in.
    """

    time_scale: float = 1.0
    request_overhead_ms: float = 24.0
    ttft_base_ms: float = 4.0
    prefill_ms_per_token: float = 0.03
    ttft_floor_ms: float = 5.0
    decode_base_ms: float = 5.6
    decode_ms_per_running: float = 0.03
    max_running: int = 64
    classify_ms: float = 12.0
    classify_ms_per_token: float = 0.02

    def __post_init__(self) -> None:
        _non_negative(
            self,
            "time_scale",
            "request_overhead_ms",
            "ttft_base_ms",
            "prefill_ms_per_token",
            "ttft_floor_ms",
            "decode_base_ms",
            "decode_ms_per_running",
            "classify_ms",
            "classify_ms_per_token",
        )
        _require(
            isinstance(self.max_running, int) and self.max_running >= 1,
            "max_running",
            f"must be an integer >= 1, got {self.max_running!r}",
        )


@dataclass(frozen=True, slots=True)
class KVCacheConfig:
    """The prefix cache: ``block_size`` tokens per block, ``capacity_tokens`` of blocks in total.

    64-token blocks sit in the middle of TensorRT-LLM's (NIM's engine) 32-128 range and reproduce the
    reference's 256 reusable tokens for the content-safety prompt. 262,144 tokens is about half of
    what an 80 GB H100 can hold for Llama-3.1-8B in BF16 (128 KiB per token) after weights and
    activations: large enough that only a deliberately small capacity ever evicts.
    """

    reuse: ReuseMode = "early"
    block_size: int = 64
    capacity_tokens: int = 262_144

    def __post_init__(self) -> None:
        _require(self.reuse in REUSE_MODES, "reuse", f"must be one of {REUSE_MODES}")
        _require(self.block_size in BLOCK_SIZES, "block_size", f"must be one of {BLOCK_SIZES}")
        _require(
            isinstance(self.capacity_tokens, int) and self.capacity_tokens >= 0,
            "capacity_tokens",
            f"must be an integer >= 0, got {self.capacity_tokens!r}",
        )

    @property
    def capacity_blocks(self) -> int:
        """Whole blocks that fit: a partial block can never hold reusable state."""
        return self.capacity_tokens // self.block_size


FAULT_RATE_FIELDS: tuple[str, ...] = (
    "error_rate",
    "rate_limit_rate",
    "hang_rate",
    "malformed_rate",
    "invalid_body_rate",
    "drop_rate",
    "duplicate_key_rate",
)


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """Per-request fault probabilities; at most one fault hits a request, so they must sum to <= 1.

    ``hang_seconds`` and ``retry_after_seconds`` are wall-clock values, NOT scaled by
    ``time_scale``: a hang exists to outlast a client's timeout even in a ``time_scale=0`` test.
    ``duplicate_key_rate``: a 200 whose content states each verdict twice, the second contradicting
    the first (``{"User Safety": "unsafe", "User Safety": "safe"}``; see ``model.duplicated``).
    """

    error_rate: float = 0.0
    rate_limit_rate: float = 0.0
    hang_rate: float = 0.0
    malformed_rate: float = 0.0
    invalid_body_rate: float = 0.0
    drop_rate: float = 0.0
    duplicate_key_rate: float = 0.0
    seed: int = 0
    hang_seconds: float = 300.0
    retry_after_seconds: int = 1

    def __post_init__(self) -> None:
        for name in FAULT_RATE_FIELDS:
            _non_negative(self, name)
            _require(getattr(self, name) <= 1, name, "must be a probability in [0, 1]")
        total = sum(getattr(self, name) for name in FAULT_RATE_FIELDS)
        _require(total <= 1 + 1e-9, "error_rate", f"fault rates sum to {total:.3f}, must be <= 1")
        _require(isinstance(self.seed, int), "seed", f"must be an integer, got {self.seed!r}")
        _non_negative(self, "hang_seconds")
        _require(
            isinstance(self.retry_after_seconds, int) and self.retry_after_seconds >= 0,
            "retry_after_seconds",
            f"must be an integer >= 0, got {self.retry_after_seconds!r}",
        )


@dataclass(frozen=True, slots=True)
class EmulatorConfig:
    """Everything one emulator instance needs; ``port=0`` asks the OS for a free port.

    ``cached_tokens_field`` mirrors real servers: TensorRT-LLM always sends
    ``usage.prompt_tokens_details``, vLLM only when cached > 0 (``nonzero``), others never.
    ``trailing_space`` appends the space the real content-safety NIM sometimes emits after its JSON,
    so clients are tested on stripping it. ``system_preamble`` is the text Llama-3.1's chat template
    puts in its default system block; it counts toward prompt tokens and the shared prefix.

    ``max_model_len`` is the context window in tokens (prompt + completion), 8192 like the NemoGuard
    NIMs; a longer chat request is refused with vLLM's HTTP 400 ("This model's maximum context
    length is ..."). ``max_body_bytes`` caps a request body (HTTP 413 beyond it). 0 turns either
    limit off.

    ``vision``: the model takes ``image_url`` parts (see ``images.py``); a model that does not
    answers a request with images 400, as a text-only server does. ``safety_guard``: the model is a
    content-safety guard whose chat template holds the safety prompt (Nemotron 3.5 Content Safety,
    the vision model of NeMo's ``content_safety_vision`` example): every request is the bare
    conversation, and the answer is ``User Safety: safe|unsafe`` lines (see ``model.py``).
    """

    host: str = "127.0.0.1"
    port: int = 0
    model: str = DEFAULT_MODEL
    api_key: str | None = None
    policy_path: str | None = None
    trailing_space: bool = True
    cached_tokens_field: CachedTokensField = "always"
    chars_per_token: int = 4
    default_max_tokens: int = 1024
    max_model_len: int = 8192
    max_body_bytes: int = 1_048_576
    system_preamble: str = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
    vision: bool = False
    safety_guard: bool = False
    latency: LatencyConfig = field(default_factory=LatencyConfig)
    kv_cache: KVCacheConfig = field(default_factory=KVCacheConfig)
    faults: FaultConfig = field(default_factory=FaultConfig)

    def __post_init__(self) -> None:
        _require(
            isinstance(self.port, int) and 0 <= self.port <= 65535,
            "port",
            f"must be an integer in [0, 65535], got {self.port!r}",
        )
        _require(bool(self.host), "host", "must not be empty")
        _require(bool(self.model), "model", "must not be empty")
        _require(
            self.cached_tokens_field in CACHED_TOKENS_FIELDS,
            "cached_tokens_field",
            f"must be one of {CACHED_TOKENS_FIELDS}",
        )
        _require(
            isinstance(self.chars_per_token, int) and 1 <= self.chars_per_token <= 64,
            "chars_per_token",
            f"must be an integer in [1, 64], got {self.chars_per_token!r}",
        )
        _require(
            isinstance(self.default_max_tokens, int) and self.default_max_tokens >= 1,
            "default_max_tokens",
            f"must be an integer >= 1, got {self.default_max_tokens!r}",
        )
        for name in ("max_model_len", "max_body_bytes"):
            value = getattr(self, name)
            _require(
                isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                name,
                f"must be an integer >= 0 (0 = no limit), got {value!r}",
            )
        _require(self.api_key is None or bool(self.api_key), "api_key", "must not be empty")
        for name in ("vision", "safety_guard"):
            value = getattr(self, name)
            _require(isinstance(value, bool), name, f"must be true or false, got {value!r}")
        for name, cls in _SECTIONS.items():
            _require(isinstance(getattr(self, name), cls), name, f"must be a {cls.__name__}")

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL for the configured (not necessarily bound) port."""
        return f"http://{self.host}:{self.port}/v1"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict that ``from_dict`` turns back into an equal config."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<dict>") -> EmulatorConfig:
        """Build from nested dicts (``{"latency": {"time_scale": 0}}``); unknown keys are errors."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: emulator config must be a mapping")
        top = _pick(cls, data, source, nested=set(_SECTIONS))
        for name, section_cls in _SECTIONS.items():
            if name in data:
                section = data[name]
                if isinstance(section, section_cls):
                    top[name] = section
                    continue
                if not isinstance(section, Mapping):
                    raise ConfigError(f"{source}: emulator config field {name!r} must be a mapping")
                top[name] = section_cls(**_pick(section_cls, section, f"{source}: {name}"))
        return cls(**top)

    @classmethod
    def from_file(cls, path: str | Path) -> EmulatorConfig:
        """Load a JSON or YAML file; every error names the file. Read as guardcache reads its own
        configs (``ConfigReader``: a bounded size, no FIFO, no alias bomb)."""
        path = Path(path)
        reader = ConfigReader()
        try:
            text = reader.read_text(path)
            data = json.loads(text) if path.suffix == ".json" else reader.parse_yaml(text, str(path))
        except (ValueError, RecursionError) as exc:  # JSON (the reader's errors name the file)
            raise ConfigError(f"{path}: cannot read emulator config: {exc}") from exc
        try:
            return cls.from_dict(data or {}, source=str(path))
        except ConfigError as exc:
            msg = str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}"
            raise ConfigError(msg) from exc

    def merged(self, **changes: Any) -> EmulatorConfig:
        """A copy with top-level fields replaced and section dicts merged into the sections.

        ``cfg.merged(latency={"time_scale": 0.2}, port=0)`` keeps every other latency constant.
        """
        data = self.to_dict()
        for key, value in changes.items():
            if key in _SECTIONS and isinstance(value, Mapping):
                data[key] = {**data[key], **value}
            elif key in _SECTIONS and dataclasses.is_dataclass(value):
                data[key] = dataclasses.asdict(value)  # type: ignore[arg-type]
            else:
                data[key] = value
        return EmulatorConfig.from_dict(data, source="merged()")


_SECTIONS: dict[str, type] = {
    "latency": LatencyConfig,
    "kv_cache": KVCacheConfig,
    "faults": FaultConfig,
}


def _pick(cls: type, data: Mapping[str, Any], source: str, nested: set[str] | None = None) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{source}: unknown emulator config field(s) {unknown}; known: {sorted(names)}")
    return {k: v for k, v in data.items() if k not in (nested or set())}
