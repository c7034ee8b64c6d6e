"""The guardrails runtime: LLMRails and what it returns."""

from guardcache.rails.llmrails import LLMRails
from guardcache.rails.turn import REFUSAL, CheckResult, TurnInfo

__all__ = ["REFUSAL", "CheckResult", "LLMRails", "TurnInfo"]
