"""A framed connection speaking the coordinator protocol over one socket.

Both ends use it: the server's per-connection greenlets (sockets patched by
gevent) and the consumer's network thread (plain sockets). It owns the frame
decoder and the correlation ids; it does no protocol logic of its own.

On a server's side it is given its listener's
:class:`~zkcoord.limits.ListenerGuard`: a frame must then arrive whole within the frame timeout of its first byte
(the caller's timeout applies only between frames), and the bytes kept for a
partial one count against the process's cap. Going over either raises
:class:`FrameRefused`; a connection told it must authenticate (its
``account``) that has not by its deadline raises :class:`NotAuthenticated`
at its next read.
"""

from __future__ import annotations

import itertools
import logging
import socket
import ssl
import threading
from typing import Optional

from zkcoord import wire
from zkcoord.errors import ZkcoordError
from zkcoord.security import tls as tls_
from zkcoord.security.principal import ANONYMOUS
from zkcoord.limits import AUTHENTICATION_DEADLINE, MALFORMED, LimitExceeded, ListenerGuard

log = logging.getLogger(__name__)

# Reads of 64 KiB one read_available makes at most: a member sending fast
# must not hold the event loop (its watcher fires again for the rest).
MAX_READS_AT_ONCE = 4
# A non-blocking socket with nothing to read now: plain sockets say
# BlockingIOError; TLS ones (gevent's) want more of the record first.
_NOTHING_NOW = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


class ChannelClosed(ZkcoordError):
    """The peer closed the connection, or it broke."""

    retriable = True


class FrameRefused(wire.MalformedFrame):
    """A frame refused for a limit of the listener (``kind``: zkcoord.limits'
    FRAME_DEADLINE or BUFFER_CAP), not for its content."""

    def __init__(self, exc: LimitExceeded):
        super().__init__(str(exc))
        self.kind = exc.kind


class NotAuthenticated(wire.AuthenticationFailed):
    """A connection that had to authenticate and did not within its
    deadline (zkcoord.limits' AUTHENTICATION_DEADLINE)."""

    kind = AUTHENTICATION_DEADLINE


def _refusal(exc: LimitExceeded) -> wire.WireError:
    """The wire error a connection is closed with for going over a limit of its listener."""
    return NotAuthenticated(str(exc)) if exc.kind == AUTHENTICATION_DEADLINE else FrameRefused(exc)


