"""The elected coordinator's executor: the core's decisions carried out on gevent.

:class:`~zkcoord.coordinator.core.CoordinatorCore` decides; this module only
feeds it events (frames read, connections closed, timers, ZooKeeper results
and watches, the session's state) with the time, and carries out the actions
it returns: a frame goes straight out if its socket takes it whole, else
through the connection's writer greenlet; timers are libev timers by key;
ZooKeeper operations go through
:class:`~zkcoord.coordinator.store.CoordinatorStore` (whose writes are fenced
by this coordinator's epoch), each in its own greenlet, at most
``MAX_OPERATIONS`` at once, except the proof of office, which never waits
and whose answer comes straight from the ZooKeeper client.

The core never blocks and this module never yields while it hands events to
it, so the core sees one event at a time, in order, without locks.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
from functools import partial
import logging
from typing import Callable, Hashable, Mapping, Optional

import gevent
import gevent.event
import gevent.pool
import gevent.queue
import gevent.socket

from zkcoord import wire
from zkcoord.errors import ZkcoordError
from zkcoord.clock import PauseWatch, lease_clock, wall_clock
from zkcoord.channel import Channel, ChannelClosed
from zkcoord.coordinator import actions
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.core import NO_METRICS, CoordinatorCore, CoreMetrics, RebalanceReport
from zkcoord.coordinator.group import Group
from zkcoord.coordinator.store import CoordinatorStore
from zkcoord.coordinator.topics import TopicSource
from zkcoord.records import LogEnd, TopicPartition
from zkcoord.security.principal import ANONYMOUS, Principal
from zkcoord.zk import layout

log = logging.getLogger(__name__)


class NoLogEnds(ZkcoordError):
    """The coordinator cannot ask the partitions' leaders where their logs end."""


__all__ = ["Coordinator", "CoordinatorConfig"]

# How long a member's connection may take to write out what is queued before it closes.
CLOSE_GRACE_S = 1.0
# How long stepping down waits for the last offsets to be written.
FINAL_FLUSH_S = 5.0
# ZooKeeper operations carried out at once; the rest wait their turn here.
# kazoo sends requests first come, first served, so this bounds how many a
# proof of office can queue behind (each operation has at most
# zk.reads.READ_BATCH requests in flight).
MAX_OPERATIONS = 8


