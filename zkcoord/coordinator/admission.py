"""When a server takes new connections: not while its event loop is behind.

A coordinator's work arrives as wake-ups in the gevent hub. libev's watchers
(members' frames, timers, the ZooKeeper client's socket) run as they fire;
every other wake-up (a new greenlet, a greenlet woken by an event) waits in
the hub's callback queue, of which the hub runs a few milliseconds per turn.
A crowd joining at once can fill that queue faster than it drains, and then
everything behind it is late: with seconds of lag the members' requests time
out, they retry, and the crowd grows. Kafka bounds the same thing with its
request queue (``queued.max.requests``); here the server stops accepting
while the queue is behind and lets the kernel's listen backlog hold the
crowd, and starts again once it has caught up.

:class:`CallbackLag` measures the queue's delay; :func:`should_accept` is
the decision, with hysteresis so that accepting does not flap;
:class:`GatedStreamServer` carries it out.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

import gevent
import gevent.server

log = logging.getLogger(__name__)

# How often the callback queue's delay is measured, and the gate reconsidered.
PROBE_INTERVAL_S = 0.1
# Accepting pauses when a wake-up waits this long in the hub's queue ...
PAUSE_AT_LAG_S = 0.5
# ... and resumes once the wait is back under this.
RESUME_AT_LAG_S = 0.1
# At most one warning about a paused accept per this many seconds.
WARN_EVERY_S = 10.0


def should_accept(accepting: bool, lag_s: float) -> bool:
    """Whether to accept new connections, given whether we do now and the queue's delay."""
    if accepting:
        return lag_s < PAUSE_AT_LAG_S
    return lag_s < RESUME_AT_LAG_S


class CallbackLag:
    """How long a callback waits in the hub's queue: every ``PROBE_INTERVAL_S``
    a timer (which libev runs as it fires) queues a probe and times its
    arrival. While a probe is in the queue its age is the delay so far."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._loop = gevent.get_hub().loop
        self._timer = None
        self._on_probe = None
        self._queued_at: Optional[float] = None
        self.last_s = 0.0
        self.worst_s = 0.0

    def start(self, on_probe=None) -> None:
        """Probe from now on; ``on_probe()`` (if given) runs after each timer, in the hub."""
        self._on_probe = on_probe
        self._timer = self._loop.timer(PROBE_INTERVAL_S, PROBE_INTERVAL_S)
        self._timer.start(self._probe)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.close()
            self._timer = None

    @property
    def lag_s(self) -> float:
        queued_at = self._queued_at
        waiting = self._clock() - queued_at if queued_at is not None else 0.0
        return max(self.last_s, waiting)

    def _probe(self) -> None:
        if self._queued_at is None:
            self._queued_at = self._clock()
            self._loop.run_callback(self._arrived)
        if self._on_probe is not None:
            self._on_probe()

    def _arrived(self) -> None:
        self.last_s = self._clock() - self._queued_at
        self.worst_s = max(self.worst_s, self.last_s)
        self._queued_at = None


class GatedStreamServer(gevent.server.StreamServer):
    """A StreamServer that stops accepting while the hub's callback queue is behind."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lag = CallbackLag()
        self.gated = False  # paused for lag (not for a full pool, which gevent handles)
        self.pauses = 0
        self._warned_at = float("-inf")

    def start(self) -> None:
        super().start()
        self.lag.start(self._reconsider)

    def stop(self, timeout=None) -> None:
        self.lag.stop()
        super().stop(timeout)

    def start_accepting(self) -> None:
        # gevent calls this too when its pool has room again: not while gated.
        if not self.gated:
            super().start_accepting()

    def _reconsider(self) -> None:
        lag_s = self.lag.lag_s
        if should_accept(not self.gated, lag_s) == (not self.gated):
            return
        self.gated = not self.gated
        if self.gated:
            self.pauses += 1
            self.stop_accepting()
            now = time.monotonic()
            if now - self._warned_at >= WARN_EVERY_S:
                self._warned_at = now
                log.warning("event loop %.2f s behind: not accepting connections until it catches up "
                            "(%d pause(s) so far)", lag_s, self.pauses)
        elif self.started:
            # Even with the pool full: gevent's accept loop then links itself
            # to the pool and resumes when a connection ends. Left stopped
            # here, nothing would ever start it again.
            super().start_accepting()
