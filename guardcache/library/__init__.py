"""Checks: one folder per check, each joining prompts, the cache and the LLM client."""

from guardcache.library.check import CheckOutcome, LLMCheck
from guardcache.library.verdict import CachedCheck, RailResult, Verdict

__all__ = ["CachedCheck", "CheckOutcome", "LLMCheck", "RailResult", "Verdict"]