class _Connection:
    """A member's channel, read and written without a greenlet switch per frame.

    Reading: a libev watcher stays on the socket, and the hub calls back with
    every frame that has arrived (no greenlet waits on a read, so nothing
    changes in epoll per frame). Writing: a frame goes straight out if the
    socket takes it whole, which is nearly always; what it does not take
    waits, in order, for the connection's writer greenlet. ``ended`` is set
    when the connection is finished with: the peer went, a frame was bad, a
    write failed, or a close asked for has been written out.
    """

    def __init__(self, channel: Channel):
        self.channel = channel
        channel.sock.settimeout(0.0)  # gevent: raise rather than wait; the loop tells us when to read
        self.ended = gevent.event.Event()
        self._outbox: gevent.queue.Queue = gevent.queue.Queue()
        self._queued = 0  # frames (or their rest) in the outbox or being written by the writer
        self._watcher = None
        self._deadline = None  # a libev timer while a frame is partly read
        self.writer = gevent.spawn(self._write)

    def read_with(self, on_frames: Callable[[list], None], on_error: Callable[[BaseException], None]) -> None:
        """From now on, hand every batch of frames that arrives to ``on_frames``
        (in the hub: it must not wait), and a ChannelClosed or WireError to ``on_error``."""

        def readable():
            try:
                frames = self.channel.read_available()
            except (ChannelClosed, wire.WireError) as exc:
                self.stop_reading()
                on_error(exc)
                return
            if frames:
                on_frames(frames)
            if self.channel.peer_gone:  # it went after sending those
                self.stop_reading()
                on_error(ChannelClosed(f"{self.channel.peer} closed the connection"))
            elif self._deadline is None and self._watcher is not None:
                watch_deadline()

        def watch_deadline():
            # Nothing reads a trickling peer's socket on a timeout here, so a
            # timer holds the frame in progress to its deadline.
            left = self.channel.frame_time_left
            if left is None:
                return
            self._deadline = gevent.get_hub().loop.timer(max(left, 0.0))
            self._deadline.start(deadline_due)

        def deadline_due():
            self._deadline.close()
            self._deadline = None
            try:
                self.channel.check_deadline()
            except wire.WireError as exc:
                self.stop_reading()
                on_error(exc)
                return
            watch_deadline()  # another frame, begun since: its own deadline

        self._watcher = gevent.get_hub().loop.io(self.channel.sock.fileno(), 1)  # 1: libev's READ
        self._watcher.start(readable)
        if self.channel.has_buffered:  # read with the registration, before the watcher
            gevent.get_hub().loop.run_callback(readable)

    def stop_reading(self) -> None:
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        if self._deadline is not None:
            self._deadline.close()
            self._deadline = None

    def send(self, message: wire.Message, correlation_id: int) -> None:
        if self.ended.is_set():
            return
        try:
            data = self.channel.encode(message, correlation_id)
        except Exception:  # a message the core built wrong, or one the member's version cannot say
            log.exception("cannot encode %r for %s (protocol version %s); closing it",
                          message, self.channel.peer, self.channel.level)
            self.ended.set()
            return
        if not self._queued:
            try:
                sent = self.channel.sock.send(data)
            except BlockingIOError:
                sent = 0
            except OSError:
                self.ended.set()
                return
            if sent == len(data):
                return
            data = data[sent:]
        self._queued += 1
        self._outbox.put(data)

    def close(self) -> None:
        """End once what is queued has been written."""
        self._outbox.put(None)

    def _write(self) -> None:
        sock = self.channel.sock
        try:
            while True:
                data = self._outbox.get()
                if data is None:
                    return
                while data:
                    try:
                        sent = sock.send(data)
                    except BlockingIOError:
                        sent = 0
                    if not sent:  # full (a TLS socket says so with 0): the same bytes again once there is room
                        gevent.socket.wait_write(sock.fileno())
                    data = data[sent:]
                self._queued -= 1
        except OSError:
            pass
        finally:
            self.ended.set()


