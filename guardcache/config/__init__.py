"""The config boundary: ``config.yml`` (+ ``prompts.yml``) as validated, immutable pydantic models.

pydantic stays in this package: the rest of guardcache reads these objects and never validates.
``rails`` holds RailsConfig and the rails sections, ``models`` the model and cache entries,
``redis_tier`` a cache's Redis tier (``cache.redis``), ``keys`` the API key a section holds,
``settings`` NeMo's per-rail settings (``rails.config``), ``prompts`` the ``prompts.yml`` schema, the
shipped default prompts and picking a check's prompt, ``fields`` the field types they share,
``files`` the bounded reading of config files and texts (``ConfigLimits``) and the merging,
``errors`` the file-and-field error messages, ``nemo_compat`` the NeMo settings accepted and
ignored.
"""

from guardcache.config.files import DEFAULT_LIMITS, ConfigLimits
from guardcache.config.models import (
    DEFAULT_BASE_URLS,
    SECRET_PARAMETERS,
    CacheStatsConfig,
    Engine,
    ModelCacheConfig,
    ModelConfig,
)
from guardcache.config.prompts import PromptMessage, TaskPrompt
from guardcache.config.rails import RailGroup, RailsConfig, RailsSection
from guardcache.config.redis_tier import RedisConfig

__all__ = [
    "DEFAULT_BASE_URLS",
    "DEFAULT_LIMITS",
    "SECRET_PARAMETERS",
    "CacheStatsConfig",
    "ConfigLimits",
    "Engine",
    "ModelCacheConfig",
    "ModelConfig",
    "PromptMessage",
    "RailGroup",
    "RailsConfig",
    "RailsSection",
    "RedisConfig",
    "TaskPrompt",
]
