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

from pydantic import BaseModel, BeforeValidator, Field, field_validator, model_validator

from guardcache.config.errors import FieldError
from guardcache.config.fields import STRICT, EnvVarName, null_is_empty
from guardcache.errors import ConfigError
from guardcache.llm.transport import validate_base_url


class JailbreakDetectionConfig(BaseModel):
    """Where the NemoGuard JailbreakDetect NIM answers: ``nim_base_url`` + ``nim_server_endpoint``."""

    model_config = STRICT

    nim_base_url: str | None = None
    nim_server_endpoint: str = "classify"
    api_key_env_var: EnvVarName | None = None
    # NeMo's self-hosted heuristics and model server: used only by flows guardcache does not run.
    server_endpoint: str | None = None
    length_per_perplexity_threshold: float | None = None
    prefix_suffix_perplexity_threshold: float | None = None
    embedding: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_secret(cls, data: Any) -> Any:
        if isinstance(data, dict) and "api_key" in data:
            raise FieldError(
                "secrets do not belong in config files: name the environment variable that holds "
                "the key with api_key_env_var",
                ("api_key",),
            )
        return data

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
        """The bearer token, read from ``api_key_env_var`` now (None if unset or empty)."""
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
        """The settings templates may read (NeMo passes the same names to its prompts)."""
        return {"reasoning_enabled": self.content_safety.reasoning.enabled}


__all__ = [
    "ContentSafetyConfig",
    "JailbreakDetectionConfig",
    "MultilingualConfig",
    "RailSettings",
    "ReasoningConfig",
]