class Coordinator:
    """The coordinator of one slot (``store.slot``): its core, its members' connections, its timers."""

    def __init__(self, store: CoordinatorStore, config: CoordinatorConfig, epoch: int, zk_session_timeout_ms: int,
                 topics: Optional[TopicSource], clock: Callable[[], float] = lease_clock,
                 metrics: CoreMetrics = NO_METRICS, wall_clock: Callable[[], float] = wall_clock,
                 log_ends: Optional[Callable[[frozenset, float], Mapping[TopicPartition, LogEnd]]] = None):
        """``zk_session_timeout_ms``: the session timeout ZooKeeper granted (the core dates its office from it);
        ``topics``: the server's partition counts (needed to start); ``metrics``: what the core counts into;
        ``log_ends``: the log ends of partitions whose leaders answered within a time (the server's
        LogEndReader, shared by its coordinators; needed once an offset is to be checked)."""
        self.store = store
        self.topics = topics
        self.config = config
        self.epoch = epoch
        self.clock = clock
        # Read beside the lease clock at every event: a machine paused under
        # it (a virtual machine held by its hypervisor) ends the office.
        self.wall_clock = wall_clock
        self._pauses = PauseWatch()
        self.core = CoordinatorCore(config, epoch, zk_session_timeout_ms, metrics)
        self._connections: dict[int, _Connection] = {}
        self._connection_ids = itertools.count(1)
        # libev timers by key: cheaper than a greenlet each, and a ping sets
        # and cancels one for every request it sends.
        self._timers: dict[Hashable, object] = {}
        self._loop = gevent.get_hub().loop
        self._operations = gevent.pool.Group()
        self._broker_reads = gevent.pool.Group()  # not ZooKeeper's: they do not wait for its turn
        self._log_ends = log_ends
        self._waiting_operations: collections.deque = collections.deque()
        self._stopped = False

    # -- what the server and the tests read -------------------------------------------------

    @property
    def active(self) -> bool:
        return self.core.active

    @property
    def deposed(self) -> bool:
        return self.core.deposed

    @property
    def groups(self) -> dict[str, Group]:
        return self.core.groups

    @property
    def last_rebalance(self) -> Optional[RebalanceReport]:
        return self.core.last_rebalance

    def describe_groups(self) -> dict:
        return self.core.describe_groups()

    def settled(self) -> bool:
        return self.core.settled(self.clock())

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Prove the office, load what a predecessor left, watch the topics,
        and go (seed section 3)."""
        proven_at = self.clock()
        self._apply(self._watch_for_pause(proven_at))  # the first reading: a pause from here on is seen
        self.store.prove_office()
        states = self.store.group_states()
        now = self.clock()
        self._apply(self._watch_for_pause(now))
        self._apply(self.core.load(states, proven_at, now))
        if self.deposed:  # stopped while it loaded (its session ended, say): watch nothing
            return
        self.topics.subscribe(self._partitions_changed)
        self._apply(self.core.start(self.clock()))

    def session_changed(self, connected: bool, granted_ms: Optional[int] = None) -> None:
        """The ZooKeeper connection was suspended (False) or is back on the same
        session (True), the server it is back on granting ``granted_ms``."""
        if connected:
            self._event(partial(self.core.session_resumed, granted_ms=granted_ms))
        else:
            self._event(self.core.session_suspended)

    def stop(self) -> None:
        """Step down: write what offsets can be written, close every member's connection, stop."""
        try:
            self._apply(self.core.flush_all(self.clock()))
            deadline = self.clock() + FINAL_FLUSH_S
            while self.core.flushing and not self.core.deposed and self.clock() < deadline:
                gevent.sleep(0.01)
            if self.core.flushing:
                log.warning("final offset flush did not finish; the members still hold those offsets")
        finally:  # killed while it flushed (its server stopping) too: it must never act again
            self._apply(self.core.step_down(self.clock()))
        if self.topics is not None:
            self.topics.unsubscribe(self._partitions_changed)
        for key in list(self._timers):
            self._cancel_timer(key)
        self._waiting_operations.clear()
        self._operations.kill(block=False)
        self._broker_reads.kill(block=False)
        self._stopped = True

    def _partitions_changed(self, topic: str, partitions: int, topic_id: Optional[str]) -> None:
        if not self.deposed:  # TopicChangeListener and TopicPartitionChangeListener, shared by the server
            self._event(partial(self.core.partitions_changed, topic_id=topic_id), topic, partitions)

    # -- members ------------------------------------------------------------------------------

    def serve_member(self, channel: Channel, request: wire.RegisterConsumerRequest, correlation_id: int,
                     principal: Principal = ANONYMOUS) -> None:
        """Register the consumer behind ``channel`` (authenticated as
        ``principal``); its frames then reach the core from the event loop's
        callbacks until the connection ends."""
        if self.topics is not None:  # a topic the server has not learnt yet: it looks now
            self.topics.look_for(request.topics, bool(request.pattern))
        with self._connection(channel) as (conn, connection):
            host = channel.peer.rpartition(":")[0] if ":" in channel.peer else ""
            self._event(partial(self.core.register, host=host, principal=principal), conn, request, correlation_id)
            connection.read_with(partial(self._frames, conn, connection), partial(self._read_failed, connection))
            connection.ended.wait()

    def serve_reset(self, channel: Channel, request: wire.ResetOffsetsRequest, correlation_id: int) -> None:
        """An operator's offset reset: the core answers it on ``channel`` once
        decided (a forced one after a round) and closes it; an operator
        that hangs up first drops a forced reset whose round has not begun."""
        self._serve_operator(channel, self.core.reset_offsets, request, correlation_id)

    def serve_describe(self, channel: Channel, request: wire.DescribeGroupRequest, correlation_id: int) -> None:
        """An operator's look at a group's members: the core answers it on ``channel`` at once and closes it."""
        self._serve_operator(channel, self.core.describe_group, request, correlation_id)

    def _serve_operator(self, channel: Channel, handler, request: wire.Message, correlation_id: int) -> None:
        """Hand an operator's request to the core's ``handler``, which answers
        on ``channel`` and closes it; until then nothing more is read."""
        with self._connection(channel) as (conn, connection):
            self._event(handler, conn, request, correlation_id)
            connection.read_with(lambda _frames: None, lambda _exc: connection.ended.set())
            connection.ended.wait()

    @contextlib.contextmanager
    def _connection(self, channel: Channel):
        """``channel`` as a connection the core knows by a handle, until it ends."""
        conn = next(self._connection_ids)
        connection = self._connections[conn] = _Connection(channel)
        try:
            yield conn, connection
        finally:
            connection.stop_reading()
            self._event(self.core.connection_closed, conn)
            connection.close()
            connection.writer.join(timeout=CLOSE_GRACE_S)
            channel.close()
            self._connections.pop(conn, None)

    def _frames(self, conn: int, connection: _Connection, frames: list) -> None:
        for frame in frames:
            if self.deposed or connection.ended.is_set():
                connection.ended.set()
                return
            self._event(self.core.received, conn, frame.message, frame.correlation_id)

    def _read_failed(self, connection: _Connection, exc: BaseException) -> None:
        if isinstance(exc, wire.WireError):
            connection.channel.report_refusal(exc)
            connection.send(wire.ErrorResponse(error_code=exc.code, message=str(exc)), exc.correlation_id or 0)
        connection.ended.set()

    # -- carrying out the core's actions --------------------------------------------------------

    def _event(self, handler, *args) -> None:
        """Hand the core one event, with the time, and carry out what it decides.
        A handler that raises is a bug: the coordinator steps down, loudly,
        rather than run on with half a decision."""
        try:
            now = self.clock()
            todo = self._watch_for_pause(now)
            todo += handler(*args, now)
        except Exception:
            log.exception("the coordinator's core failed in %s; stepping down", getattr(handler, "__name__", handler))
            todo = self.core.fail(self.clock())
        try:
            self._apply(todo)
        except Exception:
            # Events arrive in the hub's callbacks, where an error would be
            # printed and lost with the rest of the decision (a timer never
            # set again, a proof never answered): step down instead.
            log.exception("carrying out the coordinator's decision failed; stepping down")
            try:
                self._apply(self.core.fail(self.clock()))
            except Exception:
                log.exception("stepping down failed too")

    def _watch_for_pause(self, now: float) -> list:
        """Read the wall clock beside the lease clock's ``now``; what the core
        decides if they show a pause the lease clock did not count."""
        gained = self._pauses.observe(now, self.wall_clock())
        return self.core.machine_paused(gained, now) if gained else []

    def _apply(self, todo: list) -> None:
        for action in todo:
            if isinstance(action, actions.Send):
                connection = self._connections.get(action.conn)
                if connection is not None:
                    connection.send(action.message, action.correlation_id)
            elif isinstance(action, actions.Close):
                connection = self._connections.get(action.conn)
                if connection is not None:
                    connection.close()
            elif isinstance(action, actions.SetTimer):
                self._cancel_timer(action.key)
                timer = self._loop.timer(max(action.at - self.clock(), 0.0))
                timer.start(self._timer_due, action.key)
                self._timers[action.key] = timer
            elif isinstance(action, actions.CancelTimer):
                self._cancel_timer(action.key)
            elif isinstance(action, actions.ProveOffice):
                self._prove_office(action)  # never behind the others: the office depends on it
            elif isinstance(action, actions.ReadLogEnds):
                self._broker_reads.spawn(self._read_log_ends, action)
            elif isinstance(action, actions.ZooKeeperOperation):
                if isinstance(action, actions.WriteRebalanceHistory):
                    action = action.dated(self.wall_clock() - self.clock())
                self._waiting_operations.append(action)
                self._start_operations()
            else:
                raise TypeError(f"unknown action {action!r}")

    def _cancel_timer(self, key: Hashable) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.close()

    def _timer_due(self, key: Hashable) -> None:
        # In the hub's own callback, like the frames: the core and _apply
        # never wait, and a greenlet would queue behind every other wake-up.
        self._cancel_timer(key)
        self._event(self.core.timer_fired, key)

    def _prove_office(self, action: actions.ProveOffice) -> None:
        """Send the proof; its answer reaches the core from the ZooKeeper
        client's greenlet the moment it arrives, not after a turn through
        the hub's callback queue (zk/gevent_handler.py Result.at_once)."""
        asking = True

        def settled(error: Optional[BaseException]) -> None:
            if asking:  # answered before it was sent (a closed client): not inside _apply
                self._loop.run_callback(settled, error)
                return
            if not self._stopped:
                self._event(lambda now: self.core.done(action.token, now, None, error))

        self.store.prove_office_async(settled)
        asking = False

    def _start_operations(self) -> None:
        while self._waiting_operations and len(self._operations) < MAX_OPERATIONS:
            self._operations.spawn(self._run_operation, self._waiting_operations.popleft())

    def _run_operation(self, operation) -> None:
        try:
            result, error = self._carry_out(operation), None
        except Exception as exc:  # kazoo's connection errors, Deposed: the core decides
            result, error = None, exc
        finally:
            # Leave the group first, so that the next one has a place.
            self._operations.discard(gevent.getcurrent())
            self._start_operations()
        self._event(lambda now: self.core.done(operation.token, now, result, error))

    def _read_log_ends(self, action: actions.ReadLogEnds) -> None:
        """Ask the leaders, within the log end timeout: whatever has not
        answered by then, the core takes as not learnt."""
        try:
            if self._log_ends is None:
                raise NoLogEnds("this coordinator was given no way to ask the brokers")
            result, error = self._log_ends(action.partitions, self.config.log_end_timeout_ms / 1000.0), None
        except Exception as exc:  # ZooKeeper's errors among them: the core decides
            result, error = None, exc
        if not self._stopped:
            self._event(lambda now: self.core.done(action.token, now, result, error))

    def _carry_out(self, operation):
        return carry_out(self.store, operation)


