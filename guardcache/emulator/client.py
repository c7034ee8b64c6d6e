"""Typed clients for the admin endpoints, sync and async, identical in what they return.

Every emulator mode (in-process, thread, child process) exposes the same ``/admin/*`` routes, so
these two small classes are all a test or benchmark needs to read counters and steer faults.
A fresh connection per call keeps them free of event-loop ties and safe to use from any thread.
``trust_env=False``: a proxy configured in the environment must never see loopback traffic.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from typing import Any

import httpx

from .config import FaultConfig
from .stats import EmulatorStats

_TIMEOUT = httpx.Timeout(10.0)


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context per process for every admin client: httpx loads the CA bundle for each
    client it builds (~15 ms of CPU), and a test run makes hundreds of admin calls."""
    return ssl.create_default_context()


class EmulatorAdminError(RuntimeError):
    """An admin call was refused (e.g. an invalid fault rate); the message holds the server's."""


def _check(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = response.text
        raise EmulatorAdminError(f"{response.request.url}: HTTP {response.status_code}: {message}")
    return response.json()


def _fault_config(data: dict[str, Any]) -> FaultConfig:
    return FaultConfig(**data)


class AdminClient:
    """Blocking admin calls against ``root_url`` (``http://127.0.0.1:PORT``, no ``/v1``)."""

    def __init__(self, root_url: str) -> None:
        self.root_url = root_url.rstrip("/")

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        with httpx.Client(base_url=self.root_url, timeout=_TIMEOUT, trust_env=False, verify=_tls()) as client:
            return _check(client.request(method, path, **kw))

    def stats(self, *, prompts: bool = True) -> EmulatorStats:
        """``GET /admin/stats``; ``prompts=False`` omits the per-prompt map (large after benchmarks)."""
        return EmulatorStats.from_dict(self._call("GET", "/admin/stats", params=_prompts(prompts)))

    def reset(self, *, flush_cache: bool = False) -> None:
        """``POST /admin/reset``: zero counters, reseed faults, optionally empty the KV cache."""
        self._call("POST", "/admin/reset", json={"flush_cache": flush_cache})

    def set_down(self, down: bool) -> None:
        """``POST /admin/down`` or ``/admin/up``: while down every ``/v1/*`` answers 503."""
        self._call("POST", "/admin/down" if down else "/admin/up")

    def set_faults(self, **fields: Any) -> FaultConfig:
        """``POST /admin/faults`` with some ``FaultConfig`` fields; returns the new config."""
        return _fault_config(self._call("POST", "/admin/faults", json=fields))

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Poll ``/v1/health/ready`` until it answers 200 (raises ``TimeoutError``)."""
        deadline = time.monotonic() + timeout
        with httpx.Client(base_url=self.root_url, timeout=1.0, trust_env=False, verify=_tls()) as client:
            while True:
                try:
                    if client.get("/v1/health/ready").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.root_url}/v1/health/ready not ready after {timeout}s")
                time.sleep(0.02)


class AsyncAdminClient:
    """The same calls as ``AdminClient``, awaitable."""

    def __init__(self, root_url: str) -> None:
        self.root_url = root_url.rstrip("/")

    async def _call(self, method: str, path: str, **kw: Any) -> Any:
        async with httpx.AsyncClient(
            base_url=self.root_url, timeout=_TIMEOUT, trust_env=False, verify=_tls()
        ) as client:
            return _check(await client.request(method, path, **kw))

    async def stats(self, *, prompts: bool = True) -> EmulatorStats:
        return EmulatorStats.from_dict(await self._call("GET", "/admin/stats", params=_prompts(prompts)))

    async def reset(self, *, flush_cache: bool = False) -> None:
        await self._call("POST", "/admin/reset", json={"flush_cache": flush_cache})

    async def set_down(self, down: bool) -> None:
        await self._call("POST", "/admin/down" if down else "/admin/up")

    async def set_faults(self, **fields: Any) -> FaultConfig:
        return _fault_config(await self._call("POST", "/admin/faults", json=fields))

    async def wait_ready(self, within: float = 10.0) -> None:
        deadline = time.monotonic() + within
        async with httpx.AsyncClient(
            base_url=self.root_url, timeout=1.0, trust_env=False, verify=_tls()
        ) as client:
            while True:
                try:
                    if (await client.get("/v1/health/ready")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.root_url}/v1/health/ready not ready after {within}s")
                await asyncio.sleep(0.02)


def _prompts(prompts: bool) -> dict[str, str]:
    return {"prompts": "1" if prompts else "0"}