class Channel:
    def __init__(self, sock: socket.socket, max_frame_size: int = wire.MAX_FRAME_SIZE,
                 guard: Optional[ListenerGuard] = None):
        self.sock = sock
        # A TLS socket's count of bytes decrypted and not yet handed out
        # (None for a plain socket), looked up once: on a gevent socket a
        # missing attribute costs an exception at every read.
        self._pending = getattr(sock, "pending", None)
        self._decoder = wire.FrameDecoder(max_frame_size=max_frame_size)
        self.guard = guard
        self._ready: list[wire.Frame] = []
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        self.closed = False
        self.peer_gone = False  # read_available saw the end of the stream
        # The protocol version the peer speaks (that of its first request):
        # what is sent to it goes in the highest version not above it
        # (Message.version_for). None: the latest, as a consumer speaks.
        self.level: Optional[int] = None
        # Who the peer proved to be (a TLS client certificate; what
        # authentication adds), for the authorization of what it asks.
        self.principal = ANONYMOUS
        try:
            self.peer = "%s:%s" % sock.getpeername()[:2]
        except OSError:
            self.peer = "?"
        self.account = guard.account(self.peer) if guard is not None else None

    @classmethod
    def connect(cls, host: str, port: int, timeout: float, tls: Optional[ssl.SSLContext] = None) -> "Channel":
        """A channel to ``host:port``; over TLS with ``tls`` (a client context,
        :func:`zkcoord.security.tls.client_context`), which raises TlsError
        when the handshake fails."""
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            sock = tls_.connect(sock, tls, host, timeout)
        channel = cls(sock)
        if channel.peer == "?":  # a server that refused us after the handshake may have gone already
            channel.peer = f"{host}:{port}"
        return channel

    def next_correlation_id(self) -> int:
        return next(self._ids) & 0x7FFFFFFF

    def encode(self, message: wire.Message, correlation_id: int) -> bytes:
        """``message`` as a frame in the version this channel's peer speaks."""
        return wire.encode(message, correlation_id, message.version_for(self.level))

    def send(self, message: wire.Message, correlation_id: Optional[int] = None) -> int:
        """Send one message; returns the correlation id used (a new one if none given)."""
        if correlation_id is None:
            correlation_id = self.next_correlation_id()
        data = self.encode(message, correlation_id)
        with self._send_lock:
            if self.closed:
                raise ChannelClosed(f"connection to {self.peer} is closed")
            try:
                self.sock.sendall(data)
            except ssl.SSLError as exc:
                alert = tls_.alert_behind(self.sock)
                self.close()
                if alert is not None:  # the server refused us (a certificate) and closed: say so
                    raise tls_.refusal(alert, self.peer) from None
                raise ChannelClosed(f"sending to {self.peer} failed: {exc}") from None
            except OSError as exc:
                self.close()
                raise ChannelClosed(f"sending to {self.peer} failed: {exc}") from None
        return correlation_id

    def receive(self, timeout: Optional[float] = None) -> Optional[wire.Frame]:
        """The next frame, or None if ``timeout`` seconds pass first.

        Raises ChannelClosed when the peer goes away and a WireError when it
        sends something that is not a valid frame (the caller then closes).
        ``timeout`` is how long to wait for a frame to begin: once one has,
        with an account, it has what is left of its frame timeout instead;
        and a connection that must still authenticate waits no longer than
        its deadline for that (then NotAuthenticated, whatever it sends).
        """
        while not self._ready:
            if self.closed:
                raise ChannelClosed(f"connection to {self.peer} is closed")
            self.check_deadline()
            wait, idle = self.account.read_timeout(timeout) if self.account is not None else (timeout, True)
            self.sock.settimeout(wait)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                if idle:
                    return None
                continue  # a deadline: the check above refuses it
            except ssl.SSLError as exc:  # a TLS alert: the server refused our certificate, or none
                self.close()
                raise tls_.refusal(exc, self.peer) from None
            except OSError as exc:
                self.close()
                raise ChannelClosed(f"receiving from {self.peer} failed: {exc}") from None
            if not data:
                self.close()
                raise ChannelClosed(f"{self.peer} closed the connection")
            self._ready.extend(self._feed(data))
        return self._ready.pop(0)

    def _feed(self, data: bytes) -> list[wire.Frame]:
        """The frames ``data`` completes; the frame left partial accounted for."""
        frames: list[wire.Frame] = []
        try:
            frames = self._decoder.feed(data)
            return frames
        finally:
            if self.account is not None:
                try:
                    self.account.progress(self._decoder.in_frame, self._decoder.buffered, completed=bool(frames))
                except LimitExceeded as exc:
                    raise _refusal(exc) from None

    def check_deadline(self) -> None:
        """Raise FrameRefused if a frame begun is past its deadline,
        NotAuthenticated if the connection is past the one to authenticate by."""
        if self.account is not None:
            try:
                self.account.check()
            except LimitExceeded as exc:
                raise _refusal(exc) from None

    def report_refusal(self, exc: wire.WireError) -> None:
        """Log (rate-limited, on a server) and count why this channel is
        closed for what its peer sent."""
        if self.guard is None:
            log.info("closing %s after a bad frame: %s", self.peer, exc)
            return
        if isinstance(exc, (FrameRefused, NotAuthenticated)):  # over a limit: the error says which
            self.guard.refused(exc.kind, "closing %s: %s", self.peer, exc)
        else:
            self.guard.refused(MALFORMED, "closing %s after a bad frame: %s", self.peer, exc)

    @property
    def frame_time_left(self) -> Optional[float]:
        """Seconds left for the frame in progress (None: none is, or no deadline)."""
        return self.account.remaining() if self.account is not None else None

    @property
    def has_buffered(self) -> bool:
        """Frames already read off the socket and not yet taken."""
        return bool(self._ready)

    def read_available(self) -> list[wire.Frame]:
        """Every frame complete now, buffered or waiting in the socket, without
        waiting for more: for a non-blocking socket that its owner reads when
        its event loop says it is readable. Frames sent just before the peer
        went are returned first (``peer_gone`` is then set); after that it
        raises ChannelClosed. It never closes the socket itself: the owner
        stops watching it first. A frame that is not valid raises a WireError."""
        if self.peer_gone:
            raise ChannelClosed(f"{self.peer} closed the connection")
        frames, self._ready = self._ready, []
        reads = 0
        while True:
            try:
                data = self.sock.recv(65536)
            except _NOTHING_NOW:
                break
            except OSError as exc:
                self.peer_gone = True
                if frames:
                    break
                raise ChannelClosed(f"receiving from {self.peer} failed: {exc}") from None
            if not data:
                self.peer_gone = True
                if frames:
                    break
                raise ChannelClosed(f"{self.peer} closed the connection")
            frames.extend(self._feed(data))
            reads += 1
            if self._pending is not None and self._pending():
                continue  # decrypted already, out of the loop's sight: it would not say readable for it
            if len(data) < 65536 or reads == MAX_READS_AT_ONCE:
                break  # the rest when the loop says it is readable again
        return frames

    def request(self, message: wire.Message, timeout: float) -> wire.Message:
        """Send and wait for the frame answering it (for one-request-at-a-time callers)."""
        correlation_id = self.send(message)
        frame = self.receive(timeout)
        if frame is None:
            raise ChannelClosed(f"no answer from {self.peer} within {timeout:.1f}s")
        if isinstance(frame.message, wire.ErrorResponse):
            raise wire.error_for(frame.message.error_code, frame.message.message)
        if frame.correlation_id != correlation_id:
            raise wire.MalformedFrame(
                f"answer carries correlation id {frame.correlation_id}, expected {correlation_id}"
            )
        return frame.message

    def close(self) -> None:
        self.closed = True
        if self.account is not None:
            self.account.close()
        try:
            self.sock.close()
        except OSError:
            pass
