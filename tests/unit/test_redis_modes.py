"""``cache.redis.mode``: standalone, cluster, sentinel; what each needs, what belongs to another, and
the endpoint the tier is built with (credentials and TLS from the environment; nothing connects)."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import BlockingConnectionPool
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import SSLConnection
from redis.asyncio.sentinel import SentinelConnectionPool, SentinelManagedSSLConnection

from guardcache.cache.redis import RedisEndpoint, RedisSettings, TieredCache
from guardcache.cache.redis.clients import async_connection
from guardcache.cache.redis.connecting import is_off_path
from guardcache.config import RailsConfig
from guardcache.config.redis_env import redis_endpoint, redis_settings
from guardcache.errors import ConfigError
from guardcache.rails.caches import build_cache


def config(redis: str) -> RailsConfig:
    return RailsConfig.from_content(
        f"""
models:
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    parameters: {{base_url: "http://127.0.0.1:9/v1"}}
    cache: {{store: redis, redis: {{{redis}}}}}
"""
    )


def error(redis: str) -> str:
    with pytest.raises(ConfigError) as info:
        config(redis)
    return str(info.value)


def test_an_unknown_mode_names_the_choices_and_the_field() -> None:
    assert error("mode: clustered, url: 'redis://h:1'") == (
        "<string>: models[0].cache.redis.mode: expected one of 'standalone', 'cluster' or 'sentinel' "
        "(got 'clustered')"
    )


def test_standalone_is_the_default_and_takes_no_settings_of_the_other_modes() -> None:
    redis = config("url: 'redis://h:1/0'").model("content_safety").cache.redis
    assert redis is not None and redis.mode == "standalone"
    assert "models[0].cache.redis.urls: only with mode: cluster" in error("urls: ['redis://h:1']")
    assert "cache.redis.sentinels: only with mode: sentinel (this is mode: standalone)" in error(
        "url: 'redis://h:1', sentinels: ['h:26379']"
    )
    assert "cache.redis.db: only with mode: sentinel (standalone: the database is the URL's path" in error(
        "url: 'redis://h:1', db: 2"
    )
    assert "cache.redis.tls: only with mode: sentinel; with mode: standalone a rediss:// URL" in error(
        "url: 'redis://h:1', tls: true"
    )


def test_cluster_takes_one_seed_url_or_several() -> None:
    one = config("mode: cluster, url: 'redis://h:7000'").model("content_safety").cache.redis
    many = (
        config("mode: cluster, urls: ['redis://a:7000', 'redis://b:7000']")
        .model("content_safety")
        .cache.redis
    )
    assert one is not None and many is not None and many.urls == ["redis://a:7000", "redis://b:7000"]
    assert "set one of url, url_env_var or urls" in error(
        "mode: cluster, url: 'redis://h:1', urls: ['redis://b:1']"
    )
    assert "cache.redis.urls[1]: expected a redis:// or rediss:// URL (got unix://)" in error(
        "mode: cluster, urls: ['redis://a:1', 'unix:///tmp/r.sock']"
    )
    assert "same scheme" in error("mode: cluster, urls: ['redis://a:1', 'rediss://b:1']")
    assert "cache.redis.db: only with mode: sentinel (a Redis Cluster has database 0 only)" in error(
        "mode: cluster, url: 'redis://h:1', db: 1"
    )
    assert "store: redis needs redis.url or redis.url_env_var (mode: cluster: or redis.urls" in error(
        "mode: cluster"
    )


def test_sentinel_needs_sentinels_and_a_service_name_and_no_url() -> None:
    redis = (
        config("mode: sentinel, sentinels: ['10.0.0.1:26379', '[::1]:26380'], service_name: gc, db: 3")
        .model("content_safety")
        .cache.redis
    )
    assert redis is not None
    assert redis.sentinel_addresses == [("10.0.0.1", 26379), ("::1", 26380)] and redis.db == 3
    assert "cache.redis.sentinels: mode: sentinel needs sentinels: [host:port, ...]" in error(
        "mode: sentinel, service_name: gc"
    )
    assert "cache.redis.sentinels[1]: expected host:port (got 'h')" in error(
        "mode: sentinel, sentinels: ['h:1', 'h'], service_name: gc"
    )
    assert "cache.redis.service_name: mode: sentinel needs service_name" in error(
        "mode: sentinel, sentinels: ['h:1']"
    )
    assert "cache.redis.url: not with mode: sentinel: the Sentinels name the primary" in error(
        "mode: sentinel, sentinels: ['h:1'], service_name: gc, url: 'redis://h:1'"
    )
    assert "cache.redis.urls: only with mode: cluster (seed nodes); mode: sentinel takes sentinels" in error(
        "mode: sentinel, sentinels: ['h:1'], service_name: gc, urls: ['redis://h:1']"
    )


def test_credentials_are_env_var_names_and_a_ca_bundle_needs_tls() -> None:
    redis = (
        config(
            "url: 'rediss://h:1', username_env_var: GC_USER, password_env_var: GC_PASS, tls_ca_file: /ca.pem"
        )
        .model("content_safety")
        .cache.redis
    )
    assert redis is not None and redis.password_env_var == "GC_PASS"
    assert "password_env_var: expected the name of an environment variable" in error(
        "url: 'redis://h:1', password_env_var: 'hunter2 hunter2'"
    )
    assert "unknown key" in error("url: 'redis://h:1', password: hunter2")  # never a literal password
    assert "cache.redis.tls_ca_file: a CA bundle is for TLS: use rediss:// URLs" in error(
        "url: 'redis://h:1', tls_ca_file: /ca.pem"
    )
    assert "(or tls: true)" in error(
        "mode: sentinel, sentinels: ['h:1'], service_name: gc, tls_ca_file: /ca.pem"
    )
    assert "sentinel_password_env_var: only with mode: sentinel" in error(
        "url: 'redis://h:1', sentinel_password_env_var: GC_SPASS"
    )


# -- the endpoint the tier is built with ------------------------------------------------------------


@pytest.fixture
def redis_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDCACHE_REDIS_SECRET", "unit-test-secret-0123456789abcdef")


def endpoint_of(redis: str) -> RedisEndpoint:
    return redis_endpoint(config(redis).model("content_safety"), where="config.yml: models[0]")


def test_each_mode_builds_its_endpoint(redis_secret: None) -> None:
    cluster = endpoint_of("mode: cluster, urls: ['redis://a:7000', 'redis://b:7001']")
    assert (cluster.mode, cluster.urls, cluster.describe()) == (
        "cluster",
        ("redis://a:7000", "redis://b:7001"),
        "cluster redis://a:7000 (+1 seed nodes)",
    )
    sentinel = endpoint_of("mode: sentinel, sentinels: ['s1:26379', 's2:26379'], service_name: gc, db: 2")
    assert (sentinel.sentinels, sentinel.service_name, sentinel.db, sentinel.url) == (
        (("s1", 26379), ("s2", 26379)),
        "gc",
        2,
        "",
    )
    assert sentinel.describe() == "sentinel gc@s1:26379,s2:26379 db 2"
    settings = redis_settings(config("mode: cluster, url: 'redis://a:7000'").model("content_safety"))
    assert settings.url == "redis://a:7000" and settings.where.mode == "cluster"
    cache = build_cache(
        config("mode: sentinel, sentinels: ['s1:1'], service_name: gc").model("content_safety")
    )
    assert isinstance(cache, TieredCache) and "sentinel gc@s1:1" in cache.store._where  # nothing connected


def test_credentials_are_read_from_the_environment_and_never_shown(
    redis_secret: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    redis = "url: 'redis://h:1/0', username_env_var: GC_TEST_USER, password_env_var: GC_TEST_PASS"
    monkeypatch.setenv("GC_TEST_USER", "gcuser")
    monkeypatch.delenv("GC_TEST_PASS", raising=False)
    with pytest.raises(ConfigError) as info:
        endpoint_of(redis)
    assert str(info.value).startswith(
        "config.yml: models[0].cache.redis.password_env_var: environment variable GC_TEST_PASS is not set"
    )
    monkeypatch.setenv("GC_TEST_PASS", "hunter2-hunter2\n")
    endpoint = endpoint_of(redis)
    assert (endpoint.username, endpoint.password) == ("gcuser", "hunter2-hunter2")
    cache = build_cache(config(redis).model("content_safety"))
    assert isinstance(cache, TieredCache)
    shown = repr(endpoint) + repr(cache.store.settings) + cache.store._where + endpoint.describe()
    assert "hunter2" not in shown
    with pytest.raises(ConfigError, match="the Redis URL holds a password too; keep it in GC_TEST_PASS only"):
        endpoint_of("url: 'redis://:other@h:1/0', password_env_var: GC_TEST_PASS")


def test_a_ca_bundle_must_exist_and_a_cluster_url_from_the_environment_must_be_tcp(
    redis_secret: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=r"cache\.redis\.tls_ca_file: no such file: /nowhere/ca\.pem"):
        endpoint_of("url: 'rediss://h:1/0', tls_ca_file: /nowhere/ca.pem")
    ca = tmp_path / "ca.pem"
    ca.write_text("not checked here", encoding="utf-8")
    monkeypatch.setenv("GC_TEST_URL", "redis://h:1/0")
    with pytest.raises(ConfigError, match="the URL in GC_TEST_URL must start with rediss://"):
        endpoint_of(f"url_env_var: GC_TEST_URL, tls_ca_file: '{ca}'")
    monkeypatch.setenv("GC_TEST_URL", "unix:///tmp/redis.sock")
    with pytest.raises(ConfigError, match="a Redis Cluster is reached over TCP"):
        endpoint_of("mode: cluster, url_env_var: GC_TEST_URL")


def test_the_endpoint_checks_itself_and_settings_take_a_url_or_an_endpoint() -> None:
    for bad, message in [
        ({"mode": "ring", "urls": ("redis://h",)}, "mode must be one of standalone, cluster, sentinel"),
        ({"urls": ()}, "one URL"),
        ({"mode": "cluster", "urls": ("unix:///s",)}, "over TCP"),
        ({"mode": "sentinel", "sentinels": (("h", 1),)}, "service_name"),
        ({"urls": ("redis://h",), "db": 1}, "mode sentinel only"),
        ({"urls": ("redis://h",), "tls_ca_file": "/ca"}, "tls_ca_file is for TLS"),
    ]:
        with pytest.raises(ValueError, match=message):
            RedisEndpoint(**bad)  # type: ignore[arg-type]
    secret = b"unit-test-secret-0123456789abcdef"
    cluster = RedisEndpoint(mode="cluster", urls=("redis://a:1",))
    assert RedisSettings(endpoint=cluster, secret=secret).url == "redis://a:1"
    assert RedisSettings(url="redis://h/0", secret=secret).where == RedisEndpoint.of_url("redis://h/0")
    with pytest.raises(ValueError, match="not both"):
        RedisSettings(url="redis://h/0", endpoint=cluster, secret=secret)


async def test_each_mode_gets_its_client_with_tls_and_credentials_without_connecting(tmp_path: Path) -> None:
    ca = str(tmp_path / "ca.pem")
    login = {"username": "u", "password": "p", "tls_ca_file": ca}
    one = async_connection(
        RedisEndpoint(urls=("rediss://h:1/0",), **login), pool_size=3, timeout=0.2, connect_timeout=0.7
    )
    pool = one.client.connection_pool
    assert one.one_node and isinstance(pool, BlockingConnectionPool)
    # at most pool_size operations at once, and none before a connection is open (it comes up first)
    assert one.capacity.limit == 3 and one.capacity.open == 0
    # connections are set up off the operations' path, within the connect timeout
    assert is_off_path(pool.connection_class) and issubclass(pool.connection_class, SSLConnection)
    assert pool.max_connections == 3 and pool.connection_kwargs["socket_connect_timeout"] == 0.7
    assert one.setups.timeout_s == 0.7
    assert {k: pool.connection_kwargs[k] for k in ("username", "password", "ssl_ca_certs")} == {
        "username": "u",
        "password": "p",
        "ssl_ca_certs": ca,
    }

    cluster = async_connection(
        RedisEndpoint(mode="cluster", urls=("rediss://a:7000", "rediss://b:7001"), **login),
        pool_size=4,
        timeout=0.2,
        connect_timeout=0.7,
    )
    client = cluster.client
    assert isinstance(client, RedisCluster) and not cluster.one_node
    assert cluster.capacity.limit == 4  # the pools do not queue: the capacity does
    kwargs = client.connection_kwargs
    assert issubclass(kwargs["connection_class"], SSLConnection) and kwargs["ssl_ca_certs"] == ca
    assert is_off_path(kwargs["connection_class"]) and kwargs["socket_connect_timeout"] == 0.7
    assert all(node.connection_class is kwargs["connection_class"] for node in client.startup_nodes)
    assert (kwargs["max_connections"], kwargs["username"], kwargs["password"]) == (8, "u", "p")
    assert sorted(n.name for n in client.startup_nodes) == ["a:7000", "b:7001"]

    sentinel = async_connection(
        RedisEndpoint(
            mode="sentinel",
            sentinels=(("s1", 26379),),
            service_name="gc",
            db=2,
            tls=True,
            sentinel_password="sp",
            **login,
        ),
        pool_size=5,
        timeout=0.2,
        connect_timeout=0.7,
    )
    primary = sentinel.client.connection_pool
    assert isinstance(primary, SentinelConnectionPool) and sentinel.one_node and sentinel.capacity.limit == 5
    assert issubclass(primary.connection_class, SentinelManagedSSLConnection)
    assert is_off_path(primary.connection_class) and primary.max_connections == 5
    assert sentinel.setups.timeout_s == 1.4  # the Sentinels are asked first, then the primary
    assert (primary.connection_kwargs["db"], primary.connection_kwargs["password"]) == (2, "p")
    assert sentinel.sentinel is not None
    watcher = sentinel.sentinel.sentinels[0].connection_pool
    assert watcher.connection_kwargs["password"] == "sp" and watcher.connection_class is SSLConnection
    assert watcher.connection_kwargs["socket_connect_timeout"] == 0.7
    for conn in (one, cluster, sentinel):
        await conn.aclose()
