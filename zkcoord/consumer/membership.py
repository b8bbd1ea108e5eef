"""The consumer's side of the coordinator protocol (seed 001 sections 5 and 9).

:class:`GroupMembership` runs one network thread. It finds the coordinator by
asking the bootstrap servers in turn (for ever, logging
AllKnownBrokersNotAvailable after each full round), registers, and then only
answers what the coordinator pushes: Ping, Stop and Start. What those mean
for fetching is the listener's business (the thin consumer, or a Spark
driver); this module owns the protocol rules:

- a request from an older coordinator epoch, or an older generation, than one
  already seen is refused and the connection dropped;
- the membership holds a lease: with no request from the coordinator within
  the session timeout, it stops everything and starts again from the
  bootstrap list. The coordinator reassigns a silent member's partitions
  only after that same timeout, so two members never fetch one partition;
- a dropped connection stops everything at once, before reconnecting.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import socket
import threading
import time
import uuid
from typing import Optional, Protocol, Sequence

from zkcoord import wire
from zkcoord.channel import Channel, ChannelClosed
from zkcoord.errors import ConfigError, ZkcoordError

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
NO_OFFSET = -1  # in a Start: no committed offset, apply auto_offset_reset
CONNECT_TIMEOUT_S = 2.0
LEAVE_CHECK_S = 0.2  # how soon the network thread notices close()
LEAVE_TIMEOUT_S = 5.0  # how long a leave waits for the coordinator's confirmation
# Registration refusals worth retrying: the coordinator moved or is starting,
# or our previous connection is still registered until the coordinator sees it close.
RETRIABLE_REGISTRATION = (wire.ErrorCode.NOT_COORDINATOR, wire.ErrorCode.COORDINATOR_NOT_AVAILABLE,
                          wire.ErrorCode.CONSUMER_ID_IN_USE, wire.ErrorCode.REBALANCE_IN_PROGRESS)


class AllKnownBrokersNotAvailable(ZkcoordError):
    """No bootstrap server answered in a full round (seed 001's error event)."""

    retriable = True


class MembershipListener(Protocol):
    def on_start(self, partitions: dict[TopicPartition, int]) -> None:
        """The whole assignment after a change, with start offsets (NO_OFFSET: none committed)."""

    def on_stop(self, partitions: frozenset[TopicPartition]) -> dict[TopicPartition, int]:
        """Stop these partitions; return the next offset to consume for each one known."""

    def offsets(self) -> Optional[dict[TopicPartition, int]]:
        """Offsets to report on a ping (None: nothing to commit)."""

    def last_poll_ms_ago(self) -> int:
        """Milliseconds since the application last polled; -1 if never."""


def parse_bootstrap(bootstrap: Sequence[str]) -> list[tuple[str, int]]:
    if isinstance(bootstrap, str):
        bootstrap = [b for b in bootstrap.split(",") if b]
    result = []
    for entry in bootstrap:
        host, sep, port = str(entry).rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"bootstrap entry {entry!r} is not host:port")
        result.append((host, int(port)))
    if not result:
        raise ConfigError("the bootstrap list is empty")
    return result


