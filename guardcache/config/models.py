"""Model entries of ``config.yml``: which engine serves a model, its API key, its cache.

Part of the config boundary (see ``guardcache.config``): pydantic models, validated once at load time,
immutable afterwards. A model's API key comes from the environment variable named by
``api_key_env_var``, read at call time so a rotated key is picked up without a reload. A key written
in the file (``parameters.api_key``, as NeMo's own examples do with vLLM's placeholder ``EMPTY``) is
accepted with a load warning (``RailsConfig`` names the field): it is taken out of ``parameters`` at
validation and kept apart (:meth:`ModelConfig.api_key`), so it is in no ``repr``, no error message,
no request body and no cache namespace.

The rest of ``parameters`` is parsed once, at validation (:mod:`guardcache.config.parameters`), into
``ModelConfig.transport`` (how to reach the server: what the client is built from) and
``ModelConfig.generation`` (the request body fields); nothing outside the config reads the dict.

Every model gets a verdict cache unless its ``cache: {enabled: false}`` says otherwise (NeMo's
default is off; guardcache exists to cache guard verdicts). ``main``'s holds only the verdicts of the
checks that run on it (self check input and output without a model of their own), and is built only
when one does (``rails/caches.py``); the main model's answers are never cached.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from guardcache.config.errors import FieldError
from guardcache.config.fields import (
    STRICT,
    EnvVarName,
    PositiveFloat,
    PositiveInt,
    null_is_empty,
)
from guardcache.config.keys import KeyHolder
from guardcache.config.parameters import (
    API_KEY_KEYS,
    GenerationSettings,
    Parameters,
    parse_parameters,
)
from guardcache.config.redis_tier import RedisConfig
from guardcache.errors import ConfigError
from guardcache.llm.settings import TransportSettings

Engine = Literal["nim", "nvidia_ai_endpoints", "openai", "vllm_openai"]
"""Engines guardcache serves, all with one OpenAI-compatible client."""

DEFAULT_BASE_URLS: dict[str, str | None] = {
    "nim": "https://integrate.api.nvidia.com/v1",
    "nvidia_ai_endpoints": "https://integrate.api.nvidia.com/v1",
    "openai": "https://api.openai.com/v1",
    "vllm_openai": None,  # self-hosted: there is no sensible default
}

NVIDIA_ENGINES = frozenset({"nim", "nvidia_ai_endpoints"})
DEFAULT_NVIDIA_KEY_VAR = "NVIDIA_API_KEY"
"""The key NVIDIA engines read when a model names no ``api_key_env_var`` (NeMo's default)."""

SECRET_PARAMETERS = frozenset(API_KEY_KEYS)
"""Keys of a model's ``parameters`` that hold its API key (NeMo passes them to the LangChain client).
Accepted with a load warning; the value is taken out of ``parameters`` and never shown."""

INLINE_KEY_ADVICE = (
    "a key in a config file ends up in version control and logs; prefer api_key_env_var "
    "(the name of an environment variable holding the key)"
)
"""What the load warning says about a key written in the config file."""

MAIN_MODEL_TYPE = "main"


class CacheStatsConfig(BaseModel):
    """Whether a model's cache counts hits and misses, and how often it logs them."""

    model_config = STRICT

    enabled: bool = True  # counting is cheap (integers under the cache's own lock)
    log_interval: PositiveFloat | None = None  # seconds between stats log lines; None: never


DEFAULT_SNAPSHOT_KEY_ENV_VAR = "GUARDCACHE_SNAPSHOT_KEY"


class ModelCacheConfig(BaseModel):
    """The verdict cache of one model: on unless ``enabled: false`` (NeMo's default is off), stats on.

    The ``main`` model's too: a self check run on it is a guard verdict like any other (its answers
    are never cached: the cache only ever holds the verdicts of checks run on it).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    enabled: bool = True
    maxsize: PositiveInt = Field(
        default=50000, validation_alias=AliasChoices("maxsize", "capacity_per_model")
    )
    store: Literal["memory", "redis"] = "memory"
    # The in-process cache's eviction policy (guardcache.cache.POLICY_NAMES; a test keeps them
    # equal): lfu, least frequently used (the default); tinylfu, W-TinyLFU, which follows traffic
    # as it moves.
    policy: Literal["lfu", "tinylfu"] = "lfu"
    stats: Annotated[CacheStatsConfig, BeforeValidator(null_is_empty)] = Field(
        default_factory=CacheStatsConfig
    )
    redis: RedisConfig | None = None
    # Seconds a verdict is served for, from when the guard gave it (in memory and in Redis, where
    # it caps redis.ttl). Unset: a verdict lives until evicted (no clock read on a hit).
    ttl: PositiveFloat | None = None
    # Joins the key namespace of this model's verdicts (in memory, in Redis and in snapshots):
    # changing it makes every old verdict unreachable at once, on every replica. The step of every
    # guard upgrade (docs/configuration.md, "Upgrading a guard").
    version: str | None = Field(default=None, min_length=1, max_length=200)
    # Warm restart (store: memory): the in-process cache written to this file on a graceful stop
    # and every snapshot_interval seconds, signed with the key in snapshot_key_env_var, loaded at
    # start when its signature and namespace match.
    snapshot: str | None = Field(default=None, min_length=1)
    snapshot_interval: PositiveFloat = 300.0
    snapshot_key_env_var: EnvVarName = DEFAULT_SNAPSHOT_KEY_ENV_VAR

    @model_validator(mode="after")
    def _snapshot_of_memory(self) -> ModelCacheConfig:
        if self.snapshot is not None and self.store != "memory":
            raise FieldError(
                "a snapshot is of an in-process cache (store: memory); with store: redis the shared "
                "tier is what a restarted replica starts warm from",
                ("snapshot",),
            )
        return self

    @model_validator(mode="after")
    def _redis_has_url(self) -> ModelCacheConfig:
        redis = self.redis
        if self.store == "redis" and (
            redis is None
            or (
                redis.mode != "sentinel"
                and redis.url is None
                and redis.url_env_var is None
                and not redis.urls
            )
        ):
            seeds = (
                " (mode: cluster: or redis.urls, the seed nodes)" if redis and redis.mode == "cluster" else ""
            )
            raise FieldError(
                f"store: redis needs redis.url or redis.url_env_var{seeds} "
                "(e.g. redis: {url_env_var: GUARDCACHE_REDIS_URL})",
                ("redis",),
            )
        return self


class ModelConfig(KeyHolder):
    """One model: what serves it (``engine``, ``parameters.base_url``), its key's env var, its cache.

    A key written in ``parameters`` (``api_key`` or NeMo's aliases) is taken out of them and kept
    apart, as :class:`~guardcache.config.keys.KeyHolder` says."""

    model_config = STRICT
    _key_mapping: ClassVar[str | None] = "parameters"
    _key_names: ClassVar[frozenset[str]] = SECRET_PARAMETERS

    type: str = Field(min_length=1)
    engine: Engine
    model: str = Field(min_length=1)
    parameters: dict[str, Any] = Field(default_factory=dict)
    api_key_env_var: EnvVarName | None = None
    mode: Literal["chat", "text"] = "chat"  # NeMo's field; guard checks always use chat
    # The model acts when called (tools, writes): it is never started before the input verdict.
    side_effects: bool = False
    cache: Annotated[ModelCacheConfig, BeforeValidator(null_is_empty)] = Field(
        default_factory=ModelCacheConfig
    )

    @model_validator(mode="before")
    @classmethod
    def _nemo_model_names(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if "api_key" in data:  # NeMo's Model has no such field: NeMo would ignore the key silently
            raise FieldError(
                "a key here is not read (NeMo Guardrails ignores it too): name the environment "
                "variable that holds it with api_key_env_var (e.g. api_key_env_var: NVIDIA_API_KEY)",
                ("api_key",),
            )
        if "model_name" in data:  # NeMo's current content-safety example writes model_name:
            if "model" in data:
                raise FieldError("give the model name once, as `model`", ("model_name",))
            data = {k: v for k, v in data.items() if k != "model_name"} | {"model": data["model_name"]}
        params = data.get("parameters")
        if isinstance(params, dict):
            # NeMo also takes the model name from parameters.model_name / parameters.model.
            named = [k for k in ("model_name", "model") if k in params]
            if named and "model" not in data:
                params = dict(params)
                data = {**data, "model": params.pop(named[0]), "parameters": params}
            elif named:
                raise FieldError(
                    "the model name is given twice (model and parameters); keep only `model`",
                    ("parameters", named[0]),
                )
        return data

    @field_validator("type")
    @classmethod
    def _type_is_one_word(cls, value: str) -> str:
        if value != value.strip() or any(c.isspace() for c in value):
            raise ValueError(f"a model type is one word, used as $model=<type> (got {value!r})")
        return value

    @field_validator("parameters")
    @classmethod
    def _parse_parameters(cls, params: dict[str, Any]) -> dict[str, Any]:
        """Parse once, here (every problem at its key): the dict stays as written and carries its
        typed settings (``transport``, ``generation``), which is all anything else reads."""
        return parse_parameters(params)

    @model_validator(mode="after")
    def _has_base_url(self) -> ModelConfig:
        if DEFAULT_BASE_URLS[self.engine] is None and self._parsed().transport.base_url is None:
            raise FieldError(
                f"engine {self.engine!r} has no default URL; set parameters.base_url "
                "(e.g. http://localhost:8000/v1)",
                ("parameters", "base_url"),
            )
        return self

    def _parsed(self) -> Parameters:
        """The parameters as validation parsed them; a plain dict (``model_construct``, or a
        ``model_copy`` that set other parameters) is parsed now, so it cannot disagree with them."""
        params = self.parameters
        return params if isinstance(params, Parameters) else parse_parameters(params)

    @property
    def transport(self) -> TransportSettings:
        """How to reach the model, parsed from ``parameters`` at validation: ``base_url`` (given,
        else the engine's default; checked, no trailing slash), ``timeout`` (the whole call),
        ``max_retries``, ``default_headers``. rails/builder.py builds the model's client from it.
        The API key is not in it: :meth:`api_key` reads it when the client is built."""
        settings = self._parsed().transport
        if settings.base_url is not None:
            return settings
        url = DEFAULT_BASE_URLS[self.engine]
        if url is None:  # unreachable after validation; kept for model_construct() users
            raise ConfigError(f"model {self.type!r}: engine {self.engine!r} needs parameters.base_url")
        return dataclasses.replace(settings, base_url=url)

    @property
    def generation(self) -> GenerationSettings:
        """What to ask the model, parsed from ``parameters`` at validation: every key that is not a
        transport setting (``max_tokens``, ``temperature``, ``top_p``, ``stop`` typed and checked;
        the rest passed as written). Its ``as_body()`` is what checks (checks/check.py) and the main
        model's turns (rails/runner.py) send, and what a check's cache namespace digests."""
        return self._parsed().generation

    @property
    def base_url(self) -> str:
        """``parameters.base_url`` (or NeMo's ``openai_api_base``), else the engine's default; no
        trailing slash, so ``f"{base_url}/chat/completions"`` is right."""
        url = self.transport.base_url
        assert url is not None  # transport always resolves one
        return url

    def with_base_url(self, url: str) -> ModelConfig:
        """A copy that calls ``url`` (checked as ``parameters.base_url`` is); everything else is
        kept, so the copy computes the same cache namespaces (``RailsConfig.with_base_urls``).

        Raises:
            ConfigError: ``url`` is not a valid API root.
        """
        params = {k: v for k, v in self.parameters.items() if k != "openai_api_base"}
        try:
            parsed = parse_parameters({**params, "base_url": url})
        except FieldError as exc:
            raise ConfigError(f"model {self.type!r}: parameters.{exc}") from None
        return self.model_copy(update={"parameters": parsed})

    def _key_variable(self) -> str | None:
        """``api_key_env_var``; without it, ``nim`` and ``nvidia_ai_endpoints`` models read
        ``NVIDIA_API_KEY`` as NeMo Guardrails does, but only for an https endpoint: a default must not
        send a hosted-API key in clear text to whatever local URL a config names."""
        if self.api_key_env_var is not None:
            return self.api_key_env_var
        if self.engine not in NVIDIA_ENGINES or not self.base_url.startswith("https://"):
            return None
        return DEFAULT_NVIDIA_KEY_VAR

    def missing_key_var(self) -> str | None:
        """The variable ``api_key_env_var`` names when it is unset or empty (blank) now: the model
        would be called without a key and get 401 on the first turn. None when no variable is named,
        when the key is written in the file, or when the variable holds a key."""
        if self._inline_key is not None or self.api_key_env_var is None:
            return None
        return None if (os.environ.get(self.api_key_env_var) or "").strip() else self.api_key_env_var

    def unsent_key_note(self) -> str | None:
        """Why a key that IS set is not sent, for the 401 hint: an NVIDIA engine with no
        ``api_key_env_var`` on a plain ``http://`` URL does not send ``NVIDIA_API_KEY`` (a hosted
        key must not travel in clear text to a local URL). None when that is not the case."""
        if (
            self._inline_key is None
            and self.api_key_env_var is None
            and self.engine in NVIDIA_ENGINES
            and not self.base_url.startswith("https://")
            and (os.environ.get(DEFAULT_NVIDIA_KEY_VAR) or "").strip()
        ):
            return (
                f"{DEFAULT_NVIDIA_KEY_VAR} is set but not sent over http:// (a hosted key never "
                "travels in clear text to a local URL); use an https:// base_url, or name the "
                "variable explicitly with api_key_env_var"
            )
        return None


def check_model_keys(models: Iterable[ModelConfig], source: str | None, skip: Iterable[str] = ()) -> None:
    """Raise ``ConfigError`` for the first model whose ``api_key_env_var`` names an unset or empty
    variable (naming the variable, the model and the config file), instead of a 401 on the first
    turn. ``skip``: model types that will not be called (a main model replaced by ``llm=``)."""
    skipped = set(skip)
    for model in models:
        if model.type in skipped:
            continue
        name = model.missing_key_var()
        if name is not None:
            raise ConfigError(
                f"{source or '<config>'}: model {model.type!r} ({model.model}): api_key_env_var "
                f"{name} is unset or empty; export {name} with the model's API key (or remove "
                "api_key_env_var if the endpoint needs no key)"
            )


__all__ = [
    "DEFAULT_BASE_URLS",
    "INLINE_KEY_ADVICE",
    "MAIN_MODEL_TYPE",
    "SECRET_PARAMETERS",
    "CacheStatsConfig",
    "Engine",
    "ModelCacheConfig",
    "ModelConfig",
    "check_model_keys",
]
