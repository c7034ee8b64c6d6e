"""``guardcache cache stats|clear``: inspect or empty the shared Redis tier of the verdict caches.

Operators run this against a live Redis, so it only ever iterates with ``SCAN MATCH .. COUNT``
(never ``KEYS``, which blocks the server) and deletes with ``UNLINK`` in batches (freed in the
background). It connects with each model's own ``cache.redis`` settings from the config, in its mode:
a standalone server, a Redis Cluster (SCAN and UNLINK on every primary, one slot per UNLINK) or the
primary a Sentinel set names. Credentials come from the environment variables the config names.

It reads configs (the command's job), so it lives with the commands, above the config and the cache
it uses (docs/architecture.md), and the cache stays a leaf.

It needs no tier secret (only where Redis is and how to log in): counting and deleting go by key
prefix and scope, which are public, while the digests inside the braces are HMACs only the replicas
can compute. A clear also tells every running replica to drop its in-process entries of the models
cleared (a new clear token per scope, :mod:`~guardcache.cache.redis.clearing`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from guardcache.cache.redis.clearing import SCAN_COUNT, clear_shared
from guardcache.cache.redis.clients import AdminClient, RedisEndpoint, admin_client
from guardcache.cache.redis.keys import LEASE_SUFFIX, KeySpace, prefix_pattern, scope_of
from guardcache.cache.redis.stats import GlobalTierStats
from guardcache.errors import ConfigError

MEMORY_SAMPLES = 32
ADMIN_TIMEOUT_S = 5.0  # admin commands are not on a request's path: no need for the tight budget
# What Redis can fail with (a cluster client's "cannot connect" is not a RedisError).
REDIS_ERRORS = (redis.RedisError, RedisClusterException)


@dataclass(frozen=True)
class Target:
    """One model's Redis tier, as configured."""

    model_type: str
    model_name: str
    endpoint: RedisEndpoint
    keys: KeySpace
    ttl: int

    @property
    def where(self) -> str:
        return self.endpoint.describe()


def register(subparsers: Any) -> None:
    """Add ``cache`` with its ``stats`` and ``clear`` actions to the ``guardcache`` parser."""
    parser = subparsers.add_parser(
        "cache",
        help="inspect or clear the shared Redis tier of the verdict caches",
        description=(
            "Inspect or clear the Redis tier (cache.store: redis) of each model's verdict cache. "
            "Connects with the models' cache.redis settings; iterates with SCAN, never KEYS."
        ),
        epilog="Exit status: 0 done, 1 Redis did not answer, 2 a usage or config error.",
    )
    parser.set_defaults(func=lambda _args: _usage(parser))
    actions = parser.add_subparsers(dest="cache_action", metavar="ACTION")

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        required=True,
        metavar="DIR",
        help="the rails config: a folder with config.yml (or one YAML file); its redis-backed "
        "models (cache.store: redis) are the ones inspected or cleared",
    )
    common.add_argument(
        "--model",
        metavar="TYPE",
        help="only this model type (the `type:` of a model in the config, e.g. content_safety)",
    )
    common.add_argument("--json", action="store_true", help="print one JSON document instead of text")

    stats = actions.add_parser(
        "stats",
        parents=[common],
        help="per-model entry counts, memory estimate and the counters shared by all replicas",
        description=(
            "For each redis-backed model: how many verdicts Redis holds for it, a memory estimate "
            "(MEMORY USAGE of a few sampled keys), open leases, and the global counters every "
            "replica adds to (lookups, backend calls, L2 hits, hit rate)."
        ),
    )
    stats.add_argument(
        "--all",
        action="store_true",
        help="also count every key under the key prefix, grouped by scope, including scopes of "
        "models no longer in the config",
    )
    stats.set_defaults(func=run_stats)

    clear = actions.add_parser(
        "clear",
        parents=[common],
        help="delete one model's cached verdicts (--model) or everything under the prefix (--all)",
        description=(
            "Delete cached verdicts from Redis with SCAN + UNLINK in batches, report how many keys "
            "were deleted, and tell every running replica to drop its in-process entries of the "
            "models cleared (each reads a clear token in Redis every 200 ms: within a second)."
        ),
    )
    clear.add_argument(
        "--all",
        action="store_true",
        help="delete every key under the configured key prefix(es): all models, leases and counters",
    )
    clear.set_defaults(func=run_clear)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def targets(config_path: str, model_type: str | None) -> list[Target]:
    """The redis-backed models of a config (only ``model_type`` when given)."""
    from guardcache.config import RailsConfig
    from guardcache.config.redis_env import redis_endpoint, redis_keys

    config = RailsConfig.from_path(config_path)
    found: list[Target] = []
    for i, model in enumerate(config.models):
        redis_cfg = model.cache.redis
        if not (model.cache.enabled and model.cache.store == "redis") or redis_cfg is None:
            continue
        if model_type is not None and model.type != model_type:
            continue
        where = f"{config.source or '<config>'}: models[{i}]"
        endpoint = redis_endpoint(model, where=where)
        keys = redis_keys(model, where=where)
        found.append(Target(model.type, model.model, endpoint, keys, redis_cfg.ttl))
    if not found:
        redis_models = [m.type for m in config.models if m.cache.enabled and m.cache.store == "redis"]
        which = f"model type {model_type!r}" if model_type else "any model"
        raise ConfigError(
            f"{config_path}: no cache.store: redis for {which} "
            f"(redis-backed models: {', '.join(redis_models) or 'none'})"
        )
    return found


