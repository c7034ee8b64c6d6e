"""What the routes and the middleware of ``guardcache serve`` share: :class:`ServerState` (the rails
per config, the metrics, the readiness probes, the in-flight count), and picking the config a
request goes to. Below :mod:`~guardcache.server.app` (which builds it), the routes and the
middlewares (which read it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from guardcache.cache import CacheInterface
from guardcache.errors import ConfigError
from guardcache.openai_wire import RequestError
from guardcache.rails.llmrails import LLMRails
from guardcache.rails.shadow import ShadowRails
from guardcache.server.metrics import ServerMetrics
from guardcache.server.readiness import Readiness
from guardcache.server.settings import ServeSettings

log = logging.getLogger("guardcache.server")


class ServerState:
    """Everything the routes share: the rails per config, metrics, readiness."""

    def __init__(self, settings: ServeSettings, rails: Mapping[str, LLMRails]) -> None:
        self.settings = settings
        self.rails = dict(rails)
        self.main_models: dict[str, str] = {}
        for config_id, r in self.rails.items():
            if "main" not in r.config.model_types:
                raise ConfigError(
                    f"{r.config.source or config_id}: guardcache serve needs a main model (type: main) "
                    "to answer chat completions"
                )
            self.main_models[config_id] = r.config.model("main").model
        self.in_flight = 0
        self.metrics = ServerMetrics(self.caches, lambda: self.in_flight, self.shadows)
        self.api_key = settings.api_key()
        self.created = int(time.time())
        self.warmed = False
        self.readiness = Readiness(
            self.rails,
            interval=settings.ready_interval,
            retry=settings.ready_retry,
            timeout=settings.ready_timeout,
            main=settings.ready_main,
        )
        self.draining = False

    def caches(self) -> dict[str, dict[str, CacheInterface]]:
        return {config_id: r.model_caches for config_id, r in self.rails.items()}

    def shadows(self) -> dict[str, ShadowRails | None]:
        return {config_id: r.runner.shadow for config_id, r in self.rails.items()}

    def select(self, config_id: str | None, model: str | None) -> str:
        """The config a request goes to (docs/serving.md: ``config_id``, else the only config, else
        the config whose id or main model the ``model`` field names)."""
        if config_id is not None:
            if config_id not in self.rails:
                raise RequestError(
                    f"Unknown config_id {config_id!r}; served configs: {', '.join(self.rails)}.",
                    status=404,
                    param="config_id",
                    code="config_not_found",
                )
            return config_id
        if len(self.rails) == 1:
            return next(iter(self.rails))
        if model is not None:
            if model in self.rails:
                return model
            matches = [cid for cid, name in self.main_models.items() if name == model]
            if len(matches) == 1:
                return matches[0]
        raise RequestError(
            f"Several configs are served ({', '.join(self.rails)}): name one with 'config_id' "
            "(or with 'model', as a config id or a main model only one config uses).",
            status=404 if model is not None else 400,
            param="config_id",
            code="config_not_found" if model is not None else "config_id_required",
        )

    async def start(self) -> None:
        """The first readiness round and the Redis tiers brought up (awaited together with
        ``warm_up``: it also primes each guard, and the first requests find the shared tier up;
        without it the first lookups start the tiers), then the periodic probes in the background."""
        if self.settings.warm_up:
            # A tier that does not come up logs why itself and keeps trying; serving goes on.
            tiers = [
                connect()
                for caches in self.caches().values()
                for cache in caches.values()
                if (connect := getattr(cache, "connect", None)) is not None
            ]
            results, *_ = await asyncio.gather(self.readiness.probe_once(), *tiers)
            failed = {name: why for name, why in results.items() if why != "ok"}
            if failed:
                log.warning("not ready: %s", "; ".join(f"{name}: {why}" for name, why in failed.items()))
        self.readiness.start()
        self.warmed = True

    async def stop(self) -> None:
        self.draining = True
        await self.readiness.stop()
        for r in self.rails.values():
            try:
                await r.aclose()
            except Exception:  # closing is best effort; log and go on with the others
                log.warning("closing the rails of a config failed", exc_info=True)


__all__ = ["ServerState"]
