"""The HTTP endpoint Prometheus scrapes: one per process, served on gevent.

gevent's own WSGI server runs prometheus_client's WSGI application, one
greenlet per scrape, so serving never blocks the hub and needs no thread
(prometheus_client's ``start_http_server`` would start one). A scrape reads
the process's state without yielding, so what it reports is one instant's.
"""

from __future__ import annotations

import logging
from typing import Optional

import gevent.pywsgi
from prometheus_client import CollectorRegistry, make_wsgi_app

from zkcoord.errors import ZkcoordError

log = logging.getLogger(__name__)

# Scrapes served at once; Prometheus sends one at a time per target.
MAX_SCRAPES = 16


class MetricsEndpointError(ZkcoordError):
    """The metrics endpoint could not listen where it was told."""


class MetricsEndpoint:
    """Serves ``registry`` at http://host:port/metrics (any path answers, as
    prometheus_client's application does)."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int):
        self.host = host
        self._asked_port = port
        self._server = gevent.pywsgi.WSGIServer((host, port), make_wsgi_app(registry), spawn=MAX_SCRAPES,
                                                log=None, error_log=log)
        self._started = False

    @property
    def port(self) -> Optional[int]:
        return self._server.server_port if self._started else None

    def start(self) -> "MetricsEndpoint":
        try:
            self._server.start()
        except OSError as exc:
            raise MetricsEndpointError(f"cannot serve metrics on {self.host}:{self._asked_port}: {exc}") from None
        self._started = True
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)
        return self

    def stop(self) -> None:
        if self._started:
            self._server.stop(timeout=1)
            self._started = False
