"""The transport seam's own types (Timeouts, PoolLimits) and TLS context: the default path (h1)
imports no httpx2; only llm/httpx_pool.py turns them into httpx2's."""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest

from guardcache.llm.httpx_pool import ClientPool, httpx_limits, httpx_timeout
from guardcache.llm.lanes import DEFAULT_LIMITS, PoolLimits, shared_ssl_context
from guardcache.llm.transport_contract import Timeouts

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_path_never_imports_httpx2() -> None:
    # A fresh interpreter: this test process has imported httpx2 already.
    code = (
        "import sys\n"
        "from guardcache import LLMRails, RailsConfig\n"
        "import guardcache.llm, guardcache.llm.client, guardcache.llm.default_pools\n"
        "import guardcache.rails.builder\n"
        "from guardcache.llm.default_pools import default_pool\n"
        "default_pool()\n"
        "print(sorted(m for m in sys.modules if m.startswith(('httpx2', 'httpcore2'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_package_names_httpx2s_pool_on_first_use_and_no_module_re_exports_it() -> None:
    import guardcache.llm
    import guardcache.llm.client
    import guardcache.llm.default_pools

    assert guardcache.llm.ClientPool is ClientPool  # the public face, lazily
    # Inside the package, a name has one home (the CHANGELOG says what moved where).
    assert not hasattr(guardcache.llm.client, "ClientPool")
    assert not hasattr(guardcache.llm.default_pools, "ClientPool")


def test_timeouts_become_httpx2_timeouts_in_one_place() -> None:
    phases = Timeouts(connect=1.0, read=2.0, write=3.0, pool=None)
    converted = httpx_timeout(phases)
    assert converted == httpx2.Timeout(connect=1.0, read=2.0, write=3.0, pool=None)
    assert httpx_timeout(Timeouts(1.0, 2.0, 3.0, None)) is converted  # converted once per value
    given = httpx2.Timeout(5.0)
    assert httpx_timeout(given) is given


def test_timeouts_of_reads_numbers_none_and_httpx2() -> None:
    assert Timeouts.of(None) == Timeouts()
    assert Timeouts.of(3) == Timeouts(3.0, 3.0, 3.0, 3.0)
    assert Timeouts.of(httpx2.Timeout(10, connect=2, pool=None)) == Timeouts(2, 10, 10, None)
    same = Timeouts(1, 2, 3, 4)
    assert Timeouts.of(same) is same
    with pytest.raises(TypeError, match="expected phase timeouts"):
        Timeouts.of("10")


def test_pool_limits_become_httpx2_limits() -> None:
    assert httpx_limits(DEFAULT_LIMITS) == httpx2.Limits(
        max_connections=100, max_keepalive_connections=32, keepalive_expiry=4.0
    )
    given = httpx2.Limits(max_connections=3)
    assert httpx_limits(given) is given
    assert ClientPool(limits=PoolLimits(max_connections=7))._limits == httpx2.Limits(
        max_connections=7, max_keepalive_connections=None, keepalive_expiry=5.0
    )


def _trust(context: ssl.SSLContext) -> tuple[object, ...]:
    return (
        context.protocol,
        context.verify_mode,
        context.check_hostname,
        context.options,
        context.minimum_version,
        context.verify_flags,
        sorted(str(c) for c in context.get_ca_certs()),
        context.cert_store_stats(),
    )


@pytest.mark.parametrize("env", [{}, {"SSL_CERT_FILE": "ca"}, {"SSL_CERT_DIR": "dir"}])
def test_the_tls_context_trusts_what_httpx2s_default_context_trusts(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import trustme

    authority = trustme.CA()
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
    if "SSL_CERT_FILE" in env:
        authority.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    if "SSL_CERT_DIR" in env:
        monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    shared_ssl_context.cache_clear()
    try:
        assert _trust(shared_ssl_context()) == _trust(httpx2.create_ssl_context())
    finally:
        shared_ssl_context.cache_clear()