def _connect(endpoint: RedisEndpoint) -> AdminClient:
    return admin_client(endpoint, timeout=ADMIN_TIMEOUT_S)


def _scan(client: AdminClient, pattern: str) -> Iterator[bytes]:
    """Every key matching ``pattern``: SCAN on each primary (one server, or every primary of a
    cluster: each holds its own slots)."""
    for node in client.primaries():
        yield from node.scan_iter(match=pattern, count=SCAN_COUNT)


def _memory_estimate(client: AdminClient, sample: list[bytes], total: int) -> int | None:
    """Bytes, from the mean ``MEMORY USAGE`` of the sampled keys; None when unavailable."""
    if not sample:
        return 0
    try:
        sizes = [client.keyed.memory_usage(key) or 0 for key in sample]
    except redis.ResponseError:  # MEMORY disabled (some managed services)
        return None
    return round(sum(sizes) / len(sizes) * total)


def model_stats(client: AdminClient, target: Target) -> dict[str, Any]:
    entries = leases = 0
    sample: list[bytes] = []
    for key in _scan(client, target.keys.scope_pattern):
        text = key.decode(errors="replace")
        if text.endswith(LEASE_SUFFIX):
            leases += 1
        elif text.endswith("}"):
            entries += 1
            if len(sample) < MEMORY_SAMPLES:
                sample.append(key)
    totals = GlobalTierStats.from_hash(client.keyed.hgetall(target.keys.stats_key))
    return {
        "model_type": target.model_type,
        "model": target.model_name,
        "redis": target.where,
        "keys": target.keys.scope_pattern,
        "entries": entries,
        "leases": leases,
        "memory_bytes": _memory_estimate(client, sample, entries),
        "ttl_s": target.ttl,
        "global": {
            "lookups": totals.lookups,
            "computations": totals.computations,
            "l2_hits": totals.l2_hits,
            "l2_errors": totals.l2_errors,
            "l2_auth_failures": totals.l2_auth_failures,
            "lease_waits": totals.lease_waits,
            "lease_takeovers": totals.lease_takeovers,
            "hit_rate": totals.hit_rate,
        },
    }


