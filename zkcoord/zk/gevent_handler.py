"""kazoo's gevent handler, safe for thousands of requests at once.

kazoo wakes its connection greenlet by writing one byte per request to a
socket pair, and sends one queued request per byte it reads back. When
hundreds of greenlets issue requests at once (a takeover reading every group,
a round reading a group's offsets), the pair's buffer fills. The next writer
then waits on the socket, and a second one waiting at the same time gets
gevent's ConcurrentObjectUseError, which kazoo reports as "Connection has been
closed" after it has queued the request without its byte. From then on every
request waits behind one that nobody will wake: the client is wedged for good
(kazoo issue 486). Making the writers take turns does not help: thousands of
greenlets queued on one lock stall the hub past the session timeout.

:class:`GeventHandler` never lets a writer wait. A byte that does not fit is
owed instead, and paid each time the connection greenlet reads one, so bytes
in the pair plus bytes owed always equal the requests queued, which is all
kazoo counts on.
"""

from __future__ import annotations

from gevent import monkey
from kazoo.handlers.gevent import SequentialGeventHandler

_socketpair = monkey.get_original("socket", "socketpair")


class _WakePair:
    """Both ends of the wake-up pair, unpatched and non-blocking, and the bytes owed."""

    def __init__(self):
        self.read_end, self.write_end = _socketpair()
        self.read_end.setblocking(False)
        self.write_end.setblocking(False)
        self.owed = 0

    def write(self) -> None:
        if self.owed:  # keep order simple: nothing jumps the debt
            self.owed += 1
            return
        try:
            self.write_end.send(b"\0")
        except BlockingIOError:
            self.owed += 1

    def pay(self) -> None:
        while self.owed:
            try:
                self.write_end.send(b"\0")
            except BlockingIOError:
                return
            self.owed -= 1


class _ReadEnd:
    def __init__(self, pair: _WakePair):
        self._pair = pair

    def recv(self, size: int, *flags) -> bytes:
        data = self._pair.read_end.recv(size, *flags)
        self._pair.pay()  # room was just made
        return data

    def __getattr__(self, name):  # fileno(), close(): the socket's own
        return getattr(self._pair.read_end, name)


class _WriteEnd:
    def __init__(self, pair: _WakePair):
        self._pair = pair

    def send(self, data: bytes, *flags) -> int:
        for _ in range(len(data)):
            self._pair.write()
        return len(data)

    def __getattr__(self, name):
        return getattr(self._pair.write_end, name)


class GeventHandler(SequentialGeventHandler):
    def create_socket_pair(self):
        pair = _WakePair()
        return _ReadEnd(pair), _WriteEnd(pair)
