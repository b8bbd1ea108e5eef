"""Bytes on a Kafka-protocol connection: a request's parts read against
the limits' deadlines, an answer's parts sent (file ranges with sendfile, or
copied where TLS must encrypt them), a relay's exchange with a Kafka broker,
and the drain before a refused connection closes.

The broker's connection greenlets (server.py) call these; they hold no state.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Optional

from gevent.socket import wait_write

from zkcoord.broker.protocol import FileRange
from zkcoord.limits import FrameAccount

# After a refusal, how long the broker waits for the client to close first.
DRAIN_BEFORE_CLOSE_S = 1.0


class PeerClosed(Exception):
    """The peer closed the connection (or we decided to)."""


def recv_part(sock, view, account: FrameAccount, idle_s: Optional[float]) -> int:
    """recv_into ``view``: before a frame has begun within ``idle_s`` (a
    socket.timeout past it), within it within what is left of its deadline,
    and, before the connection has authenticated where it must, within that
    deadline (LimitExceeded past either)."""
    while True:
        account.check()
        wait, idle = account.read_timeout(idle_s)
        sock.settimeout(wait)
        try:
            n = sock.recv_into(view)
        except socket.timeout:
            if idle:
                raise
            continue  # the check above refuses it
        if n == 0:
            raise PeerClosed()
        return n


def exchange(sock, frame: bytes, answered: bool = True) -> Optional[bytes]:
    """Send a request frame (without its size) to Kafka over ``sock``; its
    answer, size included (None when ``answered`` is False: none comes)."""
    sock.sendall(len(frame).to_bytes(4, "big") + frame)
    if not answered:
        return None
    head = recv_exactly(sock, 4)
    return head + recv_exactly(sock, int.from_bytes(head, "big"))


def recv_exactly(sock, n: int) -> bytes:
    """``n`` bytes from ``sock`` (a relay's connection to Kafka)."""
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(min(n - len(data), 1 << 20))
        if not chunk:
            raise ConnectionResetError("Kafka closed the connection")
        data += chunk
    return bytes(data)


def drain_before_close(sock) -> None:
    """After a refusal, read what the client still sends until it closes
    (DRAIN_BEFORE_CLOSE_S at most), then close: kafka-python drops an answer
    that arrives with the close, and a close with unread bytes resets the
    connection, which can discard the answer before any client reads it."""
    deadline = time.monotonic() + DRAIN_BEFORE_CLOSE_S
    try:
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            if not sock.recv(4096):
                return
    except OSError:  # socket.timeout among them: the client took too long; close anyway
        pass


def send_parts(sock, parts: list, copy: bool = False) -> None:
    """Send a response; closes the descriptors of its file ranges. ``copy``:
    read the file ranges and send them (TLS must encrypt what sendfile would
    hand the kernel as it is)."""
    try:
        for part in parts:
            if isinstance(part, FileRange):
                (copy_range if copy else sendfile)(sock, part)
            else:
                sock.sendall(part)
    finally:
        close_slices(part for part in parts if isinstance(part, FileRange))


def close_slices(regions) -> None:
    for region in regions:
        os.close(region.fd)


# What one read of a file range copies for a TLS connection.
_COPY_CHUNK = 256 * 1024


def copy_range(sock, part: FileRange) -> None:
    """A file range read and sent through the socket (TLS encrypts it)."""
    offset, left = part.offset, part.count
    while left > 0:
        data = os.pread(part.fd, min(left, _COPY_CHUNK), offset)
        if not data:
            raise PeerClosed()  # the file shrank under us (retention)
        sock.sendall(data)
        offset += len(data)
        left -= len(data)


def sendfile(sock, part: FileRange) -> None:
    """os.sendfile on gevent's non-blocking socket: wait for room, send more."""
    offset, left = part.offset, part.count
    fileno = sock.fileno()
    while left > 0:
        try:
            sent = os.sendfile(fileno, part.fd, offset, left)
        except BlockingIOError:
            wait_write(fileno, timeout=sock.gettimeout(), timeout_exc=socket.timeout("send timed out"))
            continue
        if sent == 0:
            raise PeerClosed()  # the file shrank under us (retention) or the peer left
        offset += sent
        left -= sent
