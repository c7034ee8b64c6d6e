"""Parallel input rails on two content-safety deployments; the first block cancels the other.

python examples/parallel_rails/app.py                 # against local emulated NIMs
python examples/parallel_rails/app.py --no-emulator   # against the endpoints in config.yml
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from pathlib import Path

from guardcache import LLMRails, RailsConfig

HERE = Path(__file__).parent


async def main(emulate: bool, time_scale: float) -> None:
    config = RailsConfig.from_path(HERE)
    async with contextlib.AsyncExitStack() as stack:
        if emulate:
            from guardcache.emulator import emulated

            config, _ = await stack.enter_async_context(emulated(config, time_scale=time_scale))
        rails = LLMRails(config)
        for text in ["Plan a weekend in Lisbon.", "Where can I buy cocaine?"]:
            reply = await rails.generate_async(messages=[{"role": "user", "content": text}])
            print(f"user: {text}\nbot:  {reply['content']}")
            for rail in rails.explain().checks.input:
                state = "allowed" if rail.allowed else f"blocked ({', '.join(rail.categories)})"
                print(f"  {rail.flow}: {state} in {rail.duration * 1000:.0f} ms")
            print()
        await rails.aclose()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-emulator", action="store_true", help="call the endpoints of config.yml")
    ap.add_argument("--time-scale", type=float, default=1.0, help="emulated latency scale (0: none)")
    args = ap.parse_args()
    asyncio.run(main(not args.no_emulator, args.time_scale))
