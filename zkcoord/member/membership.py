"""The consumer's network thread: it finds the coordinator and drives the member's protocol.

:class:`GroupMembership` runs one thread. It finds the coordinator by asking
the bootstrap servers in turn (for ever, logging AllKnownBrokersNotAvailable
after each full round), registers, and then only answers what the
coordinator pushes: Ping, Stop and Start. What to answer, and whether the
member may still deliver, is :class:`~zkcoord.member.protocol.MemberProtocol`'s
decision; this module only does the I/O and the retries around it:

- a refused request (stale epoch or generation) is answered with an error
  and the connection dropped;
- when the lease runs out with no request, the member stops everything
  before it looks for the coordinator again; when only the connection
  drops (or is refused), it keeps running what it holds while its lease
  holds (``keep_on_loss``; MemberProtocol.keep), looks for the coordinator
  at once, and stops everything if the lease ends before it is registered;
- it reads the wall clock beside the lease clock whenever it wakes and
  before each answer, so that the protocol notices a paused machine;
- an unexpected error is a bug: the member stops everything and the
  application's next poll() raises it, rather than the thread dying quietly.
"""

from __future__ import annotations

import logging
import random
import secrets
import socket
import threading
import uuid
from typing import Callable, Optional, Sequence

from zkcoord import wire
from zkcoord.addresses import parse_bootstrap
from zkcoord.channel import Channel, ChannelClosed
from zkcoord.clock import lease_clock, wall_clock
from zkcoord.errors import TlsError, ZkcoordError
from zkcoord.member.config import MemberConfig
from zkcoord.member.protocol import MemberProtocol, MembershipListener, MemberState
from zkcoord.records import TopicPartition
from zkcoord.security.secrets import refuse_password_without_tls
from zkcoord.security.tls import client_context

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 2.0
# How a member's user allows its password without TLS (MemberConfig.password_without_tls).
PASSWORD_WITHOUT_TLS_OPTION = "--password-without-tls (password_without_tls=True in Python)"
# GroupMembership's tls_context when none is given: the member builds its own from its config.
FROM_CONFIG = object()
LEAVE_CHECK_S = 0.2  # how soon the network thread notices close()
LEAVE_TIMEOUT_S = 5.0  # how long a leave waits for the coordinator's confirmation


MAX_BACKOFF_S = wire.MEMBER_RETRY_MAX_S  # the protocol promises it: a successor counts on it
# How long a member whose coordinator it could not reach lets a server hold
# its ClusterMetadata request until a newer coordinator is elected.
METADATA_WAIT_MS = 1000
# Losses after which a member may keep running what it holds under its lease:
# the connection closed or refused, or a registration refused for a while
# (the coordinator moving or loading). Not a lease that ended, an eviction, a
# request refused for its epoch or generation, or a refusal for good.
KEEPABLE_LOSSES = (OSError, ChannelClosed, wire.NotCoordinator, wire.CoordinatorNotAvailable,
                   wire.ConsumerIdInUse, wire.RebalanceInProgress, wire.HeldPartitionsRefused)


def backoff_s(failures: int) -> float:
    """How long to wait after ``failures`` attempts in a row failed:
    exponential from 50 ms to MAX_BACKOFF_S, each a random half to whole of its step."""
    step = min(0.05 * 2 ** min(failures, 5), MAX_BACKOFF_S)
    return random.uniform(step / 2, step)


class MembershipFailed(ZkcoordError):
    """The membership's network thread met an error it does not expect (a bug,
    or a listener that raised); the member stopped everything."""


class AllKnownBrokersNotAvailable(ZkcoordError):
    """No bootstrap server answered in a full round (seed 001's error event)."""

    retriable = True


