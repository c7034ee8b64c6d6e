"""Logging in to the tier's Redis: an ACL user and password from environment variables the config
names, and TLS (``rediss://``) verified with the config's CA bundle; a refusal is a miss, never a
failed check, and no credential reaches a log line or a repr."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path
from typing import Any

import pytest

from guardcache.config import RailsConfig
from guardcache.rails.caches import build_cache
from guardcache.testing import RedisServer, free_port
from tests.integration.redis_support import TEST_SECRET, verdict

pytestmark = pytest.mark.integration

PASSWORD = "gc-acl-password-0123456789"


@pytest.fixture(autouse=True)
def redis_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDCACHE_REDIS_SECRET", TEST_SECRET.decode())


def tier(redis: str) -> Any:
    config = RailsConfig.from_content(
        f"""
models:
  - type: content_safety
    engine: nim
    model: nvidia/cs-model
    parameters: {{base_url: "http://127.0.0.1:9/v1"}}
    cache: {{store: redis, redis: {{{redis}}}}}
"""
    )
    return build_cache(config.model("content_safety"))


async def test_an_acl_user_logs_in_with_credentials_from_the_environment(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    redis_server.client().acl_setuser(
        "gcuser", enabled=True, passwords=[f"+{PASSWORD}"], keys=["gclogin:*"], commands=["+@all"]
    )
    redis_server.client().acl_setuser("default", enabled=False)  # no anonymous access at all
    monkeypatch.setenv("GC_TEST_REDIS_USER", "gcuser")
    monkeypatch.setenv("GC_TEST_REDIS_PASSWORD", PASSWORD + "\n")  # a mounted file's newline is dropped
    redis = (
        f"url: '{redis_server.url}', key_prefix: gclogin, username_env_var: GC_TEST_REDIS_USER, "
        "password_env_var: GC_TEST_REDIS_PASSWORD"
    )
    cache = tier(redis)
    calls = []
    assert await cache.get_or_compute(b"\x01" * 32, lambda: calls.append(1) or verdict()) == verdict()
    assert cache.tier_stats().l2_misses == 1 and cache.tier_stats().l2_errors == 0
    other = tier(redis)
    assert await other.get_or_compute(b"\x01" * 32, lambda: calls.append(1) or verdict()) == verdict()
    assert other.tier_stats().l2_hits == 1 and len(calls) == 1

    monkeypatch.setenv("GC_TEST_REDIS_PASSWORD", "not-the-password")
    refused = tier(redis)
    assert await refused.get_or_compute(b"\x01" * 32, lambda: verdict()) == verdict()  # a miss
    assert refused.tier_stats().l2_unavailable == 1
    shown = caplog.text + repr(cache.store.settings) + repr(cache)
    assert PASSWORD not in shown and "not-the-password" not in shown
    for c in (cache, other, refused):
        await c.aclose(flush=False)


def certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a certificate it signed for 127.0.0.1 (EC keys: fast to make)."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=gc-test-ca")
    run("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n", encoding="utf-8")
    run(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.crt", "-days", "2", "-extfile", "san.ext",
    )  # fmt: skip
    return folder / "ca.crt", folder / "server.crt", folder / "server.key"


async def test_tls_is_verified_with_the_configured_ca_bundle(tmp_path: Path) -> None:
    ca, cert, key = certificates(tmp_path)
    tls_port = free_port()
    server = RedisServer(
        tmp_path,
        args=[
            "--tls-port", str(tls_port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
            "--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no",
        ],
    )  # fmt: skip
    server.start_on_free_port()
    try:
        url = f"rediss://127.0.0.1:{tls_port}/0"
        cache = tier(f"url: '{url}', key_prefix: gctls, tls_ca_file: '{ca}'")
        assert await cache.connect()  # as at start-up: the handshake is set-up, not an operation
        await cache.get_or_compute(b"\x01" * 32, lambda: verdict())
        assert cache.tier_stats().l2_errors == 0 and cache.tier_stats().l2_misses == 1
        assert server.client().exists(cache.store.value_key(b"\x01" * 32)) == 1  # it went over TLS
        untrusted = tier(f"url: '{url}', key_prefix: gctls")  # unknown CA
        assert not await untrusted.connect()  # the certificate does not verify: never up
        assert await untrusted.get_or_compute(b"\x02" * 32, lambda: verdict()) == verdict()
        assert untrusted.tier_stats().l2_unavailable == 1 and untrusted.tier_stats().connecting
        await cache.aclose(flush=False)
        await untrusted.aclose(flush=False)
    finally:
        server.kill()