class GroupMembership:
    def __init__(
        self,
        bootstrap: Sequence[str],
        group: str,
        listener: MembershipListener,
        *,
        topics: Sequence[str] = (),
        pattern: Optional[str] = None,
        consumer_id: Optional[str] = None,
        session_timeout_ms: int = 10_000,
        max_poll_interval_ms: int = 300_000,
        auto_commit: bool = True,
        auto_offset_reset: str = "smallest",
        assignment_strategies: Sequence[str] = ("range",),
    ):
        if not group:
            raise ConfigError("a group id is required")
        if not topics and not pattern:
            raise ConfigError("subscribe to topics or to a pattern")
        if auto_offset_reset not in ("smallest", "largest"):
            raise ConfigError(f"auto_offset_reset must be 'smallest' or 'largest', not {auto_offset_reset!r}")
        if session_timeout_ms <= 0 or max_poll_interval_ms <= 0:
            raise ConfigError("session_timeout_ms and max_poll_interval_ms must be positive")
        self.servers = parse_bootstrap(bootstrap)
        self.group = group
        self.listener = listener
        self.is_static = consumer_id is not None
        self.consumer_id = consumer_id or f"{socket.gethostname()}-{uuid.uuid4().hex[:12]}"
        self.registration = wire.RegisterConsumerRequest(
            group_id=group, consumer_id=self.consumer_id, topics=tuple(topics), pattern=pattern or "",
            auto_commit=auto_commit, auto_offset_reset=auto_offset_reset,
            session_timeout_ms=session_timeout_ms, max_poll_interval_ms=max_poll_interval_ms,
            is_static=self.is_static, assignment_strategies=tuple(assignment_strategies),
        )
        self.session_timeout = session_timeout_ms / 1000.0
        self.assignment: dict[TopicPartition, int] = {}
        self.brokers: list[wire.Endpoint] = []
        self.epoch = -1
        self.generation = -1
        self.error: Optional[ZkcoordError] = None  # a refusal that retrying cannot fix
        self.registered = threading.Event()
        self._closing = threading.Event()
        self._leave_requested = threading.Event()
        self._evicted_at: Optional[float] = None
        # Final offsets of what ran when the coordinator was lost, for the next registration.
        self._handover: dict[TopicPartition, int] = {}
        self._channel: Optional[Channel] = None
        self._thread = threading.Thread(target=self._run, name=f"zkcoord-member-{self.consumer_id}", daemon=True)
        self._next_server = random.randrange(len(self.servers))

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Leave cleanly: stop everything, hand the final offsets to the
        coordinator in a LeaveGroupRequest, wait for it to commit them, then
        close. Whoever takes the partitions over starts exactly where this
        member stopped, so a planned leave delivers nothing twice."""
        if self.registered.is_set() and self._thread.is_alive():
            self._leave_requested.set()
            self._thread.join(timeout)
        self._closing.set()
        channel = self._channel
        if channel is not None:
            channel.close()
        self._thread.join(timeout)

    @property
    def closed(self) -> bool:
        return self._closing.is_set()

    # -- the network thread ------------------------------------------------------------------------

    def _run(self) -> None:
        failures = 0
        while not self._closing.is_set() and not self._leave_requested.is_set():
            try:
                channel = self._connect_to_coordinator()
                if channel is None:
                    continue
                failures = 0
                self._channel = channel
                self._serve(channel)
            except wire.MaxPollIntervalExceeded as exc:
                log.warning("member %s removed from its group: %s; it rejoins when the application polls",
                            self.consumer_id, exc)
                self._evicted_at = time.monotonic()
            except ZkcoordError as exc:
                if not self._closing.is_set():
                    log.info("member %s: %s; starting again from the bootstrap list", self.consumer_id, exc)
            except OSError as exc:
                if not self._closing.is_set():
                    log.info("member %s: connection trouble (%s); starting again", self.consumer_id, exc)
            finally:
                self.registered.clear()
                self._stop_everything()
                if self._channel is not None:
                    self._channel.close()
                    self._channel = None
            if self.error is not None:
                log.error("member %s gives up: %s", self.consumer_id, self.error)
                return
            # Back off while the coordinator stays unreachable (it may be dead
            # until ZooKeeper expires its session and another is elected).
            failures += 1
            self._closing.wait(min(0.05 * 2 ** min(failures, 5), 1.0))
            self._wait_for_poll_after_eviction()

    def _wait_for_poll_after_eviction(self) -> None:
        """After removal for not polling, stay out until the application polls again."""
        while self._evicted_at is not None and not self._closing.is_set() and not self._leave_requested.is_set():
            since_eviction_ms = (time.monotonic() - self._evicted_at) * 1000
            polled_ago = self.listener.last_poll_ms_ago()
            if 0 <= polled_ago < since_eviction_ms:
                self._evicted_at = None
                return
            self._closing.wait(LEAVE_CHECK_S)

    def _connect_to_coordinator(self) -> Optional[Channel]:
        """Seed 001 consumerStartup steps 1 to 5; None means try again."""
        metadata = self._cluster_metadata()
        if metadata is None:
            return None
        target = next((s for s in metadata.servers if s.id == metadata.coordinator_id), None)
        if target is None:
            self._closing.wait(0.2)  # no coordinator elected yet
            return None
        channel = Channel.connect(target.host, target.port, CONNECT_TIMEOUT_S)
        registration = dataclasses.replace(self.registration, offsets=wire.offset_entries(self._handover))
        try:
            answer = channel.request(registration, timeout=self.session_timeout)
        except (ChannelClosed, wire.WireError):
            channel.close()
            raise
        if not isinstance(answer, wire.RegisterConsumerResponse):
            channel.close()
            raise wire.MalformedFrame(f"expected RegisterConsumerResponse, got {type(answer).__name__}")
        if answer.error_code != wire.ErrorCode.NONE:
            channel.close()
            error = wire.error_for(answer.error_code, answer.error_message)
            if answer.error_code not in RETRIABLE_REGISTRATION:
                self.error = error
            else:
                self._closing.wait(0.2)
            raise error
        self._observe_epoch(answer.coordinator_epoch)
        self._handover = {}
        self.registered.set()
        log.info("member %s registered in group %s with coordinator %d (epoch %d)",
                 self.consumer_id, self.group, target.id, answer.coordinator_epoch)
        return channel

    def _cluster_metadata(self) -> Optional[wire.ClusterMetadataResponse]:
        for _ in range(len(self.servers)):
            host, port = self.servers[self._next_server]
            self._next_server = (self._next_server + 1) % len(self.servers)
            try:
                channel = Channel.connect(host, port, CONNECT_TIMEOUT_S)
            except OSError:
                continue
            try:
                answer = channel.request(wire.ClusterMetadataRequest(), timeout=CONNECT_TIMEOUT_S)
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

    def _observe_epoch(self, epoch: int) -> None:
        if epoch > self.epoch:
            self.epoch = epoch
            self.generation = -1

    def _serve(self, channel: Channel) -> None:
        """Block-read requests and answer them, holding the lease (seed section 9)."""
        lease_expires = time.monotonic() + self.session_timeout
        while not self._closing.is_set():
            if self._leave_requested.is_set():
                self._leave(channel)
                return
            # Wake up now and then to notice a close() in the application thread.
            frame = channel.receive(timeout=max(0.0, min(LEAVE_CHECK_S, lease_expires - time.monotonic())))
            if frame is None:
                if time.monotonic() < lease_expires:
                    continue
                raise ChannelClosed(f"no request from the coordinator within {self.session_timeout:.1f}s")
            request = frame.message
            if isinstance(request, wire.ErrorResponse):
                raise wire.error_for(request.error_code, request.message)
            if not isinstance(request, (wire.PingRequest, wire.StopRequest, wire.StartRequest)):
                raise wire.IllegalState(f"a coordinator does not send {type(request).__name__}")
            refusal = self._check_authority(request)
            if refusal is not None:
                channel.send(wire.ErrorResponse(error_code=refusal.code, message=str(refusal)), frame.correlation_id)
                raise refusal
            lease_expires = time.monotonic() + self.session_timeout
            channel.send(self._answer(request), frame.correlation_id)

    def _leave(self, channel: Channel) -> None:
        revoked, self.assignment = frozenset(self.assignment), {}
        final = self.listener.on_stop(revoked) if revoked else {}
        request = wire.LeaveGroupRequest(offsets=wire.offset_entries(final))
        correlation_id = channel.send(request)
        deadline = time.monotonic() + min(LEAVE_TIMEOUT_S, self.session_timeout)
        while time.monotonic() < deadline:
            frame = channel.receive(timeout=max(0.0, deadline - time.monotonic()))
            if frame is None:
                break
            if isinstance(frame.message, wire.LeaveGroupResponse) and frame.correlation_id == correlation_id:
                if frame.message.error_code != wire.ErrorCode.NONE:
                    log.warning("member %s: coordinator did not take the final offsets (error %d)",
                                self.consumer_id, frame.message.error_code)
                return
            # Requests that cross the leave are not answered: this member is going.
        log.warning("member %s left without a confirmation of its final offsets", self.consumer_id)

    def _check_authority(self, request) -> Optional[wire.WireError]:
        if request.coordinator_epoch < self.epoch:
            return wire.StaleEpoch(f"request from coordinator epoch {request.coordinator_epoch}; "
                                   f"epoch {self.epoch} has been seen")
        self._observe_epoch(request.coordinator_epoch)
        if isinstance(request, (wire.StopRequest, wire.StartRequest)):
            if request.generation < self.generation:
                return wire.StaleGeneration(f"generation {request.generation} is older than {self.generation}")
            self.generation = request.generation
        return None

    def _answer(self, request) -> wire.Message:
        if isinstance(request, wire.PingRequest):
            return wire.PingResponse(
                offsets=self._offsets_to_report(), last_poll_ms_ago=self.listener.last_poll_ms_ago()
            )
        if isinstance(request, wire.StopRequest):
            revoked = frozenset(self.assignment) if request.revoke_all else frozenset(
                (tp.topic, tp.partition) for tp in request.partitions) & frozenset(self.assignment)
            for tp in revoked:
                self.assignment.pop(tp, None)
            final = self.listener.on_stop(revoked) if revoked else {}
            return wire.StopResponse(
                coordinator_epoch=self.epoch, generation=self.generation,
                offsets=wire.offset_entries(final),
            )
        # StartRequest: the whole assignment after the change. Partitions we
        # run must stay in it: only a Stop takes a partition away.
        granted = {(tp.topic, tp.partition): tp.offset for tp in request.partitions}
        dropped = set(self.assignment) - set(granted)
        if dropped:
            log.error("member %s: Start drops %s without a Stop", self.consumer_id, sorted(dropped))
            return wire.RestartFetcherResponse(
                error_code=wire.ErrorCode.ILLEGAL_STATE, coordinator_epoch=self.epoch, generation=self.generation
            )
        self.assignment = granted
        self.listener.on_start(dict(granted))
        return wire.RestartFetcherResponse(coordinator_epoch=self.epoch, generation=self.generation)

    def _offsets_to_report(self) -> Optional[tuple]:
        offsets = self.listener.offsets()
        if offsets is None:
            return None
        return wire.offset_entries({tp: o for tp, o in offsets.items() if tp in self.assignment})

    def _stop_everything(self) -> None:
        if self.assignment:
            revoked, self.assignment = frozenset(self.assignment), {}
            self._handover = self.listener.on_stop(revoked)
