"""The broker's configuration: one validated, immutable value."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional

from zkcoord.broker.log import LogConfig
from zkcoord.errors import ConfigError

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class BrokerConfig:
    """Everything a broker needs besides its ZooKeeper client.

    ``idle_timeout_ms``: a connection that sends nothing for this long is
    closed (Kafka's connections.max.idle.ms). ``register_timeout_ms``: how long to wait at start for the registration
    of a crashed predecessor with the same id to expire. ``host`` is the address bound and advertised (127.0.0.1 unless told
    otherwise); ``port`` 0 picks a free port. ``advertised_host`` overrides what
    goes into ZooKeeper when clients must use another name. Flush and retention
    settings are those of :class:`LogConfig`, applied to every partition.
    """

    broker_id: int
    data_dir: str
    host: str = "127.0.0.1"
    port: int = 0
    advertised_host: Optional[str] = None
    rack: Optional[str] = None
    segment_bytes: int = 128 * 1024 * 1024
    index_interval_bytes: int = 4096
    flush_messages: Optional[int] = None
    flush_ms: Optional[int] = None
    retention_bytes: int = -1
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_check_ms: int = 60_000
    max_request_bytes: int = 100 * 1024 * 1024
    max_connections: int = 1000
    sendfile_threshold: int = 64 * 1024
    max_fetch_wait_ms: int = 30_000
    register_timeout_ms: int = 30_000
    idle_timeout_ms: int = 600_000

    def __post_init__(self):
        if not isinstance(self.broker_id, int) or not 0 <= self.broker_id <= _INT32_MAX:
            raise ConfigError(f"broker id must be an integer in [0, {_INT32_MAX}], got {self.broker_id!r}")
        if not isinstance(self.data_dir, str) or not self.data_dir:
            raise ConfigError("data_dir must be a non-empty path")
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            raise ConfigError(f"host must be an IP address to bind, got {self.host!r}") from None
        if not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be in [0, 65535], got {self.port!r}")
        for name in ("max_request_bytes", "max_connections", "retention_check_ms", "max_fetch_wait_ms",
                     "register_timeout_ms", "idle_timeout_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.max_request_bytes < 1024:
            raise ConfigError("max_request_bytes must be at least 1024")
        if not isinstance(self.sendfile_threshold, int) or self.sendfile_threshold < 0:
            raise ConfigError("sendfile_threshold must be >= 0")
        self.log_config()  # validates the storage settings

    def log_config(self) -> LogConfig:
        return LogConfig(
            segment_bytes=self.segment_bytes,
            index_interval_bytes=self.index_interval_bytes,
            flush_messages=self.flush_messages,
            flush_ms=self.flush_ms,
            retention_bytes=self.retention_bytes,
            retention_ms=self.retention_ms,
        )

    @property
    def advertised(self) -> str:
        return self.advertised_host or self.host