class GroupMembership:
    # How often the network thread, blocked on its connection, wakes to notice
    # close() or a leave. A process running thousands of members that it never
    # closes one by one (the load generator) raises it to save the wake-ups.
    close_check_s = LEAVE_CHECK_S
    # Read beside the lease clock at each poll and each answer, to notice a
    # paused machine (MemberProtocol.clocks_read); tests set their own.
    wall_clock = staticmethod(wall_clock)

    def __init__(self, bootstrap: Sequence[str], config: MemberConfig, listener: MembershipListener, *,
                 clock: Callable[[], float] = lease_clock, dynamic_id: Optional[str] = None,
                 tls_context: object = FROM_CONFIG, keep_on_loss: bool = True):
        """``dynamic_id``: the id of a dynamic member (default: host name and a
        random suffix); a static member's id is its ``consumer_id``.
        ``tls_context``: the client context to reach the servers with (None:
        plaintext), when one is shared by many members (a broker's bridged
        ones); by default it is built from ``config.tls``. ``keep_on_loss``:
        keep running what it holds, under its lease, when its connection to
        the coordinator goes (False: stop everything then)."""
        self.keep_on_loss = keep_on_loss
        self.servers = parse_bootstrap(bootstrap)
        self.config = config
        self.group = config.group
        self.listener = listener
        self.clock = clock
        self.is_static = config.is_static
        self.consumer_id = config.consumer_id or dynamic_id or f"{socket.gethostname()}-{uuid.uuid4().hex[:12]}"
        self.protocol = MemberProtocol(wire.RegisterConsumerRequest(
            group_id=config.group, consumer_id=self.consumer_id, topics=config.topics,
            pattern=config.pattern or "", auto_commit=config.auto_commit,
            auto_offset_reset=config.auto_offset_reset, session_timeout_ms=config.session_timeout_ms,
            max_poll_interval_ms=config.max_poll_interval_ms, is_static=self.is_static,
            assignment_strategies=config.assignment_strategies,
            user=config.user or "", password=config.password or "", on_behalf_of=config.on_behalf_of or "",
            # Drawn once for the life of this object, sent at every registration:
            # it proves to a coordinator that still holds or fences this id
            # that this is the same member back, having stopped everything.
            incarnation=secrets.token_hex(16),
            client_kind=config.client_kind, client_id=config.client_id,
        ), listener)
        self.session_timeout = config.session_timeout_ms / 1000.0
        # None: plaintext; the fetcher's connections use it too.
        self.tls = client_context(config.tls) if tls_context is FROM_CONFIG else tls_context
        refuse_password_without_tls(config.user, self.tls is not None, config.password_without_tls,
                                    "the coordinator connections", PASSWORD_WITHOUT_TLS_OPTION)
        self.brokers: list[wire.NodeAddress] = []
        self.error: Optional[ZkcoordError] = None  # raised to the application by the next poll()
        self.registered = threading.Event()
        self.registrations = 0  # how many times it has registered: more than once means it lost its place
        self._closing = threading.Event()
        self._leave_requested = threading.Event()
        self._evicted_at: Optional[float] = None
        self._channel: Optional[Channel] = None
        # The epoch of a coordinator that could not be reached (None: none):
        # the next ClusterMetadata asks to be answered once a newer one is elected.
        self._unreachable_epoch: Optional[int] = None
        self._thread = threading.Thread(target=self._run, name=f"zkcoord-member-{self.consumer_id}", daemon=True)
        self._next_server = random.randrange(len(self.servers))

    # -- what the application thread may read ---------------------------------------------------

    @property
    def assignment(self) -> dict[TopicPartition, int]:
        return self.protocol.assignment  # replaced whole by the network thread, never changed in place

    @property
    def epoch(self) -> int:
        return self.protocol.generation.epoch

    @property
    def generation(self) -> int:
        return self.protocol.generation.generation

    def holds_lease(self) -> bool:
        """May the application be handed records now? (docs/DESIGN.md, the lease rule)"""
        now = self.clock()
        self.protocol.clocks_read(now, self.wall_clock())
        return self.protocol.holds_lease(now)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Leave cleanly: stop everything, hand the final offsets to the
        coordinator in a LeaveGroupRequest, wait for it to commit them, then
        close. Whoever takes the partitions over starts exactly where this
        member stopped, so a planned leave delivers nothing twice."""
        if self.registered.is_set() and self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._leave_requested.set()
            self._thread.join(timeout)
        self._closing.set()
        channel = self._channel
        if channel is not None:
            channel.close()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def abandon(self) -> None:
        """Stop at once without leaving, from any thread, its own included:
        the coordinator sees the connection close and fences what this member
        may run until its lease has ended, as after a crash."""
        self._closing.set()
        channel = self._channel
        if channel is not None:
            channel.close()

    @property
    def closed(self) -> bool:
        return self._closing.is_set()

    # -- the network thread ------------------------------------------------------------------------

    def _run(self) -> None:
        self.protocol.clocks_read(self.clock(), self.wall_clock())  # the base the first pause is seen against
        try:
            self._run_until_closed()
        except BaseException as exc:  # a bug, or a listener that raised: never die quietly
            log.exception("member %s: network thread failed", self.consumer_id)
            self.error = MembershipFailed(f"member {self.consumer_id}: {type(exc).__name__}: {exc}")
            self.error.__cause__ = exc
            try:
                self.protocol.fail()
            except BaseException:  # the listener failing again: the error above is what counts
                log.exception("member %s: stopping everything failed", self.consumer_id)
        finally:
            self.registered.clear()
            if self.protocol.state is not MemberState.FAILED:
                self.protocol.close()

    def _run_until_closed(self) -> None:
        failures = 0
        while not self._closing.is_set() and not self._leave_requested.is_set():
            evicted = False
            keep = self.keep_on_loss  # unless the loss is one that must stop everything (below)
            try:
                self.protocol.check_lease(self.clock())  # what it keeps stops once the lease has ended
                channel = self._connect_to_coordinator()
                if channel is None:
                    continue
                failures = 0
                self._channel = channel
                self._serve(channel)
            except wire.MaxPollIntervalExceeded as exc:
                log.warning("member %s removed from its group: %s; it rejoins when the application polls",
                            self.consumer_id, exc)
                evicted = True
                keep = False
            except wire.OffsetOutOfRange as exc:
                # It counted records its partitions do not have: registering
                # again would not make its offsets right. The application is told.
                log.error("member %s removed from its group: %s", self.consumer_id, exc)
                self.error = exc
                keep = False
                self.protocol.fail()
            except TlsError as exc:
                keep = False
                if exc.retriable:
                    log.info("member %s: %s; starting again from the bootstrap list", self.consumer_id, exc)
                else:  # a certificate or protocol refused: trying again cannot help, the application is told
                    log.error("member %s: %s", self.consumer_id, exc)
                    self.error = exc
                    self.protocol.fail()
            except (ZkcoordError, OSError) as exc:
                keep = keep and isinstance(exc, KEEPABLE_LOSSES)
                if not self._closing.is_set():
                    log.info("member %s: %s; starting again from the bootstrap list", self.consumer_id, exc)
            except BaseException:
                keep = False
                raise
            finally:
                self.registered.clear()
                try:
                    # Stopped before the connection closes: by the time the
                    # coordinator sees it go, nothing runs here any more,
                    # but what the lease still covers, if it keeps that.
                    if not (keep and self.protocol.keep(self.clock())):
                        self.protocol.lost(evicted=evicted)
                finally:
                    if self._channel is not None:
                        self._channel.close()
                        self._channel = None
            if self.protocol.state is MemberState.FAILED:
                log.error("member %s gives up: %s", self.consumer_id, self.error)
                return
            if evicted:
                self._evicted_at = self.clock()
                self._wait_for_poll_after_eviction()
            # Back off while the coordinator stays unreachable (it may be dead
            # until ZooKeeper expires its session and another is elected), at
            # random within the step, so that thousands of members refused at
            # once do not all come back at once.
            failures += 1
            # A member waiting for a new coordinator waits in its next
            # ClusterMetadata request, answered the moment one is elected.
            # One that keeps partitions looks again at once, refused some
            # (it stopped those and hands them over), or at its first step.
            if self.protocol.keeping:
                failures = min(failures, 1)
            self._closing.wait(backoff_s(1 if self._unreachable_epoch is not None else failures))

    def _wait_for_poll_after_eviction(self) -> None:
        """After removal for not polling, stay out until the application polls again."""
        while not self._closing.is_set() and not self._leave_requested.is_set():
            since_eviction_ms = (self.clock() - self._evicted_at) * 1000
            polled_ago = self.listener.last_poll_ms_ago()
            if 0 <= polled_ago < since_eviction_ms:
                self.protocol.polled_again()
                return
            self._closing.wait(LEAVE_CHECK_S)

    def _connect_to_coordinator(self) -> Optional[Channel]:
        """Seed 001 consumerStartup steps 1 to 5; None means try again."""
        metadata = self._cluster_metadata()
        self.protocol.check_lease(self.clock())  # the servers may have taken their time
        if metadata is None:
            return None
        target = next((s for s in metadata.servers if s.id == metadata.coordinator_id), None)
        if target is None:
            self._closing.wait(0.2)  # no coordinator elected yet
            return None
        try:
            channel = Channel.connect(target.host, target.port, CONNECT_TIMEOUT_S, tls=self.tls)
        except OSError:
            self._unreachable_epoch = metadata.coordinator_epoch  # dead, most likely: wait for its successor
            raise
        try:
            now = self.clock()
            registration = self.protocol.register(now)  # the lease's first base: before sending
            # What it keeps stops when the lease ends: it waits no longer for the answer.
            wait = self.session_timeout if not registration.held else min(
                self.session_timeout, max(0.0, self.protocol.lease_deadline - now))
            answer = channel.request(registration, timeout=wait)
            if not isinstance(answer, wire.RegisterConsumerResponse):
                raise wire.MalformedFrame(f"expected RegisterConsumerResponse, got {type(answer).__name__}")
            try:
                self.protocol.registered(answer, self.clock())
            except wire.WireError as exc:
                if isinstance(exc, wire.NotCoordinator) or (
                        isinstance(exc, wire.CoordinatorNotAvailable)
                        and answer.coordinator_epoch != metadata.coordinator_epoch):
                    self._unreachable_epoch = metadata.coordinator_epoch  # it has moved on: wait for the news
                # Otherwise the coordinator named is the current one, still
                # loading or cut off from ZooKeeper for a moment: try it again
                # after the backoff, not after a newer coordinator that may
                # never come.
                if self.protocol.state is MemberState.FAILED:
                    self.error = exc
                elif not isinstance(exc, wire.HeldPartitionsRefused):  # that one registers again at once
                    self._closing.wait(0.2)
                raise
        except BaseException:
            channel.close()
            raise
        self.registrations += 1
        self._unreachable_epoch = None
        self.registered.set()
        log.info("member %s registered in group %s with coordinator %d (slot %d of %d, epoch %d)",
                 self.consumer_id, self.group, target.id, metadata.slot, metadata.slots, answer.coordinator_epoch)
        return channel

    def _cluster_metadata(self) -> Optional[wire.ClusterMetadataResponse]:
        for _ in range(len(self.servers)):
            host, port = self.servers[self._next_server]
            self._next_server = (self._next_server + 1) % len(self.servers)
            try:
                channel = Channel.connect(host, port, CONNECT_TIMEOUT_S, tls=self.tls)
            except OSError:
                continue
            except TlsError as exc:
                if not exc.retriable:
                    raise  # a refusal: every server of the cluster would refuse alike
                continue
            known = self._unreachable_epoch
            request = wire.ClusterMetadataRequest(group_id=self.group, known_epoch=-1 if known is None else known,
                                                  max_wait_ms=0 if known is None else METADATA_WAIT_MS)
            try:
                answer = channel.request(request, timeout=CONNECT_TIMEOUT_S + request.max_wait_ms / 1000.0)
            except TlsError as exc:  # TLS 1.3: a server refusing our certificate says so at the first read
                if not exc.retriable:
                    raise
                continue
            except (ZkcoordError, OSError):
                continue
            finally:
                channel.close()
            if (not isinstance(answer, wire.ClusterMetadataResponse)
                    or answer.error_code != wire.ErrorCode.NONE
                    or answer.coordinator_epoch < self.epoch):
                continue  # that server knows less than we do; ask another
            self.brokers = list(answer.brokers)
            return answer
        log.warning("AllKnownBrokersNotAvailable: no server of %s knows a coordinator",
                    ",".join(f"{h}:{p}" for h, p in self.servers))
        self._closing.wait(0.5)
        return None

    def _serve(self, channel: Channel) -> None:
        """Block-read requests and answer them while the lease holds (seed section 9)."""
        while not self._closing.is_set():
            if self._leave_requested.is_set():
                self._leave(channel)
                return
            # Wake up now and then to notice a close() in the application thread.
            wait = min(self.close_check_s, self.protocol.lease_deadline - self.clock())
            frame = channel.receive(timeout=max(0.0, wait))
            now = self.clock()  # before answering: the lease is dated from the answer's departure
            self.protocol.clocks_read(now, self.wall_clock())  # a pause voids the lease this answer would renew
            if frame is None:
                self.protocol.check_lease(now)
                continue
            try:
                answer = self.protocol.answer(frame.message, now)
            except (wire.StaleEpoch, wire.StaleGeneration, wire.IllegalState) as refusal:
                channel.send(wire.ErrorResponse(error_code=refusal.code, message=str(refusal)), frame.correlation_id)
                raise
            channel.send(answer, frame.correlation_id)

    def _leave(self, channel: Channel) -> None:
        request = self.protocol.leave()
        correlation_id = channel.send(request)
        deadline = self.clock() + min(LEAVE_TIMEOUT_S, self.session_timeout)
        while self.clock() < deadline:
            frame = channel.receive(timeout=max(0.0, deadline - self.clock()))
            if frame is None:
                break
            if isinstance(frame.message, wire.LeaveGroupResponse) and frame.correlation_id == correlation_id:
                if frame.message.error_code != wire.ErrorCode.NONE:
                    log.warning("member %s: coordinator did not take the final offsets (error %d)",
                                self.consumer_id, frame.message.error_code)
                return
            # Requests that cross the leave are not answered: this member is going.
        log.warning("member %s left without a confirmation of its final offsets", self.consumer_id)
