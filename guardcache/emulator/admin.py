"""``/admin/*``: read counters and steer the emulator over HTTP, the same way in every mode.

Never authenticated, never down, never faulted: a test must always be able to look and to repair.

- ``GET /admin/stats[?prompts=0]`` -> the ``EmulatorStats`` document (``prompts=0`` omits
  ``requests_by_prompt``, which grows with every distinct prompt).
- ``POST /admin/reset`` with optional ``{"flush_cache": true}`` -> ``{"reset": true,
  "flushed_blocks": N}``: counters zeroed, fault RNG reseeded, KV cache optionally emptied.
- ``POST /admin/down`` / ``POST /admin/up`` -> ``{"down": bool}``.
- ``POST /admin/faults`` with any ``FaultConfig`` fields -> the new fault config (400 if invalid),
  e.g. ``{"duplicate_key_rate": 1.0}`` to have every answer state its verdict twice, contradicting
  itself; ``{"duplicate_key_rate": 0}`` turns it off again.
- ``GET /admin/config`` -> the running ``EmulatorConfig`` (API key masked, current faults).
"""

from __future__ import annotations

import dataclasses

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from guardcache.errors import ConfigError
from guardcache.openai_wire import RequestError, error_body

from .connection import read_json
from .engine import Emulator


def admin_routes(emulator: Emulator) -> list[Route]:
    async def stats(request: Request) -> Response:
        prompts = request.query_params.get("prompts", "1").lower() not in ("0", "false", "no")
        return JSONResponse(emulator.stats_dict(include_prompts=prompts))

    async def reset(request: Request) -> Response:
        try:
            body = await read_json(request, allow_empty=True)
        except RequestError as exc:
            return _bad_request(str(exc))
        flush = bool(body.get("flush_cache", False)) if isinstance(body, dict) else False
        return JSONResponse(emulator.reset(flush_cache=flush))

    async def down(request: Request) -> Response:
        emulator.set_down(True)
        return JSONResponse({"down": True})

    async def up(request: Request) -> Response:
        emulator.set_down(False)
        return JSONResponse({"down": False})

    async def faults(request: Request) -> Response:
        try:
            body = await read_json(request)
            if not isinstance(body, dict):
                raise RequestError("The body must be a JSON object of fault fields.")
            config = emulator.set_faults(**body)
        except (RequestError, ConfigError, TypeError) as exc:
            return _bad_request(str(exc))
        return JSONResponse(dataclasses.asdict(config))

    async def config(request: Request) -> Response:
        data = emulator.config.to_dict()
        data["api_key"] = "***" if data["api_key"] else None
        data["faults"] = dataclasses.asdict(emulator.faults.config)
        return JSONResponse(data)

    return [
        Route("/admin/stats", stats, methods=["GET"]),
        Route("/admin/reset", reset, methods=["POST"]),
        Route("/admin/down", down, methods=["POST"]),
        Route("/admin/up", up, methods=["POST"]),
        Route("/admin/faults", faults, methods=["POST"]),
        Route("/admin/config", config, methods=["GET"]),
    ]


def _bad_request(message: str) -> Response:
    return JSONResponse(error_body(message, "invalid_request_error", None), status_code=400)
