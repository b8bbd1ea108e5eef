"""What a listener grants a peer it does not trust, and how it says no.

Both listeners of a process (the coordinator protocol's and the embedded
broker's Kafka one) take connections from anyone who can reach them, so each
bounds what a peer can hold: a frame, once its first byte arrived, must be
whole within a deadline (the idle limit applies only between frames, so
trickling bytes does not keep a connection); where authentication is
required, a connection must authenticate within a deadline of its start (so
connections that never log in do not hold the process's connections); a
remote address holds at most so many connections at once; and the bytes
kept for partial frames, over all connections of the process, stay under a
cap. Over a limit the connection or frame is refused and closed, counted
and logged, and the logging of such abuse is rate-limited
(:class:`AbuseLog`) so that a flood of bad frames cannot become a flood of
log lines.

Everything here is decision and bookkeeping, without sockets or gevent, so
that it is tested with a manual clock; the listeners do the I/O.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Optional

from zkcoord.errors import ZkcoordError
from zkcoord.settings import check, setting

# Kinds of abuse, as the refusal metric's label and the log limiter's key.
MALFORMED = "malformed"          # a frame that is not valid
UNSOLICITED = "unsolicited"      # a valid frame nobody asked for
FRAME_DEADLINE = "frame_deadline"  # a frame not whole within its deadline
PER_ADDRESS = "per_address"      # a connection over the per-address cap
BUFFER_CAP = "buffer_cap"        # a frame over the buffered-bytes cap
TLS_HANDSHAKE = "tls_handshake"  # a TLS handshake refused, or not done within its deadline
AUTHENTICATION_DEADLINE = "authentication_deadline"  # a connection that had to authenticate, not done in time
# Refusals of well-formed requests, logged through the abuse log as well
# (a client can send them as fast as it likes), not counted as refusals here.
REFUSED_PRODUCE = "refused_produce"
REFUSED_REGISTRATION = "refused_registration"
REFUSED_AUTHENTICATION = "refused_authentication"  # a SASL handshake or authentication refused
REFUSED_AUTHORIZATION = "refused_authorization"  # a request on a topic the authorizer refused


@dataclass(frozen=True)
class ConnectionLimits:
    """Limits on what one peer may hold of a listener, and the process's cap on partial frames."""

    frame_timeout_ms: int = setting(10_000, "a frame must arrive whole within this long of its first byte, "
                                            "or its connection is closed", minimum=1)
    # A few seconds: an honest client authenticates first thing (its SASL
    # exchange, or its RegisterConsumer's credential), in a few round trips.
    authentication_timeout_ms: int = setting(
        5_000, "where authentication is required, a connection that has not authenticated within this long of "
               "its start (its TLS handshake done) is closed", minimum=1)
    max_connections_per_address: int = setting(
        1000, "most connections one remote address may hold open at once on each listener (more are refused)",
        minimum=1)
    max_buffered_bytes: int = setting(
        256 * 1024 * 1024, "most bytes the process keeps for partial frames over all its connections; "
                           "a frame that would go beyond is refused and its connection closed", minimum=1024)
    abuse_log_lines: int = setting(10, "lines logged per kind of protocol abuse (malformed or unsolicited "
                                       "frames, refusals) per interval, the rest summed up in one line", minimum=1)
    abuse_log_interval_ms: int = setting(10_000, "the interval of --abuse-log-lines", minimum=1)

    def __post_init__(self) -> None:
        check(self)

    @property
    def frame_timeout_s(self) -> float:
        return self.frame_timeout_ms / 1000

    @property
    def authentication_timeout_s(self) -> float:
        return self.authentication_timeout_ms / 1000


