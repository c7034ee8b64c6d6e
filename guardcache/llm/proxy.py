"""HTTP proxies from the environment, for guardcache's own HTTP/1.1 client.

Which proxy: the one curl, requests and httpx would use. ``HTTP_PROXY`` / ``HTTPS_PROXY`` by the
target's scheme, else ``ALL_PROXY`` (aiohttp, the transport that carried proxied URLs before,
ignored it), each in either case; ``NO_PROXY`` exempts hosts (``*``, names, ``.suffix``, IP
addresses). Read through :mod:`urllib.request`, the standard library's reading of the same
variables.

How: a plain ``http://`` target is asked of the proxy in absolute form (``POST http://host/path``);
an ``https://`` target goes through a ``CONNECT`` tunnel, and TLS runs end to end inside it, so
the proxy never sees the request, its API key or the answer. Credentials in the proxy's URL go
to the proxy alone (``Proxy-Authorization``), never to the target.

Only ``http://`` proxies are spoken to. A ``socks5://`` or ``https://`` proxy is refused with a
configuration error that names the variable: silently going direct would bypass a proxy the
operator relies on, and going nowhere must say why.
"""

from __future__ import annotations

import asyncio
import base64
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from guardcache.llm.transport_contract import WireError, WireKind

MAX_CONNECT_HEAD = 8 * 1024
"""Bytes of a proxy's answer to ``CONNECT`` read before giving up (a head, no body)."""


@dataclass(frozen=True, slots=True)
class Proxy:
    """Where to send a base URL's connections instead of its own host."""

    host: str
    port: int
    authorization: str | None = field(default=None, repr=False)  # Proxy-Authorization's value
    source: str = ""  # the variable it came from, for messages


def env_proxy(base_url: str) -> Proxy | None:
    """The proxy the environment names for ``base_url``, or None (none set, or ``NO_PROXY``).

    Raises:
        WireError: ``CONFIG`` when the named proxy is not an ``http://`` URL with a host.
    """
    parts = urllib.parse.urlsplit(base_url)
    proxies = urllib.request.getproxies_environment()
    scheme = parts.scheme.lower()
    url = proxies.get(scheme)
    source = f"{scheme.upper()}_PROXY"
    if not url:
        url, source = proxies.get("all"), "ALL_PROXY"
    if not url:
        return None
    host = parts.hostname or ""
    if _bypassed(host, parts.port, proxies.get("no", "")):
        return None
    proxy = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    if proxy.scheme.lower() != "http" or not proxy.hostname:
        raise WireError(
            WireKind.CONFIG,
            "UnsupportedProxy",
            f"{source} names a {proxy.scheme or 'schemeless'} proxy; only http:// proxies are "
            "supported (exempt the backend with NO_PROXY, or use an HTTP proxy)",
        )
    authorization = None
    if proxy.username is not None:
        user = urllib.parse.unquote(proxy.username)
        password = urllib.parse.unquote(proxy.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        authorization = f"Basic {token}"
    return Proxy(proxy.hostname, proxy.port or 80, authorization, source)


def _bypassed(host: str, port: int | None, no_proxy: str) -> bool:
    """``NO_PROXY``, as curl reads it: ``*``; a name matching the host or a domain suffix of it
    (``example.com`` and ``.example.com`` both cover ``api.example.com``); an entry with a port
    only for that port."""
    host = host.lower().strip("[]")
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        name, _, entry_port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        if entry_port and (not entry_port.isdigit() or port is None or int(entry_port) != port):
            continue
        name = name.strip("[]").lstrip(".")
        if host == name or host.endswith("." + name):
            return True
    return False


class _Tunnel(asyncio.Protocol):
    """Reads a proxy's answer to ``CONNECT``: the head only, bounded in size."""

    def __init__(self) -> None:
        self.done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.buffer = b""
        self.extra = False  # bytes came behind the head (see open_tunnel)

    def data_received(self, data: bytes) -> None:
        if self.done.done():
            return
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end >= 0:
            # Bytes behind the head are judged by its status: a refusal's page (a 407's or 403's
            # body, in the same read as its head from Squid and its kin) is no error of its own.
            self.extra = end + 4 != len(self.buffer)
            self.done.set_result(self.buffer[:end])
        elif len(self.buffer) > MAX_CONNECT_HEAD:
            self.done.set_exception(
                WireError(WireKind.TOO_LARGE, "ProxyError", f"CONNECT answer over {MAX_CONNECT_HEAD} bytes")
            )

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(WireError(WireKind.DROPPED, "ProxyError", "closed during CONNECT"))


async def open_tunnel(
    loop: asyncio.AbstractEventLoop, proxy: Proxy, host: str, port: int
) -> asyncio.Transport:
    """A TCP connection to ``proxy`` turned into a tunnel to ``host:port`` (the caller starts TLS
    on it). The caller bounds the time.

    Raises:
        WireError: ``CONNECT`` when the proxy cannot be reached or refuses the tunnel (retried),
            ``CONFIG`` for 407 (its credentials), ``DROPPED`` / ``TOO_LARGE`` for a broken answer.
    """
    try:
        transport, tunnel = await loop.create_connection(_Tunnel, proxy.host, proxy.port)
    except OSError as exc:
        raise WireError(WireKind.CONNECT, type(exc).__name__, f"proxy {proxy.source}: {exc}"[:200]) from exc
    try:
        name = f"[{host}]" if ":" in host else host
        lines = [f"CONNECT {name}:{port} HTTP/1.1", f"Host: {name}:{port}"]
        if proxy.authorization is not None:
            lines.append(f"Proxy-Authorization: {proxy.authorization}")
        transport.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        head = await tunnel.done
        status = _status(head)
        if status == 407:
            raise WireError(
                WireKind.CONFIG,
                "ProxyAuthenticationRequired",
                f"the proxy in {proxy.source} wants credentials (407): give them in its URL",
            )
        if not 200 <= status < 300:
            raise WireError(WireKind.CONNECT, "ProxyError", f"the proxy refused the tunnel (HTTP {status})")
        if tunnel.extra:  # the target speaks only after our TLS hello
            raise WireError(WireKind.DROPPED, "ProxyError", "bytes after CONNECT")
    except BaseException:
        transport.close()
        raise
    return transport


def _status(head: bytes) -> int:
    line = head.split(b"\r\n", 1)[0]
    parts = line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise WireError(WireKind.DROPPED, "ProxyError", "not an HTTP answer to CONNECT")
    return int(parts[1])


__all__ = ["MAX_CONNECT_HEAD", "Proxy", "env_proxy", "open_tunnel"]
