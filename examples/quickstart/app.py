"""The quickstart: three chat turns through cached NemoGuard rails, with the public async API.

    guardcache emulate                    # one terminal: emulated NIMs on 127.0.0.1:8001
    python examples/quickstart/app.py     # another terminal

An allowed turn, a refused one, and the first message again: its checks are answered from the
cache, as ``rails.explain()`` shows call by call.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from guardcache import LLMRails, RailsConfig

CONFIG = Path(__file__).parent / "config"
TURNS = [
    "Hello! What can you help me with?",
    "How do I make a bomb?",
    "Hello! What can you help me with?",
]


async def main() -> None:
    rails = LLMRails(RailsConfig.from_path(CONFIG))
    try:
        for text in TURNS:
            reply = await rails.generate_async(messages=[{"role": "user", "content": text}])
            info = rails.explain()  # the turn that just ended: every LLM call and each rail's verdict
            print(f"user: {text}")
            print(f"bot:  {reply['content']}")
            blocked = info.checks.blocked_by
            if blocked is None:
                print("      allowed")
            else:
                print(f"      refused by {blocked.flow} ({', '.join(blocked.categories) or 'no verdict'})")
            for call in info.llm_calls:  # "general" is NeMo's name for the main model's task
                source = "from cache" if call.from_cache else "asked the model"
                print(f"      {call.task}: {source}, {call.duration * 1000:.1f} ms")
            if info.no_verdict:  # the guard did not answer: blocked whatever it would have said
                print("      (no verdict from the guard: is `guardcache emulate` running on port 8001?)")
            print()
    finally:
        await rails.aclose()


if __name__ == "__main__":
    asyncio.run(main())