class LimitExceeded(ZkcoordError):
    """A peer went over one of its listener's limits; ``kind`` says which."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class AbuseLog:
    """Logs protocol abuse at most ``lines`` times per ``interval_s`` per
    kind; what is held back is summed up in one line ("... and K more
    suppressed") once the interval is over, at the next line of that kind
    or at :meth:`flush`. One instance serves every site of a process."""

    def __init__(self, logger: logging.Logger, lines: int = 10, interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self.logger = logger
        self.lines = lines
        self.interval_s = interval_s
        self._clock = clock
        # kind -> [interval start, lines logged in it, lines suppressed in it]
        self._windows: dict[str, list] = {}

    def configure(self, lines: int, interval_s: float) -> None:
        self.lines, self.interval_s = lines, interval_s

    def log(self, kind: str, level: int, message: str, *args) -> bool:
        """Log ``message % args`` unless ``kind`` has had its lines this interval; whether it was logged."""
        now = self._clock()
        window = self._windows.get(kind)
        if window is None or now - window[0] >= self.interval_s:
            if window is not None:
                self._summarise(kind, window)
            window = self._windows[kind] = [now, 0, 0]
        if window[1] >= self.lines:
            window[2] += 1
            return False
        window[1] += 1
        self.logger.log(level, message, *args)
        return True

    def flush(self) -> None:
        """Sum up every interval that is over now (a caller with a timer need not wait for the next line)."""
        now = self._clock()
        for kind, window in list(self._windows.items()):
            if now - window[0] >= self.interval_s:
                self._summarise(kind, window)
                del self._windows[kind]

    def _summarise(self, kind: str, window: list) -> None:
        if window[2]:
            self.logger.warning("... and %d more %s line(s) suppressed in %.0f s", window[2],
                                kind.replace("_", " "), self.interval_s)


class AddressCounter:
    """Connections open per remote address, against a cap."""

    def __init__(self, cap: int):
        self.cap = cap
        self._open: dict[str, int] = {}

    def admit(self, address: str) -> bool:
        """Count one more connection from ``address``, if the cap allows; whether it did."""
        count = self._open.get(address, 0)
        if count >= self.cap:
            return False
        self._open[address] = count + 1
        return True

    def release(self, address: str) -> None:
        count = self._open.get(address, 0) - 1
        if count > 0:
            self._open[address] = count
        else:
            self._open.pop(address, None)

    def open(self, address: str) -> int:
        return self._open.get(address, 0)


class ByteBudget:
    """The bytes a process keeps for partial frames, against a cap. Each
    connection holds a :class:`FrameAccount` on it."""

    def __init__(self, cap: int):
        self.cap = cap
        self.used = 0

    def take(self, size: int) -> bool:
        if self.used + size > self.cap:
            return False
        self.used += size
        return True

    def give(self, size: int) -> None:
        self.used = max(self.used - size, 0)


class FrameAccount:
    """One connection's deadlines and frame in progress: when the frame's
    first byte came (for its deadline), the bytes of it charged to the
    process's budget, and, until the connection has authenticated where it
    must, when it must have.

    :meth:`progress` is told after each read how many bytes of an incomplete
    frame the connection holds (and whether it is within one at all) and
    raises :class:`LimitExceeded` when the frame is over its deadline or
    the budget; :meth:`read_timeout` says how long a read may wait and
    :meth:`check` whether a deadline has passed; :meth:`close` gives back
    what it held."""

    def __init__(self, limits: ConnectionLimits, budget: ByteBudget, peer: str = "?",
                 clock: Callable[[], float] = time.monotonic):
        self.timeout_s = limits.frame_timeout_s
        self.authentication_timeout_s = limits.authentication_timeout_s
        self.budget = budget
        self.peer = peer
        self._clock = clock
        self.started_at: Optional[float] = None  # the frame in progress's first byte
        self.charged = 0
        self.authenticate_by: Optional[float] = None  # None: no authentication awaited

    def must_authenticate(self) -> None:
        """The connection is to authenticate within the authentication timeout, from now."""
        self.authenticate_by = self._clock() + self.authentication_timeout_s

    def authenticated(self) -> None:
        """The connection has proved who it is: no deadline for that any more."""
        self.authenticate_by = None

    def progress(self, in_frame: bool, held: int, completed: bool = False) -> None:
        """After a read: whether a frame is in progress, the bytes of it
        held, and whether the read completed frames (then the one in
        progress began with it)."""
        if completed:
            self.started_at = None
        if not in_frame:
            self.started_at = None
            self._charge(0)
            return
        now = self._clock()
        if self.started_at is None:
            self.started_at = now
        self._charge(held)
        self.check(now)

    def remaining(self, now: Optional[float] = None) -> Optional[float]:
        """Seconds left for the frame in progress (None: none is)."""
        if self.started_at is None:
            return None
        return self.started_at + self.timeout_s - (self._clock() if now is None else now)

    def read_timeout(self, idle_s: Optional[float], now: Optional[float] = None) -> tuple[Optional[float], bool]:
        """How long the next read may wait (None: without end), and whether
        ``idle_s`` is what bounds it: between frames ``idle_s``, within one
        what is left of its deadline; and no longer, while the connection
        has yet to authenticate, than what is left of that deadline."""
        now = self._clock() if now is None else now
        frame_left = self.remaining(now)
        wait, idle = (idle_s, True) if frame_left is None else (frame_left, False)
        if self.authenticate_by is not None and (wait is None or self.authenticate_by - now < wait):
            wait, idle = self.authenticate_by - now, False
        return (None if wait is None else max(wait, 0.0)), idle

    def check(self, now: Optional[float] = None) -> None:
        """Raise LimitExceeded if the frame in progress is past its deadline,
        or the connection is past the one to authenticate by."""
        now = self._clock() if now is None else now
        left = self.remaining(now)
        if left is not None and left <= 0:
            raise LimitExceeded(FRAME_DEADLINE, f"a frame from {self.peer} was not whole within "
                                                f"{self.timeout_s:g} s of its first byte")
        if self.authenticate_by is not None and now >= self.authenticate_by:
            raise LimitExceeded(AUTHENTICATION_DEADLINE, f"{self.peer} did not authenticate within "
                                                         f"{self.authentication_timeout_s:g} s of connecting")

    def _charge(self, held: int) -> None:
        if held > self.charged:
            if not self.budget.take(held - self.charged):
                raise LimitExceeded(BUFFER_CAP, f"a partial frame from {self.peer} would take the bytes held "
                                                f"for partial frames past the process's cap of "
                                                f"{self.budget.cap} bytes")
        else:
            self.budget.give(self.charged - held)
        self.charged = held

    def close(self) -> None:
        self.budget.give(self.charged)
        self.charged = 0
        self.started_at = None


# The one abuse log of a process: every listener and the coordinator's core log through it.
abuse_log = AbuseLog(logging.getLogger("zkcoord.abuse"))


class Guard:
    """A process's limits at work: the byte budget its listeners share,
    and what counts refusals (``count(listener, kind)``, a metric)."""

    def __init__(self, limits: ConnectionLimits, count: Callable[[str, str], None] = lambda listener, kind: None):
        self.limits = limits
        self.budget = ByteBudget(limits.max_buffered_bytes)
        self.count = count
        abuse_log.configure(limits.abuse_log_lines, limits.abuse_log_interval_ms / 1000)

    def listener(self, name: str) -> "ListenerGuard":
        return ListenerGuard(name, self)


class ListenerGuard:
    """One listener's share of a :class:`Guard`: its connections per address."""

    def __init__(self, name: str, guard: Guard):
        self.name = name
        self.guard = guard
        self.limits = guard.limits
        self.addresses = AddressCounter(guard.limits.max_connections_per_address)

    def admit(self, address: str) -> bool:
        """Whether a new connection from ``address`` may be served; a refusal is counted and logged."""
        if self.addresses.admit(address):
            return True
        self.refused(PER_ADDRESS, "refused a connection from %s: it has %d open already, the most one address "
                                  "may hold", address, self.addresses.cap)
        return False

    def release(self, address: str) -> None:
        self.addresses.release(address)

    def account(self, peer: str) -> FrameAccount:
        return FrameAccount(self.limits, self.guard.budget, peer)

    def refused(self, kind: str, message: str, *args, level: int = logging.INFO) -> None:
        """Count a refusal of ``kind`` and log it (rate-limited) as ``message % args``, naming the listener."""
        self.guard.count(self.name, kind)
        abuse_log.log(kind, level, "%s listener: " + message, self.name, *args)

    def closed_for(self, exc: LimitExceeded) -> None:
        """Count and log a connection closed because it went over a limit."""
        self.refused(exc.kind, "closing the connection: %s", exc)
