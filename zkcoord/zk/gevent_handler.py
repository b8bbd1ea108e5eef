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

It also lets kazoo's connection greenlet send and read what is ready without
yielding. kazoo's own select always waits on the hub, so its connection loop
moves one request or one response per turn of the hub; in a coordinator with
thousands of busy connections a turn takes long enough that ZooKeeper sees
nothing but pings for seconds, and the coordinator's office lapses. Here a
select first polls without waiting and returns at once if something is ready,
yielding to the hub only every ``READY_RUN`` times in a row, so the other
greenlets still run.
"""

from __future__ import annotations

import select as _select

from gevent import monkey
from kazoo.handlers.gevent import SequentialGeventHandler
from kazoo.handlers.utils import fileobj_to_fd

_socketpair = monkey.get_original("socket", "socketpair")
_poll = monkey.get_original("select", "poll")
# Selects answered at once, in a row, before one goes through the hub.
READY_RUN = 1000
_READABLE = _select.POLLIN | _select.POLLPRI | _select.POLLERR | _select.POLLHUP
_WRITABLE = _select.POLLOUT | _select.POLLERR | _select.POLLHUP


def ready_now(rlist, wlist) -> tuple[list, list, list]:
    """select()'s answer for ``rlist`` and ``wlist`` at this instant, without
    waiting (poll, not select: a server's descriptors pass 1024)."""
    poller = _poll()
    masks: dict[int, int] = {}
    for objects, mask in ((rlist, _select.POLLIN), (wlist, _select.POLLOUT)):
        for obj in objects:
            fd = fileobj_to_fd(obj)
            masks[fd] = masks.get(fd, 0) | mask
    for fd, mask in masks.items():
        poller.register(fd, mask)
    events = dict(poller.poll(0))
    readable = [obj for obj in rlist if events.get(fileobj_to_fd(obj), 0) & _READABLE]
    writable = [obj for obj in wlist if events.get(fileobj_to_fd(obj), 0) & _WRITABLE]
    return readable, writable, []


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
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._ready_in_a_row = 0
        self._pairs: list[_WakePair] = []

    def describe(self, client) -> str:
        """The client's request queue and wake-ups, for a state dump."""
        pair = self._pairs[-1] if self._pairs else None
        waiting = len(ready_now([pair.read_end], [])[0]) if pair is not None else 0
        return (f"ZooKeeper client: {len(client._queue)} request(s) queued, {len(client._pending)} awaiting "
                f"an answer; wake-ups owed {pair.owed if pair else '-'}, readable now: {bool(waiting)}")

    def select(self, rlist, wlist, xlist, timeout=None):
        if self._ready_in_a_row < READY_RUN:
            ready = ready_now(rlist, wlist)
            if ready[0] or ready[1]:
                self._ready_in_a_row += 1
                return ready
        self._ready_in_a_row = 0
        return super().select(rlist, wlist, xlist, timeout)

    def create_socket_pair(self):
        pair = _WakePair()
        self._pairs[:] = [pair]
        return _ReadEnd(pair), _WriteEnd(pair)
