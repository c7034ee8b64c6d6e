"""Any langchain-core chat model as the main LLM; guardcache runs the cached rails around it.

Here the main model is guardcache's own ``GuardcacheChatModel`` (a ``BaseChatModel`` over an
OpenAI-compatible endpoint); ``ChatOpenAI(...)`` or ``ChatNVIDIA(...)`` plug in the same way.

    python examples/langchain_main/app.py                 # against local emulated NIMs
    python examples/langchain_main/app.py --no-emulator --main-url http://localhost:8000/v1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from pathlib import Path

from guardcache import LLMRails, RailsConfig
from guardcache.llm import GuardcacheChatModel

HERE = Path(__file__).parent


async def main(emulate: bool, main_url: str, time_scale: float) -> None:
    config = RailsConfig.from_path(HERE)
    async with contextlib.AsyncExitStack() as stack:
        if emulate:
            from guardcache.emulator import EmulatorConfig, EmulatorServer, LatencyConfig, emulated

            config, _ = await stack.enter_async_context(emulated(config, time_scale=time_scale))
            main_emu = await stack.enter_async_context(
                EmulatorServer(EmulatorConfig(port=0, latency=LatencyConfig(time_scale=time_scale)))
            )
            main_url = main_emu.base_url
        llm = GuardcacheChatModel(base_url=main_url, model="meta/llama-3.1-8b-instruct", max_tokens=48)
        rails = LLMRails(config, llm=llm)
        for text in ["Suggest a name for a bakery.", "Suggest a name for a bakery."]:
            reply = await rails.generate_async(messages=[{"role": "user", "content": text}])
            info = rails.explain()
            print(f"user: {text}\nbot:  {reply['content']}\n({info.cache_hits} of 2 checks from cache)\n")
        await rails.aclose()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-emulator", action="store_true", help="call real endpoints")
    ap.add_argument("--main-url", default="http://localhost:8000/v1", help="the main model's base URL")
    ap.add_argument("--time-scale", type=float, default=1.0, help="emulated latency scale (0: none)")
    args = ap.parse_args()
    asyncio.run(main(not args.no_emulator, args.main_url, args.time_scale))
