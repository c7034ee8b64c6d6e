"""NemoGuard Content Safety: input and output checks and their output parsers."""

from guardcache.library.content_safety.actions import check_input, check_output
from guardcache.library.content_safety.parsers import PARSERS, parse_prompt_safety, parse_response_safety

__all__ = ["PARSERS", "check_input", "check_output", "parse_prompt_safety", "parse_response_safety"]
