"""``guardcache serve`` freezes its start-up heap out of the garbage collector's reach; an app
mounted in another process (``create_app`` without ``own_process``) leaves that process's GC alone."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

import pytest

from guardcache.server.app import create_app
from guardcache.server.settings import ServeSettings

CONFIG = """
models:
  - type: main
    engine: nim
    model: meta/llama-3.1-8b-instruct
    parameters: {base_url: "http://127.0.0.1:9/v1"}
"""


async def _start_and_stop(app: Any) -> int:
    """Run the ASGI lifespan's start-up, read the frozen count, then shut down."""
    inbox: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})
    task = asyncio.create_task(
        app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, inbox.get, outbox.put)
    )
    assert (await asyncio.wait_for(outbox.get(), 10))["type"] == "lifespan.startup.complete"
    frozen = gc.get_freeze_count()
    await inbox.put({"type": "lifespan.shutdown"})
    assert (await asyncio.wait_for(outbox.get(), 10))["type"] == "lifespan.shutdown.complete"
    await task
    return frozen


@pytest.mark.parametrize("own_process", [True, False])
def test_only_the_servers_own_process_freezes_its_heap(tmp_path: Path, own_process: bool) -> None:
    (tmp_path / "config.yml").write_text(CONFIG)
    gc.unfreeze()
    try:
        app = create_app(ServeSettings(config=str(tmp_path), warm_up=False), own_process=own_process)
        frozen = asyncio.run(_start_and_stop(app))
        assert (frozen > 0) is own_process
    finally:
        gc.unfreeze()  # the test process keeps collecting everything