def carry_out(store: CoordinatorStore, operation):
    """Carry out one of the core's ZooKeeper operations on ``store`` and
    return its result; its errors are raised, for the caller to hand to the
    core. The tests that run the core on a real ZooKeeper use it too."""
    if isinstance(operation, actions.ReadOwners):
        return store.owners(operation.group)
    if isinstance(operation, actions.ReadOffsets):
        return store.offsets(operation.group, operation.partitions)
    if isinstance(operation, actions.WriteGroupState):
        exists = operation.exists
        if exists is None:
            exists = store.zk.exists(layout.group_state_path(operation.group)) is not None
        return store.write_group_state(operation.group, operation.state, exists)
    if isinstance(operation, actions.WriteOffsets):
        return store.write_offsets(operation.group, operation.offsets, operation.existing)
    if isinstance(operation, actions.WriteOwners):
        return store.write_owners(operation.group, operation.owners, operation.previous)
    if isinstance(operation, actions.WriteGroupFailure):
        return store.write_group_failure(operation.group, operation.failure)
    if isinstance(operation, actions.WriteRebalanceHistory):
        return store.append_rebalance_history(operation.group, operation.records, operation.rounds)
    if isinstance(operation, actions.ForgetGroup):
        return store.forget_group(operation.group, operation.offsets)
    raise TypeError(f"unknown ZooKeeper operation {operation!r}")
