"""Model entries of ``config.yml``: which engine serves a model, its API key, its cache.

Part of the config boundary (see ``guardcache.config``): pydantic models, validated once at load time,
immutable afterwards. A model's API key comes from the environment variable named by
``api_key_env_var``, read at call time so a rotated key is picked up without a reload. A key written
in the file (``parameters.api_key``, as NeMo's own examples do with vLLM's placeholder ``EMPTY``) is
accepted with a load warning (``RailsConfig`` names the field): it is taken out of ``parameters`` at
validation and kept apart (:meth:`ModelConfig.api_key`), so it is in no ``repr``, no error message,
no request body and no cache namespace.

Every model but ``main`` gets a verdict cache unless its ``cache: {enabled: false}`` says otherwise
(NeMo's default is off; guardcache exists to cache guard verdicts). ``main`` gets one only when its
entry says ``cache: {enabled: true}``, and then only for checks that run on it (self check input and
output without a model of their own); the main model's answers are never cached.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SecretStr,
    field_validator,
    model_validator,
)

from guardcache.config.errors import FieldError, Problem, show
from guardcache.config.fields import STRICT, EnvVarName, PositiveFloat, PositiveInt, null_is_empty
from guardcache.errors import ConfigError
from guardcache.llm.transport import split_parameters, validate_base_url

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

SECRET_PARAMETERS = frozenset({"api_key", "openai_api_key", "nvidia_api_key"})
"""Keys of a model's ``parameters`` that hold its API key (NeMo passes them to the LangChain client).
Accepted with a load warning; the value is taken out of ``parameters`` and never shown."""

INLINE_KEY_ADVICE = (
    "a key in a config file ends up in version control and logs; prefer api_key_env_var "
    "(the name of an environment variable holding the key)"
)
"""What the load warning says about a key written in the config file."""

MAIN_MODEL_TYPE = "main"


def inline_secret(value: Any, loc: tuple[str, ...]) -> str | None:
    """An API key written in a config file, checked: a one-line string (``None``: not given).

    Error messages never show the value (it is a secret, or a secret's typo)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise FieldError(f"expected the key as a string (got {_kind(value)}; the value is not shown)", loc)
    if not value.strip() or any(ch in value for ch in "\r\n\0"):
        raise FieldError("expected the key as one line of text, not empty (the value is not shown)", loc)
    return value


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def _parameter_problems(params: dict[str, Any]) -> list[Problem]:
    """Checks of the ``parameters`` guardcache itself reads; the rest pass through to the model.

    The transport settings (URL, timeout, retries, headers) are read by the client's own
    ``split_parameters`` / ``validate_base_url``, the one place that knows them; here their errors
    are only placed at the field.
    """
    problems: list[Problem] = []
    for key in ("base_url", "openai_api_base"):
        if key in params:
            try:
                validate_base_url(params[key], field_name=key)
            except ConfigError as exc:
                problems.append(((key,), str(exc).removeprefix(f"{key}: ")))
    others = {k: v for k, v in params.items() if k not in ("base_url", "openai_api_base")}
    try:
        split_parameters(others)
    except ConfigError as exc:
        key, _, message = str(exc).removeprefix("parameters.").partition(": ")
        problems.append(((key,), message))
    # key -> (accepted types, lowest allowed value, whether the lowest is allowed, description)
    checks: dict[str, tuple[tuple[type, ...], float, bool, str]] = {
        "max_tokens": ((int,), 0, False, "a whole number > 0"),
        "temperature": ((int, float), 0, True, "a number >= 0"),
    }
    for key, (kinds, low, inclusive, what) in checks.items():
        if key not in params:
            continue
        value = params[key]
        ok = isinstance(value, kinds) and not isinstance(value, bool)
        if ok:
            number = float(value)
            ok = number >= low if inclusive else number > low
        if not ok:
            problems.append(((key,), f"expected {what} (got {show(value)})"))
    return problems


class CacheStatsConfig(BaseModel):
    """Whether a model's cache counts hits and misses, and how often it logs them."""

    model_config = STRICT

    enabled: bool = True  # counting is cheap (integers under the cache's own lock)
    log_interval: PositiveFloat | None = None  # seconds between stats log lines; None: never


DEFAULT_REDIS_SECRET_ENV_VAR = "GUARDCACHE_REDIS_SECRET"


class RedisConfig(BaseModel):
    """The shared Redis tier of a model's cache. Give the URL, or the env var holding it (secrets).

    Entries are authenticated with a secret read from the environment (``secret_env_var``, never
    from YAML) when the cache is built; an unset or short secret stops start-up (see
    ``guardcache.rails.caches.redis_settings``): a shared tier anyone with Redis access could fill
    with verdicts must not start silently. ``previous_secret_env_var`` names where the old secret is
    during a key rotation; unset or empty there means no rotation is in progress.
    """

    model_config = STRICT

    url: str | None = None
    url_env_var: EnvVarName | None = None
    ttl: PositiveInt = 86400  # seconds a verdict lives in Redis
    key_prefix: str = Field(default="guardcache", min_length=1)
    timeout_ms: PositiveInt = 50  # per Redis operation; past it the check falls back to the model
    pool_size: PositiveInt = 16
    # How long one replica may hold a key's lease while it calls the model (cross-replica single
    # flight); longer than a healthy check. A crashed leader delays the others by at most this.
    lease_ms: PositiveInt = 5000
    # HMAC secret of the entries (keys and values), at least 16 bytes; required, no opt-out.
    secret_env_var: EnvVarName = DEFAULT_REDIS_SECRET_ENV_VAR
    # During a key rotation: the old secret, still accepted on read (entries are re-written).
    previous_secret_env_var: EnvVarName | None = None

    @model_validator(mode="after")
    def _one_url(self) -> RedisConfig:
        if self.url is not None and self.url_env_var is not None:
            raise FieldError("set either url or url_env_var, not both", ("url_env_var",))
        if self.previous_secret_env_var is not None and self.previous_secret_env_var == self.secret_env_var:
            raise FieldError(
                f"must name another variable than secret_env_var (got {self.previous_secret_env_var!r})",
                ("previous_secret_env_var",),
            )
        if self.url is not None and not self.url.startswith(("redis://", "rediss://", "unix://")):
            scheme = self.url.split("://", 1)[0] + "://" if "://" in self.url else "no scheme"
            # Not echoing the URL: it may hold a password.
            raise FieldError(f"expected a redis://, rediss:// or unix:// URL (got {scheme})", ("url",))
        return self

    def resolved_url(self) -> str | None:
        """The URL to connect to: ``url``, or the value of ``url_env_var`` read now (None if unset)."""
        if self.url_env_var is not None:
            return os.environ.get(self.url_env_var) or None
        return self.url

    def resolved_secret(self) -> bytes | None:
        """The value of ``secret_env_var`` read now, as UTF-8 bytes (None if unset or empty)."""
        return _env_bytes(self.secret_env_var)

    def resolved_previous_secret(self) -> bytes | None:
        """The value of ``previous_secret_env_var`` read now (None: not named, unset or empty)."""
        return None if self.previous_secret_env_var is None else _env_bytes(self.previous_secret_env_var)


def _env_bytes(name: str) -> bytes | None:
    """An env var as UTF-8 bytes, surrounding whitespace dropped (a secret mounted from a file often
    ends with a newline that other replicas' copies lack: they would silently share nothing)."""
    value = (os.environ.get(name) or "").strip()
    return value.encode("utf-8") if value else None


class ModelCacheConfig(BaseModel):
    """The verdict cache of one model: on unless ``enabled: false`` (NeMo's default is off), stats on.

    ``ModelConfig`` turns it off for the ``main`` model unless its entry says ``enabled: true``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    enabled: bool = True
    maxsize: PositiveInt = Field(
        default=50000, validation_alias=AliasChoices("maxsize", "capacity_per_model")
    )
    store: Literal["memory", "redis"] = "memory"
    # The in-process cache's eviction policy (guardcache.cache.POLICY_NAMES; a test keeps them
    # equal): lfu, the seed's; tinylfu, W-TinyLFU that follows traffic as it moves.
    policy: Literal["lfu", "tinylfu"] = "lfu"
    stats: Annotated[CacheStatsConfig, BeforeValidator(null_is_empty)] = Field(
        default_factory=CacheStatsConfig
    )
    redis: RedisConfig | None = None

    @model_validator(mode="after")
    def _redis_has_url(self) -> ModelCacheConfig:
        if self.store == "redis" and (
            self.redis is None or (self.redis.url is None and self.redis.url_env_var is None)
        ):
            raise FieldError(
                "store: redis needs redis.url or redis.url_env_var "
                "(e.g. redis: {url_env_var: GUARDCACHE_REDIS_URL})",
                ("redis",),
            )
        return self


class ModelConfig(BaseModel):
    """One model: what serves it (``engine``, ``parameters.base_url``), its key's env var, its cache."""

    model_config = STRICT

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

    # The API key written in the file (parameters.api_key and NeMo's aliases), kept out of
    # ``parameters`` and out of every repr; ``api_key()`` reads it. Copies keep it.
    _inline_key: SecretStr | None = PrivateAttr(default=None)
    _inline_key_field: str | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _take_out_the_inline_key(
        cls, data: Any, handler: ModelWrapValidatorHandler[ModelConfig]
    ) -> ModelConfig:
        """Move ``parameters.api_key`` (or ``openai_api_key`` / ``nvidia_api_key``) out of the
        parameters before anything else reads them: no error, repr or request body can show it."""
        found: tuple[str, str] | None = None
        params = data.get("parameters") if isinstance(data, dict) else None
        if isinstance(params, dict) and SECRET_PARAMETERS & params.keys():
            keys = sorted(SECRET_PARAMETERS & params.keys())
            values = {k: inline_secret(params[k], ("parameters", k)) for k in keys}
            given = {k: v for k, v in values.items() if v is not None}
            if len(set(given.values())) > 1:
                raise FieldError(
                    f"the API key is given twice, with different values ({', '.join(given)}); keep one",
                    ("parameters", keys[-1]),
                )
            if given and data.get("api_key_env_var") is not None:
                name = next(iter(given))
                raise FieldError(
                    f"the API key is given twice (parameters.{name} and api_key_env_var); keep "
                    "api_key_env_var",
                    ("parameters", name),
                )
            data = {**data, "parameters": {k: v for k, v in params.items() if k not in SECRET_PARAMETERS}}
            if given:
                name = next(iter(given))
                found = (name, given[name])
        model = handler(data)
        if found is not None:
            model._inline_key_field, model._inline_key = found[0], SecretStr(found[1])
        return model

    @model_validator(mode="before")
    @classmethod
    def _nemo_model_name_and_default_cache(cls, data: Any) -> Any:
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
        if data.get("type") == MAIN_MODEL_TYPE:
            # The main model's cache is off unless asked for (its answers are never cached).
            cache = {} if data.get("cache") is None else data["cache"]
            if isinstance(cache, dict) and "enabled" not in cache:
                data = {**data, "cache": {**cache, "enabled": False}}
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
    def _known_parameters(cls, params: dict[str, Any]) -> dict[str, Any]:
        problems = _parameter_problems(params)
        if problems:
            raise FieldError("", problems=problems)
        return params

    @model_validator(mode="after")
    def _has_base_url(self) -> ModelConfig:
        if DEFAULT_BASE_URLS[self.engine] is None and self._given_base_url() is None:
            raise FieldError(
                f"engine {self.engine!r} has no default URL; set parameters.base_url "
                "(e.g. http://localhost:8000/v1)",
                ("parameters", "base_url"),
            )
        return self

    def _given_base_url(self) -> str | None:
        url = self.parameters.get("base_url") or self.parameters.get("openai_api_base")
        return url if isinstance(url, str) else None

    @property
    def base_url(self) -> str:
        """``parameters.base_url`` (or NeMo's ``openai_api_base``), else the engine's default; no
        trailing slash, so ``f"{base_url}/chat/completions"`` is right."""
        url = self._given_base_url() or DEFAULT_BASE_URLS[self.engine]
        if url is None:  # unreachable after validation; kept for model_construct() users
            raise ConfigError(f"model {self.type!r}: engine {self.engine!r} needs parameters.base_url")
        return url.rstrip("/")

    @property
    def inline_key_field(self) -> str | None:
        """``api_key`` (or ``openai_api_key`` / ``nvidia_api_key``) when the key is written in the
        config's ``parameters``, for the load warning; None when it is not. Never the value."""
        return self._inline_key_field

    def api_key(self) -> str | None:
        """The API key: the one written in ``parameters`` if any, else ``api_key_env_var`` read NOW
        (keys rotate; None if unset or empty).

        Without either, ``nim`` and ``nvidia_ai_endpoints`` models read ``NVIDIA_API_KEY`` as NeMo
        Guardrails does, but only for an https endpoint: a default must not send a hosted-API key in
        clear text to whatever local URL a config names.
        """
        if self._inline_key is not None:
            return self._inline_key.get_secret_value()
        name = self.api_key_env_var
        if name is None:
            if self.engine not in NVIDIA_ENGINES or not self.base_url.startswith("https://"):
                return None
            name = DEFAULT_NVIDIA_KEY_VAR
        return os.environ.get(name) or None

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
    "DEFAULT_REDIS_SECRET_ENV_VAR",
    "INLINE_KEY_ADVICE",
    "MAIN_MODEL_TYPE",
    "SECRET_PARAMETERS",
    "CacheStatsConfig",
    "Engine",
    "ModelCacheConfig",
    "ModelConfig",
    "RedisConfig",
    "check_model_keys",
    "inline_secret",
]