def prefix_scopes(client: AdminClient, prefix: str) -> dict[str, int]:
    """Key counts per scope under ``prefix`` (every key: values, leases, counters)."""
    counts: Counter[str] = Counter()
    for key in _scan(client, prefix_pattern(prefix)):
        counts[scope_of(key.decode(errors="replace"), prefix) or "(other)"] += 1
    return dict(sorted(counts.items()))


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "n/a"
    size = float(n)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _print_model(s: dict[str, Any]) -> None:
    g = s["global"]
    rate = f"{g['hit_rate']:.2%}" if g["lookups"] else "n/a"
    print(f"{s['model_type']}  ({s['model']})  {s['redis']}  {s['keys']}")
    print(
        f"  entries: {s['entries']} | leases: {s['leases']} | "
        f"memory: ~{_fmt_bytes(s['memory_bytes'])} | ttl: {s['ttl_s']} s"
    )
    print(
        f"  global: lookups {g['lookups']} | backend calls {g['computations']} | "
        f"L2 hits {g['l2_hits']} | L2 errors {g['l2_errors']} | "
        f"L2 auth failures {g['l2_auth_failures']} | lease waits {g['lease_waits']} | "
        f"takeovers {g['lease_takeovers']} | hit rate {rate}"
    )


def _fail(message: str, code: int = 1) -> int:
    """Print ``message`` and return ``code``: 1 when Redis failed at run time, 2 (``_usage_error``)
    when nothing was asked of Redis because the command line or the config is wrong, the
    convention of every ``guardcache`` command (``check`` exits 2 on those too)."""
    print(f"guardcache cache: {message}", file=sys.stderr)
    return code


def _usage_error(message: str) -> int:
    return _fail(message, 2)


def run_stats(args: argparse.Namespace) -> int:
    try:
        found = targets(args.config, args.model)
    except ConfigError as exc:
        return _usage_error(str(exc))
    report: dict[str, Any] = {"models": [], "prefixes": {}}
    try:
        for target in found:
            with _connect(target.endpoint) as client:
                report["models"].append(model_stats(client, target))
                if args.all:
                    where = f"{target.where} {target.keys.prefix}"
                    if where not in report["prefixes"]:
                        report["prefixes"][where] = prefix_scopes(client, target.keys.prefix)
    except REDIS_ERRORS as exc:
        return _fail(f"Redis error: {type(exc).__name__}: {exc}")
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for model in report["models"]:
        _print_model(model)
    for where, scopes in report["prefixes"].items():
        print(f"all keys under {where}:")
        for scope, n in scopes.items():
            print(f"  {scope}: {n}")
    return 0


def run_clear(args: argparse.Namespace) -> int:
    if bool(args.model) == bool(args.all):
        return _usage_error("clear needs exactly one of --model TYPE (one model) or --all (the whole prefix)")
    try:
        found = targets(args.config, args.model)
    except ConfigError as exc:
        return _usage_error(str(exc))
    deleted: dict[str, int] = {}
    told: dict[str, list[str]] = {}
    for target in found:
        pattern = prefix_pattern(target.keys.prefix) if args.all else target.keys.scope_pattern
        where = f"{target.where} {pattern}"
        if where in deleted:  # --all: several models share one prefix
            continue
        try:
            with _connect(target.endpoint) as client:
                deleted[where], told[where] = clear_shared(client, target.keys, everything=args.all)
        except REDIS_ERRORS as exc:
            done = f"; cleared before it: {', '.join(deleted)}" if deleted else ""
            return _fail(
                f"Redis error at {target.where} ({target.model_type}): {type(exc).__name__}: {exc}; "
                f"the clear of {pattern} did not complete and no replica was told to drop its "
                f"in-process entries{done}"
            )
    if args.json:
        report = {"deleted": deleted, "total": sum(deleted.values()), "replicas_told": told}
        print(json.dumps(report, indent=2))
        return 0
    for where, n in deleted.items():
        print(f"deleted {n} keys: {where}")
        print(f"  running replicas told to drop their in-process entries of: {', '.join(told[where])}")
    return 0


__all__ = ["register", "run_clear", "run_stats"]
