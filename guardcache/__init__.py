"""guardcache: cached guardrails for LLM applications.

``RailsConfig.from_path("./config")`` -> ``LLMRails(config)`` -> ``await rails.generate_async(...)``.
"""

from guardcache.cache import CacheInterface, CacheStats, LFUCache
from guardcache.checks.verdict import RailResult, Verdict
from guardcache.config import RailsConfig
from guardcache.errors import BackendError, ConfigError, GuardcacheError, ParseError
from guardcache.rails import REFUSAL, CheckResult, LLMRails, TurnInfo

__version__ = "0.1.0"

__all__ = [
    "REFUSAL",
    "BackendError",
    "CacheInterface",
    "CacheStats",
    "CheckResult",
    "ConfigError",
    "GuardcacheError",
    "LFUCache",
    "LLMRails",
    "ParseError",
    "RailResult",
    "RailsConfig",
    "TurnInfo",
    "Verdict",
    "__version__",
]
