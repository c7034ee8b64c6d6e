"""``rails.config``: NeMo's per-rail settings that guardcache's checks read.

Only two of NeMo's sections change what guardcache does: ``jailbreak_detection`` (the JailbreakDetect
NIM's endpoint and key) and ``content_safety`` (``reasoning.enabled`` for reasoning guard models,
``multilingual`` refusals). Their keys are validated strictly; NeMo's other sections configure rails
guardcache does not run (a flow that would use them is refused at load), so they are accepted and
listed in the load warning.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SecretStr,
    field_validator,
    model_validator,
)

from guardcache.config.errors import FieldError
from guardcache.config.fields import STRICT, EnvVarName, null_is_empty
from guardcache.config.models import inline_secret
from guardcache.config.parameters import validate_base_url
from guardcache.errors import ConfigError


class JailbreakDetectionConfig(BaseModel):
    """Where the NemoGuard JailbreakDetect NIM answers: ``nim_base_url`` + ``nim_server_endpoint``;
    its key from ``api_key_env_var`` (or NeMo's ``api_key``, accepted with a load warning)."""

    model_config = STRICT

    nim_base_url: str | None = None
    nim_server_endpoint: str = "classify"
    api_key_env_var: EnvVarName | None = None
    # NeMo's self-hosted heuristics and model server: used only by flows guardcache does not run.
    server_endpoint: str | None = None
    length_per_perplexity_threshold: float | None = None
    prefix_suffix_perplexity_threshold: float | None = None
    embedding: str | None = None

    # NeMo's ``api_key`` (a SecretStr there): accepted with a load warning, kept out of every repr.
    _inline_key: SecretStr | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _take_out_the_inline_key(
        cls, data: Any, handler: ModelWrapValidatorHandler[JailbreakDetectionConfig]
    ) -> JailbreakDetectionConfig:
        key = None
        if isinstance(data, dict) and "api_key" in data:
            key = inline_secret(data["api_key"], ("api_key",))
            if key is not None and data.get("api_key_env_var") is not None:
                raise FieldError(
                    "the API key is given twice (api_key and api_key_env_var); keep api_key_env_var",
                    ("api_key",),
                )
            data = {k: v for k, v in data.items() if k != "api_key"}
        settings = handler(data)
        if key is not None:
            settings._inline_key = SecretStr(key)
        return settings

    @property
    def has_inline_key(self) -> bool:
        """Whether the key is written in the config file (``api_key``), for the load warning."""
        return self._inline_key is not None

    @field_validator("nim_base_url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is None:
            return None
        try:
            return validate_base_url(url, field_name="nim_base_url")
        except ConfigError as exc:
            raise ValueError(str(exc).removeprefix("nim_base_url: ")) from None

    @property
    def url(self) -> str | None:
        """The classify endpoint (NeMo's ``join_nim_url``), or None when no NIM is configured."""
        if self.nim_base_url is None:
            return None
        return f"{self.nim_base_url.rstrip('/')}/{self.nim_server_endpoint.lstrip('/')}"

    def api_key(self) -> str | None:
        """The bearer token: ``api_key`` as written, else ``api_key_env_var`` read now (None if unset
        or empty)."""
        if self._inline_key is not None:
            return self._inline_key.get_secret_value()
        if self.api_key_env_var is None:
            return None
        return os.environ.get(self.api_key_env_var) or None


class ReasoningConfig(BaseModel):
    model_config = STRICT

    enabled: bool = False


class MultilingualConfig(BaseModel):
    """Refusals in the user's language (NeMo's ``content_safety.multilingual``)."""

    model_config = STRICT

    enabled: bool = False
    refusal_messages: dict[str, str] | None = None


class ContentSafetyConfig(BaseModel):
    model_config = STRICT

    reasoning: Annotated[ReasoningConfig, BeforeValidator(null_is_empty)] = Field(
        default_factory=ReasoningConfig
    )
    multilingual: Annotated[MultilingualConfig, BeforeValidator(null_is_empty)] = Field(
        default_factory=MultilingualConfig
    )


class RailSettings(BaseModel):
    """``rails.config``. Other NeMo sections are removed before validation (``nemo_compat``)."""

    model_config = STRICT

    jailbreak_detection: Annotated[JailbreakDetectionConfig, BeforeValidator(null_is_empty)] = Field(
        default_factory=JailbreakDetectionConfig
    )
    content_safety: Annotated[ContentSafetyConfig, BeforeValidator(null_is_empty)] = Field(
        default_factory=ContentSafetyConfig
    )

    def template_settings(self) -> dict[str, Any]:
        """The values of ``rails.config`` templates may read, by the names NeMo's prompts use:
        ``reasoning_enabled`` (what NeMo's content-safety actions pass), ``reasoning_mode`` (the name
        NeMo's first Nemotron reasoning example read; NeMo never supplied it, so there it was always
        off: here it follows the same switch) and ``config`` (``config.content_safety.reasoning.enabled``,
        ``config.content_safety.multilingual.*``: the form NeMo's later example read)."""
        safety = self.content_safety
        reasoning = safety.reasoning.enabled
        return {
            "reasoning_enabled": reasoning,
            "reasoning_mode": reasoning,
            "config": {
                "content_safety": {
                    "reasoning": {"enabled": reasoning},
                    "multilingual": {
                        "enabled": safety.multilingual.enabled,
                        "refusal_messages": safety.multilingual.refusal_messages,
                    },
                }
            },
        }


__all__ = [
    "ContentSafetyConfig",
    "JailbreakDetectionConfig",
    "MultilingualConfig",
    "RailSettings",
    "ReasoningConfig",
]
