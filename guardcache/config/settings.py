"""``rails.config``: NeMo's per-rail settings that guardcache's checks read.

Only two of NeMo's sections change what guardcache does: ``jailbreak_detection`` (the JailbreakDetect
NIM's endpoint and key) and ``content_safety`` (``reasoning.enabled`` for reasoning guard models,
``multilingual`` refusals). Their keys are validated strictly; NeMo's other sections configure rails
guardcache does not run (a flow that would use them is refused at load), so they are accepted and
listed in the load warning.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    field_validator,
)

from guardcache.config.fields import STRICT, EnvVarName, null_is_empty
from guardcache.config.keys import KeyHolder
from guardcache.config.parameters import validate_base_url
from guardcache.errors import ConfigError


class JailbreakDetectionConfig(KeyHolder):
    """Where the NemoGuard JailbreakDetect NIM answers: ``nim_base_url`` + ``nim_server_endpoint``;
    its key from ``api_key_env_var`` (or NeMo's ``api_key`` (a SecretStr there), accepted with a load
    warning and kept apart, as :class:`~guardcache.config.keys.KeyHolder` says)."""

    model_config = STRICT

    nim_base_url: str | None = None
    nim_server_endpoint: str = "classify"
    api_key_env_var: EnvVarName | None = None
    # NeMo's self-hosted heuristics and model server: used only by flows guardcache does not run.
    server_endpoint: str | None = None
    length_per_perplexity_threshold: float | None = None
    prefix_suffix_perplexity_threshold: float | None = None
    embedding: str | None = None

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

    def _key_variable(self) -> str | None:
        return self.api_key_env_var


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
