"""The NemoGuard content-safety rails: which variables each check fills and which parser reads it.

``content safety check input $model=X`` asks model X about the user message; ``... output`` about the
bot response to it. Both go through :class:`~guardcache.library.check.LLMCheck`, so both are cached per
model and coalesced.
"""

from __future__ import annotations

from guardcache.library.check import CheckOutcome, LLMCheck


async def check_input(check: LLMCheck, user_input: str) -> CheckOutcome:
    """Is the user message safe?"""
    return await check.run({"user_input": user_input})


async def check_output(check: LLMCheck, user_input: str, bot_response: str) -> CheckOutcome:
    """Is the bot response (to this user message) safe?"""
    return await check.run({"user_input": user_input, "bot_response": bot_response})


__all__ = ["check_input", "check_output"]
