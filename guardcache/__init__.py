"""guardcache: cached guardrails for LLM applications."""
