"""``guardcache cache stats|clear`` against a real redis-server, with a config folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guardcache.cache.redis.keys import model_scope
from guardcache.cli import main
from tests.integration.redis_support import RedisServer, ready_tier, verdict

pytestmark = pytest.mark.integration

PREFIX = "gccli"
MODELS = {"content_safety": "nvidia/cs-model", "topic_control": "nvidia/tc-model"}


def write_config(tmp: Path, url: str) -> Path:
    models = "".join(
        f"""
  - type: {kind}
    engine: nim
    model: {name}
    parameters: {{base_url: "http://127.0.0.1:9/v1"}}
    cache:
      enabled: true
      store: redis
      redis: {{url: "{url}", key_prefix: {PREFIX}, ttl: 3600}}
"""
        for kind, name in MODELS.items()
    )
    (tmp / "config.yml").write_text(f"models:{models}", encoding="utf-8")
    return tmp


async def fill(url: str, kind: str, n: int) -> None:
    tier = await ready_tier(url, model_scope(kind, MODELS[kind]), key_prefix=PREFIX)
    for i in range(n):
        await tier.get_or_compute(i.to_bytes(32, "big"), lambda: verdict())
    await tier.aclose()  # flushes the shared counters


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["cache", *args])
    out, err = capsys.readouterr()
    return code, out, err


async def test_stats_counts_entries_per_model_and_shows_global_counters(
    tmp_path: Path,
    redis_server: RedisServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The CLI goes by prefix and scope: it needs the URL, not the replicas' secret.
    monkeypatch.delenv("GUARDCACHE_REDIS_SECRET", raising=False)
    await fill(redis_server.url, "content_safety", 30)
    await fill(redis_server.url, "topic_control", 5)
    config = write_config(tmp_path, redis_server.url)

    code, out, _ = cli(capsys, "stats", "--config", str(config), "--json")
    assert code == 0
    report = {m["model_type"]: m for m in json.loads(out)["models"]}
    assert report["content_safety"]["entries"] == 30
    assert report["topic_control"]["entries"] == 5
    assert report["content_safety"]["global"]["lookups"] == 30
    assert report["content_safety"]["global"]["computations"] == 30
    assert report["content_safety"]["global"]["l2_auth_failures"] == 0
    assert report["content_safety"]["memory_bytes"] > 0

    code, out, _ = cli(capsys, "stats", "--config", str(config), "--model", "topic_control", "--all")
    assert code == 0
    assert "topic_control" in out and "entries: 5 |" in out and "content_safety  (" not in out
    assert "L2 auth failures 0" in out
    assert f"  {model_scope('content_safety', MODELS['content_safety'])}: 31" in out  # 30 + stats


async def test_clear_one_model_keeps_the_others(
    tmp_path: Path, redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    await fill(redis_server.url, "content_safety", 1200)  # more than one SCAN/UNLINK batch
    await fill(redis_server.url, "topic_control", 5)
    redis_server.client().set("unrelated:key", b"x")
    config = write_config(tmp_path, redis_server.url)

    code, out, _ = cli(capsys, "clear", "--config", str(config), "--model", "content_safety", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["total"] == 1201  # 1200 verdicts + the counters hash
    cs_scope, tc_scope = (model_scope(kind, name) for kind, name in MODELS.items())
    assert list(report["replicas_told"].values()) == [[cs_scope]]
    client = redis_server.client()
    # what is left of the model: its clear token, which its replicas read to drop their L1s
    assert list(client.scan_iter(match=f"{PREFIX}:content_safety:*")) == [
        f"{PREFIX}:{cs_scope}:cleared".encode()
    ]
    assert len(list(client.scan_iter(match=f"{PREFIX}:topic_control:*"))) == 6

    code, out, _ = cli(capsys, "clear", "--config", str(config), "--all")
    assert code == 0 and "deleted 6 keys" in out and f"{cs_scope}, {tc_scope}" in out
    assert sorted(client.scan_iter(match=f"{PREFIX}:*")) == [
        f"{PREFIX}:{scope}:cleared".encode() for scope in (cs_scope, tc_scope)
    ]
    assert client.get("unrelated:key") == b"x"  # never outside the prefix


def test_clear_needs_a_model_or_all_and_names_unknown_models(
    tmp_path: Path, redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, redis_server.url)
    code, _, err = cli(capsys, "clear", "--config", str(config))
    assert code == 2 and "--model TYPE" in err and "--all" in err  # usage error: 2, as `check`
    code, _, err = cli(capsys, "clear", "--config", str(config), "--model", "nope")
    assert code == 2 and "content_safety, topic_control" in err


def test_an_unreachable_redis_is_reported_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, "redis://:secret@127.0.0.1:1/0")
    code, _, err = cli(capsys, "stats", "--config", str(config))
    assert code == 1 and "Redis error" in err and "secret" not in err
