"""Warm restarts at start-up: a :class:`~guardcache.cache.snapshot.Snapshotter` for every model
cache whose config sets ``cache.snapshot``, loaded before the first turn.

This is where the snapshot learns what it belongs to, which ``guardcache.cache`` (a leaf) cannot
know: once the checks are built (``builder.build_runtime``), each check's namespace (model type and
name, the template's fingerprint with its settings, the generation parameters, the flow) is known,
and a cache's identity is the set of those digests of the checks that use it, with the model and
``cache.version``. A file is loaded only when that identity is the file's: a changed template or
version loads nothing (its entries would be unreachable anyway, their keys being under the old
namespaces), and says so in one WARNING line.

The key is read from the environment here (``cache.snapshot_key_env_var``), once: without it, or
with one too short to sign with, the cache starts cold and writes nothing, with one WARNING naming
the setting; a request never fails for a snapshot.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping

from guardcache.cache import CacheInterface, PolicyCache
from guardcache.cache.snapshot import Snapshotter
from guardcache.cache.snapshot_format import MIN_KEY_BYTES
from guardcache.checks import codec
from guardcache.config import RailsConfig
from guardcache.rails.caches import planned_caches
from guardcache.rails.rail import Rail

log = logging.getLogger("guardcache.cache.snapshot")


def open_snapshots(
    config: RailsConfig, caches: Mapping[str, CacheInterface], rails: Iterable[Rail]
) -> list[Snapshotter]:
    """A started snapshotter per cache with ``cache.snapshot`` (loaded now, written every
    ``snapshot_interval`` and when the rails close); none for a cache that cannot have one, each
    with one WARNING saying why."""
    checks = [rail.check for rail in rails]
    out: list[Snapshotter] = []
    for plan in planned_caches(config):
        settings = plan.settings
        if not settings.enabled or settings.snapshot is None:
            continue
        where = f"{plan.where}.cache.snapshot"
        cache = caches.get(plan.model_type)
        if not isinstance(cache, PolicyCache):  # (store: memory only, validated at load)
            log.warning("%s: the cache is not an in-process one; no snapshot", where)
            continue
        env = settings.snapshot_key_env_var
        key = (os.environ.get(env) or "").strip().encode("utf-8")
        if len(key) < MIN_KEY_BYTES:
            said = "is not set" if not key else f"holds {len(key)} bytes, fewer than {MIN_KEY_BYTES}"
            log.warning(
                "%s: the signing key %s %s (cache.snapshot_key_env_var): the snapshot is neither "
                "loaded nor written; starting cold",
                where,
                env,
                said,
            )
            continue
        namespaces = sorted(
            {
                check.namespace.digest.hex()
                for check in checks
                if getattr(check, "cache", None) is cache and hasattr(check, "namespace")
            }
        )
        snapshotter = Snapshotter(
            cache,
            settings.snapshot,
            key=key,
            identity={
                "model_type": plan.model_type,
                "model": plan.model.model if plan.model is not None else "",
                "version": settings.version,
                "namespaces": namespaces,
            },
            codec=codec,
            interval=settings.snapshot_interval,
            where=where,
        )
        snapshotter.load()
        unwritable = snapshotter.writable()
        if unwritable is not None:
            log.warning("%s: %s: %s; no snapshot will be written", where, snapshotter.path, unwritable)
        snapshotter.start()
        out.append(snapshotter)
    return out


__all__ = ["open_snapshots"]
