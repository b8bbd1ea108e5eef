"""The metrics endpoint's settings, shared by ``zkcoord server`` and ``zkcoord broker``.

Nothing here imports prometheus_client or gevent, so a command can declare
these options before gevent patches the process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from zkcoord.settings import PORT, check, ip_address, setting


@dataclass(frozen=True)
class MetricsConfig:
    """Where a process serves its Prometheus metrics, if anywhere."""

    port: Optional[int] = setting(None, "serve Prometheus metrics over HTTP on this port (0: a free one, written "
                                        "to the port file as metrics_port; default: not served)",
                                  flag="--metrics-port", **PORT)
    host: Optional[str] = setting(None, "address the metrics endpoint binds (default: the process's own host)",
                                  flag="--metrics-host", validate=ip_address)

    def __post_init__(self) -> None:
        check(self)

    @property
    def enabled(self) -> bool:
        return self.port is not None
