"""``cache.redis``: the shared Redis tier of a model's cache, as a config writes it.

Its own module because it is its own subject: where Redis is (a standalone server, a Cluster, the
primary a Sentinel set names), how to log in and the tier's timings, with the cross-field rules of
each mode; the environment it names is read at start by :mod:`guardcache.config.redis_env`.
"""

from __future__ import annotations

import os
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, Field, model_validator

from guardcache.config.errors import FieldError
from guardcache.config.fields import STRICT, EnvVarName, PositiveInt, reject_bool

DEFAULT_REDIS_SECRET_ENV_VAR = "GUARDCACHE_REDIS_SECRET"


_DatabaseIndex = Annotated[int, BeforeValidator(reject_bool), Field(ge=0)]
_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def _scheme(url: str) -> str:
    """``url``'s scheme for an error message (never the URL: it may hold a password)."""
    return url.split("://", 1)[0] + "://" if "://" in url else "no scheme"


def _host_port(entry: str) -> tuple[str, int] | None:
    """``host:port`` (``[v6]:port`` too) -> (host, port); None when it is not one."""
    host, sep, port = entry.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


class RedisConfig(BaseModel):
    """The shared Redis tier of a model's cache: where it is (``mode``), how to log in, its settings.

    - ``mode: standalone`` (the default): one Redis (or Valkey), ``url`` or ``url_env_var``.
    - ``mode: cluster``: a Redis Cluster (ElastiCache/Memorystore cluster mode, self-hosted);
      ``url``/``url_env_var`` (one seed node, e.g. the configuration endpoint) or ``urls`` (several);
      the client discovers the slots and follows them.
    - ``mode: sentinel``: a Sentinel-managed primary: ``sentinels`` (``host:port`` each) and
      ``service_name``; ``db`` and ``tls`` here, as there is no URL.

    Credentials are never in the file: ``username_env_var`` / ``password_env_var`` name environment
    variables holding the ACL user and password (``sentinel_*`` the Sentinels' own, if they have
    any), read when the cache is built. ``tls_ca_file`` is the CA bundle that verifies the servers'
    certificates (``rediss://`` URLs, or ``tls: true`` with Sentinel).

    Entries are authenticated with a secret read from the environment (``secret_env_var``, never
    from YAML) when the cache is built; an unset or short secret stops start-up (see
    ``guardcache.config.redis_env.redis_settings``): a shared tier anyone with Redis access could fill
    with verdicts must not start silently. ``previous_secret_env_var`` names where the old secret is
    during a key rotation; unset or empty there means no rotation is in progress.
    """

    model_config = STRICT

    mode: Literal["standalone", "cluster", "sentinel"] = "standalone"
    url: str | None = None
    url_env_var: EnvVarName | None = None
    urls: list[str] | None = None  # cluster: seed nodes
    sentinels: list[str] | None = None  # sentinel: host:port of each Sentinel
    service_name: str | None = Field(default=None, min_length=1)  # sentinel: the monitored primary
    db: _DatabaseIndex = 0  # sentinel (standalone: the URL's path; a cluster has database 0 only)
    tls: bool = False  # sentinel (the other modes: a rediss:// URL)
    tls_ca_file: str | None = Field(default=None, min_length=1)  # PEM bundle verifying the servers
    username_env_var: EnvVarName | None = None  # the ACL user (Redis 6+), read at start-up
    password_env_var: EnvVarName | None = None
    sentinel_username_env_var: EnvVarName | None = None  # the Sentinels' own ACL user, if any
    sentinel_password_env_var: EnvVarName | None = None
    ttl: PositiveInt = 86400  # seconds a verdict lives in Redis
    key_prefix: str = Field(default="guardcache", min_length=1)
    timeout_ms: PositiveInt = 50  # per Redis operation; past it the check falls back to the model
    # Setting up a connection (TCP, TLS, AUTH; Sentinel: asking for the primary) and reading a
    # cluster's slots: in the background, never within timeout_ms (docs/redis.md, "Connecting").
    connect_timeout_ms: PositiveInt = 1000
    pool_size: PositiveInt = 16
    # How long one replica may hold a key's lease while it calls the model (cross-replica single
    # flight); longer than a healthy check. A crashed leader delays the others by at most this.
    lease_ms: PositiveInt = 5000
    # HMAC secret of the entries (keys and values), at least 16 bytes; required, no opt-out.
    secret_env_var: EnvVarName = DEFAULT_REDIS_SECRET_ENV_VAR
    # During a key rotation: the old secret, still accepted on read (entries are re-written).
    previous_secret_env_var: EnvVarName | None = None

    @model_validator(mode="after")
    def _one_url(self) -> RedisConfig:
        if self.url is not None and self.url_env_var is not None:
            raise FieldError("set either url or url_env_var, not both", ("url_env_var",))
        if self.previous_secret_env_var is not None and self.previous_secret_env_var == self.secret_env_var:
            raise FieldError(
                f"must name another variable than secret_env_var (got {self.previous_secret_env_var!r})",
                ("previous_secret_env_var",),
            )
        if self.url is not None and not self.url.startswith(_REDIS_SCHEMES):
            # Not echoing the URL: it may hold a password.
            raise FieldError(
                f"expected a redis://, rediss:// or unix:// URL (got {_scheme(self.url)})", ("url",)
            )
        self._check_mode()
        return self

    def _check_mode(self) -> None:
        """What each mode needs, and the settings that belong to another mode."""
        mode = self.mode
        if mode != "sentinel":
            for name in (
                "sentinels",
                "service_name",
                "sentinel_username_env_var",
                "sentinel_password_env_var",
            ):
                if getattr(self, name) is not None:
                    raise FieldError(f"only with mode: sentinel (this is mode: {mode})", (name,))
            if self.db:
                where = (
                    "a Redis Cluster has database 0 only"
                    if mode == "cluster"
                    else "standalone: the database is the URL's path, e.g. redis://host:6379/2"
                )
                raise FieldError(f"only with mode: sentinel ({where})", ("db",))
            if self.tls:
                raise FieldError(
                    f"only with mode: sentinel; with mode: {mode} a rediss:// URL turns TLS on", ("tls",)
                )
        if mode != "cluster" and self.urls is not None:
            raise FieldError(
                f"only with mode: cluster (seed nodes); mode: {mode} takes "
                + ("sentinels" if mode == "sentinel" else "url or url_env_var"),
                ("urls",),
            )
        if mode == "cluster":
            if self.urls is not None and (self.url is not None or self.url_env_var is not None):
                raise FieldError(
                    "set one of url, url_env_var or urls (the seed nodes), not several", ("urls",)
                )
            if self.urls is not None and not self.urls:
                raise FieldError("needs at least one seed node URL", ("urls",))
            for i, url in enumerate(self.urls or ()):
                if not url.startswith(("redis://", "rediss://")):
                    raise FieldError(
                        f"expected a redis:// or rediss:// URL (got {_scheme(url)})", ("urls", i)
                    )
            if self.urls and len({_scheme(u) for u in self.urls}) > 1:
                raise FieldError(
                    "every seed node needs the same scheme (all redis:// or all rediss://)", ("urls",)
                )
            if self.url is not None and self.url.startswith("unix://"):
                raise FieldError(
                    "a Redis Cluster is reached over TCP: expected redis:// or rediss://", ("url",)
                )
        if mode == "sentinel":
            for name in ("url", "url_env_var"):
                if getattr(self, name) is not None:
                    raise FieldError(
                        "not with mode: sentinel: the Sentinels name the primary (give sentinels and "
                        "service_name; db and tls for the rest)",
                        (name,),
                    )
            if not self.sentinels:
                raise FieldError(
                    "mode: sentinel needs sentinels: [host:port, ...] "
                    "(e.g. [10.0.0.1:26379, 10.0.0.2:26379])",
                    ("sentinels",),
                )
            for i, entry in enumerate(self.sentinels):
                if _host_port(entry) is None:
                    raise FieldError(f"expected host:port (got {entry!r})", ("sentinels", i))
            if self.service_name is None:
                raise FieldError(
                    "mode: sentinel needs service_name: the name the Sentinels monitor the primary by "
                    "(sentinel monitor <service_name> ...)",
                    ("service_name",),
                )
        if self.tls_ca_file is not None:
            plain = [
                u for u in (self.url, *(self.urls or ())) if u is not None and not u.startswith("rediss://")
            ]
            if (mode == "sentinel" and not self.tls) or plain:
                raise FieldError(
                    "a CA bundle is for TLS: use rediss:// URLs"
                    + (" (or tls: true)" if mode == "sentinel" else ""),
                    ("tls_ca_file",),
                )

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        """``sentinels`` as (host, port) pairs."""
        return [hp for hp in map(_host_port, self.sentinels or ()) if hp is not None]

    def resolved_url(self) -> str | None:
        """The URL to connect to: ``url``, or the value of ``url_env_var`` read now (None if unset)."""
        if self.url_env_var is not None:
            return os.environ.get(self.url_env_var) or None
        return self.url

    def resolved_secret(self) -> bytes | None:
        """The value of ``secret_env_var`` read now, as UTF-8 bytes (None if unset or empty)."""
        return _env_bytes(self.secret_env_var)

    def resolved_previous_secret(self) -> bytes | None:
        """The value of ``previous_secret_env_var`` read now (None: not named, unset or empty)."""
        return None if self.previous_secret_env_var is None else _env_bytes(self.previous_secret_env_var)


def _env_bytes(name: str) -> bytes | None:
    """An env var as UTF-8 bytes, surrounding whitespace dropped (a secret mounted from a file often
    ends with a newline that other replicas' copies lack: they would silently share nothing)."""
    value = (os.environ.get(name) or "").strip()
    return value.encode("utf-8") if value else None


__all__ = ["DEFAULT_REDIS_SECRET_ENV_VAR", "RedisConfig"]
