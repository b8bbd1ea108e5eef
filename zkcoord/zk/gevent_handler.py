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
greenlets still run. When it must wait, libev's watchers wake it directly
(:func:`wait_ready`): gevent's select wakes its greenlet through the hub's
callback queue, behind every other wake-up.

A result can be taken the moment it is set (:meth:`Result.at_once`).
A greenlet waiting on a result is woken through the hub's callback queue,
which a server with thousands of busy connections runs a few milliseconds
per turn; under a join storm a proof of office whose round trip took 0.3 ms
reached its greenlet 3.5 s later, and the office lapsed.

Last, as every request of a client goes through its handler's results, the
handler is where ZooKeeper's latency is measured: from the result's making,
just before kazoo queues the request, to its answer (``on_request``).
"""

from __future__ import annotations

import logging
import select as _select
import time
from typing import Callable, Optional

import gevent
import gevent.event
from gevent.hub import Waiter
from gevent import monkey
from kazoo.handlers.gevent import SequentialGeventHandler
from kazoo.handlers.utils import fileobj_to_fd

log = logging.getLogger(__name__)
_socketpair = monkey.get_original("socket", "socketpair")
_poll = monkey.get_original("select", "poll")
# Selects answered at once, in a row, before one goes through the hub.
READY_RUN = 1000
_READABLE = _select.POLLIN | _select.POLLPRI | _select.POLLERR | _select.POLLHUP
_WRITABLE = _select.POLLOUT | _select.POLLERR | _select.POLLHUP
_LIBEV_READ, _LIBEV_WRITE = 1, 2


def _masks(rlist, wlist, read: int, write: int) -> dict[int, int]:
    masks: dict[int, int] = {}
    for objects, mask in ((rlist, read), (wlist, write)):
        for obj in objects:
            fd = fileobj_to_fd(obj)
            masks[fd] = masks.get(fd, 0) | mask
    return masks


def ready_now(rlist, wlist) -> tuple[list, list, list]:
    """select()'s answer for ``rlist`` and ``wlist`` at this instant, without
    waiting (poll, not select: a server's descriptors pass 1024)."""
    poller = _poll()
    for fd, mask in _masks(rlist, wlist, _select.POLLIN, _select.POLLOUT).items():
        poller.register(fd, mask)
    events = dict(poller.poll(0))
    if any(mask & _select.POLLNVAL for mask in events.values()):
        raise ValueError("Invalid event mask or fd")  # what kazoo's own select raises
    readable = [obj for obj in rlist if events.get(fileobj_to_fd(obj), 0) & _READABLE]
    writable = [obj for obj in wlist if events.get(fileobj_to_fd(obj), 0) & _WRITABLE]
    return readable, writable, []


def wait_ready(rlist, wlist, timeout: Optional[float]) -> tuple[list, list, list]:
    """select() that waits on the hub, woken straight from libev's watchers
    (gevent's own select wakes its greenlet through the callback queue)."""
    loop = gevent.get_hub().loop
    # libev's clock is the start of the loop's turn, and a coordinator's turn
    # may be long (members' frames, decisions): a timeout counts from now.
    # (gevent's timers refresh it as they start, here too; said, not assumed.)
    loop.update_now()
    deadline = None if timeout is None else loop.now() + timeout
    while True:
        waiter = Waiter()
        watchers = []
        try:
            for fd, mask in _masks(rlist, wlist, _LIBEV_READ, _LIBEV_WRITE).items():
                watcher = loop.io(fd, mask)
                watcher.start(waiter.switch, fd)
                watchers.append(watcher)
            if deadline is not None:
                loop.update_now()
                timer = loop.timer(max(deadline - loop.now(), 0.0))
                timer.start(waiter.switch, None)
                watchers.append(timer)
            woken_by = waiter.get()
        finally:
            for watcher in watchers:  # closing also drops any wake-up still pending
                watcher.close()
        ready = ready_now(rlist, wlist)
        if ready[0] or ready[1] or woken_by is None:
            return ready


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


class Result(gevent.event.AsyncResult):
    """kazoo's asynchronous result, which can call one function the moment
    it is set, in the greenlet that sets it (the ZooKeeper client's, which
    must not wait: the function must not either).

    A greenlet waiting in :meth:`get` is woken by a libev timer of no delay,
    which runs in the hub's next turn like the other watchers, rather than
    through the callback queue: a coordinator's rebalance rounds wait on
    ZooKeeper, and behind a join storm's wake-ups each of their requests took
    seconds to come back, so the rounds never caught up with the joins."""

    _receivers: Optional[list] = None  # called the moment the result is set, in order
    _timed: Optional[tuple[float, Callable[[float], None]]] = None  # (when asked, what takes its seconds)

    def get(self, block: bool = True, timeout: Optional[float] = None):
        if self.ready() or not block or gevent.getcurrent() is gevent.get_hub():
            return super().get(block, timeout)
        loop = gevent.get_hub().loop
        waiter = Waiter()
        watchers = []

        def answered(_result) -> None:  # in the ZooKeeper client's greenlet
            wake = loop.timer(0.0)
            wake.start(waiter.switch, True)
            watchers.append(wake)

        self.at_once(answered)
        if timeout is not None:
            loop.update_now()  # from now, not from the start of the loop's turn
            expiry = loop.timer(timeout)
            expiry.start(waiter.switch, False)
            watchers.append(expiry)
        try:
            waiter.get()
        finally:
            if self._receivers is not None and answered in self._receivers:
                self._receivers.remove(answered)
            for watcher in watchers:
                watcher.close()
        return super().get(block=False)  # its value, its exception, or Timeout if none came

    def at_once(self, answered: Callable[["Result"], None]) -> None:
        """Call ``answered(self)`` when the result is set; now, if it is.
        Each receiver is called once, in the order they came."""
        if self.ready():
            answered(self)
            return
        if self._receivers is None:
            self._receivers = []
        self._receivers.append(answered)

    def set(self, value=None) -> None:
        super().set(value)
        self._answer()

    def set_exception(self, exception, exc_info=None) -> None:
        super().set_exception(exception, exc_info)
        self._answer()

    def _answer(self) -> None:
        if self._timed is not None:
            began, observe = self._timed
            self._timed = None
            observe(time.monotonic() - began)
        receivers, self._receivers = self._receivers, None
        for answered in receivers or ():
            try:
                answered(self)
            except Exception:  # never into kazoo's connection loop, which would end
                log.exception("a ZooKeeper result's receiver failed")


class GeventHandler(SequentialGeventHandler):
    def __init__(self, *args, on_request: Optional[Callable[[float], None]] = None, **kwargs):
        """``on_request``: called with the seconds each request took, as it is answered."""
        super().__init__(*args, **kwargs)
        self._on_request = on_request
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
        return wait_ready(rlist, wlist, timeout)

    def async_result(self) -> Result:
        # kazoo makes one for each request, just before it queues it.
        result = Result()
        if self._on_request is not None:
            result._timed = (time.monotonic(), self._on_request)
        return result

    def create_socket_pair(self):
        pair = _WakePair()
        self._pairs[:] = [pair]
        return _ReadEnd(pair), _WriteEnd(pair)
