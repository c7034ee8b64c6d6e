"""Field types shared by the config's pydantic models (``config.yml`` and ``prompts.yml`` alike).

Numbers refuse YAML booleans (pydantic's lax mode would read ``true`` as 1), sections written with
nothing after them (``cache:``) mean their defaults as in NeMo Guardrails, and every model is strict
(unknown keys are errors) and immutable (``STRICT``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field

STRICT = ConfigDict(extra="forbid", frozen=True)
"""Every config model: unknown keys are errors (a typo must not silently change a guard), frozen."""


def reject_bool(value: Any) -> Any:
    """YAML ``true`` must not pass as the number 1 (pydantic's lax mode would allow it)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number (got {'true' if value else 'false'})")
    return value


PositiveInt = Annotated[int, BeforeValidator(reject_bool), Field(gt=0)]
PositiveFloat = Annotated[float, BeforeValidator(reject_bool), Field(gt=0, allow_inf_nan=False)]


def null_is_empty(value: Any) -> Any:
    """``cache:`` / ``stats:`` written with nothing after them mean the defaults, as in NeMo."""
    return {} if value is None else value


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_env_name(value: str) -> str:
    if _ENV_NAME.fullmatch(value):
        return value
    bare = value.lstrip("$").strip("{}")
    hint = f" (write {bare}, not {value})" if _ENV_NAME.fullmatch(bare) else ""
    raise ValueError(f"expected the name of an environment variable{hint} (got {value!r})")


EnvVarName = Annotated[str, AfterValidator(_check_env_name)]
"""The name of an environment variable (``NVIDIA_API_KEY``, not ``$NVIDIA_API_KEY``)."""

__all__ = ["STRICT", "EnvVarName", "PositiveFloat", "PositiveInt", "null_is_empty", "reject_bool"]
