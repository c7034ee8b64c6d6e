"""Reference servers for bench_serve's phase 2: what any guarded proxy on uvicorn pays before rails.

    python benchmarks/serve_floor.py canned PORT MAIN_URL   # reads the body, answers canned JSON
    python benchmarks/serve_floor.py proxy PORT MAIN_URL    # + decodes it, forwards it upstream
                                                            #   on guardcache's h1 client, returns
                                                            #   the answer's bytes
    python benchmarks/serve_floor.py guard PORT MAIN_URL    # + the least a guard with a verdict
                                                            #   cache does: the user's text and the
                                                            #   answer's each keyed (blake2b) and
                                                            #   looked up in a dict, the answer
                                                            #   decoded and written anew (orjson)

Both run on uvicorn with httptools + uvloop, as ``guardcache serve`` does with the ``server`` extra,
with no middleware, no checks, no metrics: their CPU per request is the floor under the guarded
server's (``canned``: uvicorn's own per-request work; ``proxy``: that plus one upstream call;
``guard``: that plus two cached verdicts looked up and the answer rewritten, with no validation,
records, metrics, limits, ids or error handling: a lower bound for any guarded proxy in Python, not
a server anyone should run).
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

import orjson
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


def key(kind: bytes, text: str) -> bytes:
    return hashlib.blake2b(kind + text.encode(), digest_size=32).digest()


def make_app(kind: str, main_url: str) -> Any:
    pool = H1Pool()
    verdicts: dict[bytes, bool] = {}
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
        elif kind == "proxy":
            request = json.loads(b"".join(chunks))
            body = (await pool.lane(main_url).post(url, request, headers, DEFAULT_TIMEOUT)).body
        else:
            request = json.loads(b"".join(chunks))
            if not verdicts.setdefault(key(b"i", request["messages"][-1]["content"]), True):
                raise RuntimeError("blocked")
            reply = await pool.lane(main_url).post(url, request, headers, DEFAULT_TIMEOUT)
            answer = orjson.loads(reply.body)
            if not verdicts.setdefault(key(b"o", answer["choices"][0]["message"]["content"]), True):
                raise RuntimeError("blocked")
            body = orjson.dumps(answer)
        raw = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": raw})
        await send({"type": "http.response.body", "body": body})

    return app


def main() -> None:
    kind, port, main_url = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if kind not in ("canned", "proxy", "guard"):
        raise SystemExit(f"serve_floor.py: unknown kind {kind!r} (canned, proxy or guard)")
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
