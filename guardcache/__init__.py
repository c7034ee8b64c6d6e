"""guardcache: cached guardrails for LLM applications.

``RailsConfig.from_path("./config")`` -> ``LLMRails(config)`` -> ``await rails.generate_async(...)``.
"""

from typing import TYPE_CHECKING, Any

from guardcache.cache import CacheInterface, CacheStats, LFUCache, TinyLFUCache
from guardcache.checks.verdict import RailResult, Verdict
from guardcache.config import RailsConfig
from guardcache.errors import BackendError, ConfigError, GuardcacheError, ParseError
from guardcache.rails import REFUSAL, CheckResult, LLMRails, TurnInfo

if TYPE_CHECKING:
    from guardcache.rails.runnable import RunnableRails


def __getattr__(name: str) -> Any:
    # RunnableRails is imported on first use: LangChain's runnables would triple `import guardcache`.
    if name == "RunnableRails":
        from guardcache.rails.runnable import RunnableRails

        return RunnableRails
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    "RunnableRails",
    "TinyLFUCache",
    "TurnInfo",
    "Verdict",
    "__version__",
]
