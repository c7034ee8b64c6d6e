"""Reference servers for bench_serve's phase 2: what any guarded proxy on uvicorn pays before rails.

    python benchmarks/serve_floor.py canned PORT MAIN_URL   # reads the body, answers canned JSON
    python benchmarks/serve_floor.py proxy PORT MAIN_URL    # + decodes it, forwards it upstream
                                                            #   on guardcache's h1 client, returns
                                                            #   the answer's bytes

Both run on uvicorn with httptools + uvloop, as ``guardcache serve`` does with the ``server`` extra,
with no middleware, no checks, no metrics: their CPU per request is the floor under the guarded
server's (``canned``: uvicorn's own per-request work; ``proxy``: that plus one upstream call).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import uvicorn

from guardcache.llm.budget import DEFAULT_TIMEOUT
from guardcache.llm.h1_pool import H1Pool

CANNED = json.dumps(
    {
        "id": "chatcmpl-floor",
        "object": "chat.completion",
        "created": 1,
        "model": "floor",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "You said: hi"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
    }
).encode()


def make_app(kind: str, main_url: str) -> Any:
    pool = H1Pool()
    url = f"{main_url.rstrip('/')}/chat/completions"
    headers = {"content-type": "application/json"}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        if kind == "canned":
            body = CANNED
        else:
            request = json.loads(b"".join(chunks))
            body = (await pool.lane(main_url).post(url, request, headers, DEFAULT_TIMEOUT)).body
        raw = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": raw})
        await send({"type": "http.response.body", "body": body})

    return app


def main() -> None:
    kind, port, main_url = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if kind not in ("canned", "proxy"):
        raise SystemExit(f"serve_floor.py: unknown kind {kind!r} (canned or proxy)")
    uvicorn.run(
        make_app(kind, main_url),
        host="127.0.0.1",
        port=port,
        http="httptools",
        loop="uvloop",
        log_level="info",
        access_log=False,
        server_header=False,
    )


if __name__ == "__main__":
    main()
