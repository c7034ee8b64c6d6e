"""``POST /admin/cache/clear``: empty the verdict caches of every worker process of one server.

On only with ``--admin-key-env NAME`` (the route is not there otherwise: 404), and only for
``Authorization: Bearer <the key in NAME>``, compared in constant time (401 otherwise): the client
key of ``--api-key-env`` does not open it, nor does the admin key open the other routes. The body
is optional, ``{"models": ["content_safety", ...]}`` (model types; default: every cached model), and
read with every limit of a body route (size, time, JSON depth, concurrency: it goes down the same
stack as the routes of ``body_routes.py``; it is not in their list because it has a key of its own
and is absent without it).

Why a board in a folder: a request reaches one worker, and the workers are processes that share
nothing but what ``guardcache serve`` gives them. The command makes a private runtime folder (mode
0700, removed when it stops) and names it in the workers' settings. The worker that takes a clear
adds it to ``clears.json`` there (a version, and per model a count of clears; read, changed and
replaced atomically under an ``flock``), clears its own caches, and waits (at most
:data:`ACK_WAIT_S`) until every worker has written, in ``acks/<pid>``, that it applied that version:
each reads the board every :data:`POLL_INTERVAL_S` (a ``read`` of a small file, off the requests'
path) and clears the models whose counts moved. A count per model, not the last request, so two
clears between two reads are both applied. The answer says how many workers acknowledged. Nothing
read from the board is more than a clear: it names model types to clear (unknown ones are ignored),
it is read at most :data:`MAX_BOARD_BYTES`, and anything unreadable counts as no clear.

A model with ``store: redis`` is cleared in the shared tier too, as ``guardcache cache clear
--model`` does (:mod:`~guardcache.cache.redis.clearing`: its entries deleted, then every replica
told, other servers' included): otherwise the next lookup would bring the cleared verdict back from
Redis. If Redis fails, the in-process caches are still cleared and the answer is a 503 naming what
failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from guardcache.openai_wire import RequestError
from guardcache.server.answers import error_response
from guardcache.server.protocol import parse_json
from guardcache.server.responses import JSONResponse
from guardcache.server.state import ServerState

log = logging.getLogger("guardcache.server")

POLL_INTERVAL_S = 0.1
"""How often each worker reads the board."""
ACK_WAIT_S = 5.0
"""How long the worker that took a clear waits for the others to acknowledge it."""
MAX_BOARD_BYTES = 64 * 1024
"""The most of the board (and of an acknowledgement) a worker reads."""


class ClearBoard:
    """One server's runtime folder: ``clears.json`` (``{"version": n, "models": {type: clears}}``),
    its lock, and each worker's acknowledgement (``acks/<pid>``: the version it applied)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self.path = self.folder / "clears.json"
        self.acks = self.folder / "acks"
        self.acks.mkdir(mode=0o700, exist_ok=True)

    def read(self) -> tuple[int, dict[str, int]]:
        """The version and each model's clear count; ``(0, {})`` while there is none or it does not
        read as one."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read(MAX_BOARD_BYTES + 1)
            data = json.loads(raw) if len(raw) <= MAX_BOARD_BYTES else None
        except (OSError, ValueError):
            return 0, {}
        version = data.get("version") if isinstance(data, dict) else None
        models = data.get("models") if isinstance(data, dict) else None
        if type(version) is not int or not isinstance(models, dict):
            return 0, {}
        return version, {k: v for k, v in models.items() if isinstance(k, str) and type(v) is int}

    def post(self, models: Iterable[str]) -> int:
        """Add a clear of ``models``; the new version. Blocking (an ``flock``): call it in a thread."""
        with open(self.folder / "clears.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            version, counts = self.read()
            for model in models:
                counts[model] = counts.get(model, 0) + 1
            version += 1
            self._write(self.path, json.dumps({"version": version, "models": counts}))
            return version

    def ack(self, version: int) -> None:
        """Say that this process applied ``version``."""
        self._write(self.acks / str(os.getpid()), str(version))

    def acknowledged(self, version: int) -> int:
        """How many workers applied ``version`` (or a later one)."""
        done = 0
        for entry in os.scandir(self.acks):
            with contextlib.suppress(OSError, ValueError), open(entry.path, "rb") as f:
                done += int(f.read(32)) >= version
        return done

    @staticmethod
    def _write(path: Path, text: str) -> None:
        temp = path.with_name(f".{path.name}.{os.getpid()}")
        temp.write_text(text, encoding="utf-8")
        os.replace(temp, path)


class CacheClearing:
    """A worker's side of the route: its caches by model type, the board it watches, the handler."""

    def __init__(self, state: ServerState, runtime_dir: str | None) -> None:
        self.state = state
        self.workers = state.settings.workers
        self.board = ClearBoard(runtime_dir) if runtime_dir else None
        self._seen: tuple[int, dict[str, int]] = (0, {})
        self._task: asyncio.Task[None] | None = None

    def models(self) -> set[str]:
        """Every cached model type of every served config."""
        return {kind for caches in self.state.caches().values() for kind in caches}

    def clear_here(self, models: Iterable[str]) -> int:
        """Empty this process's caches of ``models`` (every config's); entries dropped."""
        wanted = set(models)
        dropped = 0
        for caches in self.state.caches().values():
            for kind, cache in caches.items():
                if kind in wanted:
                    dropped += cache.size()
                    cache.clear()
        return dropped

    async def start(self) -> None:
        """Take the board as it is as the starting point, say so, and watch it."""
        if self.board is None:
            return
        self._seen = self.board.read()
        self.board.ack(self._seen[0])
        self._task = asyncio.get_running_loop().create_task(self._watch(), name="guardcache-admin-clears")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _apply(self) -> None:
        """Clear what the board added since the last read, and acknowledge it."""
        assert self.board is not None
        version, counts = self.board.read()
        if version == self._seen[0]:
            return
        seen = self._seen[1]
        moved = [kind for kind, n in counts.items() if n != seen.get(kind, 0)]
        dropped = self.clear_here(moved)
        self._seen = (version, counts)
        self.board.ack(version)
        log.info("cache clear (admin route): %s, %d entries dropped", ", ".join(moved) or "-", dropped)

    async def _watch(self) -> None:
        while True:
            try:
                self._apply()
            except OSError as exc:  # the folder gone (the server stopping): nothing to clear
                log.debug("the clear board cannot be read: %s", exc)
            await asyncio.sleep(POLL_INTERVAL_S)

    def _requested(self, raw: bytes) -> list[str]:
        """The model types the body names (all when it names none); a 400 otherwise."""
        known = self.models()
        if not raw.strip():
            return sorted(known)
        body = parse_json(raw, self.state.settings.max_json_depth)
        if not isinstance(body, dict) or set(body) - {"models"}:
            raise RequestError('The body is optional: {"models": ["<model type>", ...]}.', param="models")
        models = body.get("models")
        if models is None:
            return sorted(known)
        if not isinstance(models, list) or not models or not all(isinstance(m, str) for m in models):
            raise RequestError("'models' must be a non-empty list of model types.", param="models")
        unknown = sorted(set(models) - known)
        if unknown:
            raise RequestError(
                f"No cache for model type(s) {', '.join(map(repr, unknown))}; "
                f"cached: {', '.join(sorted(known))}.",
                param="models",
                code="model_not_found",
            )
        return sorted(set(models))

    async def handle(self, raw: bytes) -> JSONResponse:
        """The route: the shared tier of the redis-backed models, then every worker's caches."""
        try:
            models = self._requested(raw)
        except RequestError as exc:
            self.state.metrics.refused(exc)
            return error_response(exc)
        shared, failed = await self._clear_shared(models)
        dropped = self.clear_here(models)
        acknowledged, expected = 1, 1
        if self.board is not None:
            board = self.board
            version = await asyncio.to_thread(board.post, models)
            self._apply_own(version, models)
            expected = self.workers
            deadline = asyncio.get_running_loop().time() + ACK_WAIT_S
            while (acknowledged := board.acknowledged(version)) < expected:
                if asyncio.get_running_loop().time() >= deadline:
                    break
                await asyncio.sleep(POLL_INTERVAL_S / 2)
        body: dict[str, Any] = {
            "cleared": models,
            "workers": {"acknowledged": acknowledged, "expected": expected},
            "entries_dropped_here": dropped,
            "shared_tier": shared,
        }
        if failed:
            body["error"] = {"message": f"the shared tier was not cleared: {failed}", "code": "redis_error"}
            return JSONResponse(body, 503)
        return JSONResponse(body, 200 if acknowledged >= expected else 202)

    def _apply_own(self, version: int, models: list[str]) -> None:
        """This worker cleared already: record the new version as seen (when nothing came between)
        and acknowledge it."""
        assert self.board is not None
        if version == self._seen[0] + 1:
            seen = dict(self._seen[1])
            for model in models:
                seen[model] = seen.get(model, 0) + 1
            self._seen = (version, seen)
            self.board.ack(version)
        else:
            self._apply()  # others' clears came between: the board says what

    async def _clear_shared(self, models: list[str]) -> tuple[dict[str, Any], str | None]:
        """Clear the redis-backed ``models`` in their shared tier (each scope once); what was
        deleted by scope, and what failed (None: nothing)."""
        targets = []
        for rails in self.state.rails.values():
            for i, model in enumerate(rails.config.models):
                cache = model.cache
                if model.type in models and cache.enabled and cache.store == "redis":
                    targets.append((model, f"{rails.config.source or '<config>'}: models[{i}]"))
        if not targets:
            return {}, None
        from guardcache.cache.redis.clearing import clear_shared
        from guardcache.cache.redis.clients import admin_client
        from guardcache.config.redis_env import redis_endpoint, redis_keys

        def work() -> dict[str, Any]:
            done: dict[str, Any] = {}
            for model, where in targets:
                endpoint, keys = redis_endpoint(model, where=where), redis_keys(model, where=where)
                name = f"{endpoint.describe()} {keys.base}"
                if name in done:
                    continue
                with admin_client(endpoint, timeout=5.0) as client:
                    deleted, told = clear_shared(client, keys)
                done[name] = {"deleted": deleted, "replicas_told": told}
            return done

        try:
            return await asyncio.to_thread(work), None
        except Exception as exc:  # Redis down or refusing: the answer says so, the L1s still go
            log.warning("cache clear (admin route): the shared tier was not cleared: %s", exc)
            return {}, f"{type(exc).__name__}: {exc}"


__all__ = ["ACK_WAIT_S", "POLL_INTERVAL_S", "CacheClearing", "ClearBoard"]
