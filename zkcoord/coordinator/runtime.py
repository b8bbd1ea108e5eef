"""The elected coordinator at work (seed 001, sections 3 to 7), on gevent.

It owns the groups and their members, the rebalance queues and handlers, the
ping scheduler with its expiry watch, and the offset flusher. Decisions come
from the pure modules (planner, schedule, group); ZooKeeper I/O goes through
:class:`~zkcoord.coordinator.store.CoordinatorStore`, whose writes are fenced
by this coordinator's epoch.

Safety beyond the seed:
- every pushed request carries the coordinator epoch and the group generation;
- while the ZooKeeper connection is suspended the coordinator sends no
  request at all (so members' leases run out), starts nobody and writes nothing;
- a member dropped without acknowledging that it stopped (no answer, a
  connection only this side saw close, eviction, a failover) leaves its
  partitions fenced until its lease has surely ended (lease.py), on every path.
"""

from __future__ import annotations

import logging
import re
import time
import zlib
from dataclasses import dataclass
from typing import Callable, Optional

import gevent
import gevent.event
import gevent.lock
import gevent.queue

from zkcoord import wire
from zkcoord.channel import Channel, ChannelClosed
from zkcoord.coordinator.assignors import NoCommonStrategyError, choose_strategy
from zkcoord.coordinator.group import Group, GroupPhase, Member
from zkcoord.coordinator.lease import lease_end
from zkcoord.coordinator.planner import (
    Subscription, owners_of, plan_handoff, rebalance_reason, target_assignment,
)
from zkcoord.coordinator.schedule import PingSchedule
from zkcoord.coordinator.store import CoordinatorStore, Deposed, count_partitions
from zkcoord.errors import ConfigError, ZkcoordError
from zkcoord.zk import layout

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
REBALANCE_PROTOCOLS = ("incremental", "eager")


@dataclass(frozen=True)
class CoordinatorConfig:
    """The coordinator's knobs (seed 001 section 2), validated on creation."""

    min_session_timeout_ms: int = 1000
    max_session_timeout_ms: int = 60_000
    rebalance_queues: int = 4
    max_rebalance_retries: int = 4
    rebalance_backoff_ms: int = 500
    rebalance_timeout_ms: int = 10_000  # wait for every Stop and Start answer
    offset_flush_interval_ms: int = 1000
    lease_margin_ms: int = 200  # slack for the members' clocks running slower than ours
    rebalance_delay_ms: int = 100  # joins and leaves within this delay make one rebalance
    rebalance_protocol: str = "incremental"  # or "eager": seed 001's stop-all/start-all

    def __post_init__(self) -> None:
        if self.rebalance_protocol not in REBALANCE_PROTOCOLS:
            raise ConfigError(f"rebalance_protocol must be one of {REBALANCE_PROTOCOLS}, "
                              f"not {self.rebalance_protocol!r}")
        positive = (
            "min_session_timeout_ms", "max_session_timeout_ms", "rebalance_queues",
            "rebalance_timeout_ms", "offset_flush_interval_ms",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, not {getattr(self, name)}")
        for name in ("max_rebalance_retries", "rebalance_backoff_ms", "lease_margin_ms", "rebalance_delay_ms"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative, not {getattr(self, name)}")
        if self.min_session_timeout_ms > self.max_session_timeout_ms:
            raise ConfigError("min_session_timeout_ms exceeds max_session_timeout_ms")


@dataclass(frozen=True)
class RebalanceReport:
    """The last finished rebalance, for logs, benchmarks and tests."""

    group: str
    generation: int
    paused: int
    partitions: int
    seconds: float


class RebalanceAborted(ZkcoordError):
    """A rebalance could not finish (a member did not answer, the coordinator lost ZooKeeper)."""

    retriable = True


class Suspended(RebalanceAborted):
    """The coordinator's ZooKeeper connection is suspended: it sends no request."""


def offset_is_acceptable(group: Group, member: Member, tp: TopicPartition, offset: int,
                         owned: frozenset[TopicPartition]) -> bool:
    """May ``member`` report ``offset`` as the next to consume of ``tp``?
    Only for a partition it owns, and never a negative one: an offset taken
    here is written to ZooKeeper as it is, and one that cannot be written
    would fail every flush of the group after it."""
    if tp not in owned:
        log.warning("%s member %s reported an offset for %s-%d, which it does not own; ignored",
                    group.describe(), member.member_id, *tp)
        return False
    try:
        layout.encode_offset(offset)
    except layout.LayoutError as exc:
        log.warning("%s member %s reported a bad offset for %s-%d (%s); ignored",
                    group.describe(), member.member_id, *tp, exc)
        return False
    return True


class MemberLink:
    """The coordinator's end of one member's connection.

    At most one request is outstanding at a time: the lock is seed 001's
    "channel held by the processor". Answers are matched by correlation id.
    """

    def __init__(self, channel: Channel):
        self.channel = channel
        self.lock = gevent.lock.Semaphore()
        self._waiting: dict[int, gevent.event.AsyncResult] = {}

    def call(self, message: wire.Message, timeout: float) -> wire.Message:
        """Send a request and wait for its answer; the caller holds ``lock``."""
        waiter = gevent.event.AsyncResult()
        correlation_id = self.channel.next_correlation_id()
        self._waiting[correlation_id] = waiter
        try:
            self.channel.send(message, correlation_id)
            return waiter.get(timeout=timeout)
        except gevent.Timeout:
            raise RebalanceAborted(f"no answer from {self.channel.peer} within {timeout:.1f}s") from None
        finally:
            self._waiting.pop(correlation_id, None)

    def deliver(self, frame: wire.Frame) -> bool:
        waiter = self._waiting.get(frame.correlation_id)
        if waiter is None:
            return False
        waiter.set(frame.message)
        return True

    def fail_all(self, error: Exception) -> None:
        for waiter in list(self._waiting.values()):
            waiter.set_exception(error)


class Coordinator:
    def __init__(
        self,
        store: CoordinatorStore,
        config: CoordinatorConfig,
        epoch: int,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.store = store
        self.config = config
        self.epoch = epoch
        self.clock = clock
        self.groups: dict[str, Group] = {}
        self.partitions: dict[str, int] = {}  # topic -> partition count
        self.schedule = PingSchedule()
        self.pending_offsets: dict[str, dict[TopicPartition, int]] = {}
        self._flush_locks: dict[str, gevent.lock.Semaphore] = {}
        self._no_offset: dict[str, set[TopicPartition]] = {}  # known to have no committed offset
        self.committed: dict[str, dict[TopicPartition, int]] = {}
        self.active = True  # False while ZooKeeper is suspended
        self.deposed = False
        self._queues = [gevent.queue.Queue() for _ in range(config.rebalance_queues)]
        self._greenlets: list[gevent.Greenlet] = []
        self._topic_watches: set[str] = set()
        # Per group: when its queued rebalance is due, and the timer that queues it.
        self._rebalance_timers: dict[str, tuple[float, gevent.Greenlet]] = {}
        self.last_rebalance: Optional[RebalanceReport] = None

    # -- startup (seed section 3) -------------------------------------------------------

    def start(self) -> None:
        self._load_persisted_groups()
        self._watch_topics()
        for queue in self._queues:
            self._greenlets.append(gevent.spawn(self._rebalance_handler, queue))
        self._greenlets.append(gevent.spawn(self._ping_loop))
        self._greenlets.append(gevent.spawn(self._flush_loop))
        log.info("coordinator epoch %d started", self.epoch)

    def _load_persisted_groups(self) -> None:
        """Groups a predecessor left in ZooKeeper: their generation continues,
        and their members' partitions stay fenced until those members come
        back or their lease has run out."""
        now = self.clock()
        for name in self.store.groups_with_state():
            state = self.store.group_state(name)
            if state is None:
                continue
            group = self._group(name)
            group.generation = state.generation
            group.strategy = state.strategy
            # Our predecessor sent nothing after its session ended, before now.
            until = lease_end(now, state.lease_ms, self.config.lease_margin_ms)
            for holders in (state.assignment, state.running):
                for member_id, partitions in holders.items():
                    group.fences.fence(member_id, partitions, until)
            log.info("%s resumed; %d member(s) may still run partitions for up to %d ms",
                     group.describe(), len(group.fences.holders()), state.lease_ms)

    def _watch_topics(self) -> None:
        zk = self.store.zk
        zk.ensure_path(layout.BROKER_TOPICS)

        def on_topics(children):  # TopicChangeListener
            if self.deposed:
                return False
            for topic in children:
                if topic not in self._topic_watches:
                    self._topic_watches.add(topic)
                    zk.DataWatch(layout.topic_path(topic), self._partition_watch(topic))
            return True

        zk.ChildrenWatch(layout.BROKER_TOPICS, on_topics)

    def _partition_watch(self, topic: str):
        def on_change(data, stat):  # TopicPartitionChangeListener
            if self.deposed:
                return False
            count = count_partitions(topic, data)  # the watch hands us the node's data
            if self.partitions.get(topic) != count:
                self.partitions[topic] = count
                log.info("topic %s has %d partition(s)", topic, count)
                for group in list(self.groups.values()):
                    if group.interested_in(topic):
                        self.request_rebalance(group, f"topic {topic} now has {count} partition(s)")
            return True

        return on_change

    def stop(self) -> None:
        """Step down: flush what can be flushed, drop every member, stop every loop."""
        if not self.deposed and self.active:
            try:
                self._flush_offsets()
            except Exception as exc:  # fenced out, or ZooKeeper gone: the members still hold them
                log.warning("final offset flush failed: %s", exc)
        self.deposed = True
        for group in self.groups.values():
            for member in list(group.members.values()):
                member.connection.channel.close()
        gevent.killall(self._greenlets, block=False)

    # -- registration (seed section 5) ------------------------------------------------------

    def validate(self, request: wire.RegisterConsumerRequest) -> None:
        """Registration checks; raises the wire error to send back."""
        try:
            layout.group_path(request.group_id)  # validates the id, and refuses "coordinator"
        except layout.LayoutError as exc:
            raise wire.InvalidRegistration(str(exc)) from None
        if not request.consumer_id or "/" in request.consumer_id:
            raise wire.InvalidRegistration(f"invalid consumer id {request.consumer_id!r}")
        if not request.topics and not request.pattern:
            raise wire.InvalidRegistration("the subscription names no topic and no pattern")
        for topic in request.topics:
            try:
                layout.validate_topic_name(topic)
            except layout.LayoutError as exc:
                raise wire.InvalidRegistration(str(exc)) from None
        if request.pattern:
            try:
                re.compile(request.pattern)
            except re.error as exc:
                raise wire.InvalidRegistration(f"bad pattern {request.pattern!r}: {exc}") from None
        if request.auto_offset_reset not in wire.OFFSET_RESETS:
            raise wire.InvalidRegistration(
                f"auto_offset_reset must be one of {wire.OFFSET_RESETS}, not {request.auto_offset_reset!r}"
            )
        if request.session_timeout_ms < self.config.min_session_timeout_ms:
            raise wire.SessionTimeoutTooLow(
                f"session timeout {request.session_timeout_ms} ms is below the minimum "
                f"{self.config.min_session_timeout_ms} ms"
            )
        if request.session_timeout_ms > self.config.max_session_timeout_ms:
            raise wire.InvalidRegistration(
                f"session timeout {request.session_timeout_ms} ms exceeds the maximum "
                f"{self.config.max_session_timeout_ms} ms"
            )
        group = self.groups.get(request.group_id)
        others = [m.strategies for m in group.members.values()] if group else []
        try:
            choose_strategy(others + [tuple(request.assignment_strategies)])
        except NoCommonStrategyError as exc:
            raise wire.NoCommonStrategy(str(exc)) from None
        existing = group.members.get(request.consumer_id) if group else None
        if existing is not None and not (existing.is_static and request.is_static):
            # A static member may take its own place back (its old connection
            # is closed and fenced); a dynamic id is unique while it lives.
            raise wire.ConsumerIdInUse(
                f"consumer id {request.consumer_id} is already registered in group {request.group_id}"
            )
        if not self.active or self.deposed:
            raise wire.CoordinatorNotAvailable("the coordinator is not connected to ZooKeeper")

    def serve_member(self, channel: Channel, request: wire.RegisterConsumerRequest, correlation_id: int) -> None:
        """Register the consumer behind ``channel``, then read its answers until it goes."""
        try:
            self.validate(request)
        except wire.WireError as exc:
            log.info("refused consumer %s of group %s: %s", request.consumer_id, request.group_id, exc)
            channel.send(
                wire.RegisterConsumerResponse(error_code=exc.code, error_message=str(exc),
                                              coordinator_epoch=self.epoch),
                correlation_id,
            )
            return
        member = Member(
            member_id=request.consumer_id,
            group=request.group_id,
            subscription=Subscription(frozenset(request.topics), request.pattern or None),
            session_timeout_ms=request.session_timeout_ms,
            max_poll_interval_ms=request.max_poll_interval_ms,
            auto_commit=request.auto_commit,
            auto_offset_reset=request.auto_offset_reset,
            is_static=request.is_static,
            strategies=tuple(request.assignment_strategies),
            connection=MemberLink(channel),
            # Its lease runs from before it sent this registration: earlier than now.
            last_sent=self.clock(),
            registered_at=self.clock(),
        )
        group = self._group(request.group_id)
        previous = group.members.get(member.member_id)
        if previous is not None:  # a static member back: its old connection is closed
            member.assigned = previous.assigned
            self._fence(group, previous)  # which may be another process, still running
            self._forget(previous)
            log.info("%s static member %s is back", group.describe(), member.member_id)
        # What it hands over is exact: it stopped those partitions before
        # registering, and nobody has been started on them since (fenced).
        if request.offsets:
            try:
                self._accept_handover(group, member, request.offsets)
            except Exception as exc:  # ZooKeeper trouble: those records are redelivered, never lost
                log.warning("%s handover of member %s not taken: %s", group.describe(), member.member_id, exc)
        if not member.is_static:
            # A dynamic id belongs to one process, which stops everything
            # before it registers: what that id held is free. A static id may
            # be taken by another process while the old one still runs.
            group.fences.release(member.member_id)
        group.members[member.member_id] = member
        self.schedule.add(member, member.session_timeout / 3, self.clock())
        channel.send(wire.RegisterConsumerResponse(coordinator_epoch=self.epoch), correlation_id)
        log.info("%s member %s registered from %s", group.describe(), member.member_id, channel.peer)
        self.request_rebalance(group, f"member {member.member_id} joined")
        try:
            self._read_answers(member)
        finally:
            self._disconnected(member)

    def _read_answers(self, member: Member) -> None:
        link: MemberLink = member.connection
        while not self.deposed:
            try:
                frame = link.channel.receive()
            except ChannelClosed:
                return
            except wire.WireError as exc:
                log.warning("member %s sent a bad frame: %s", member.member_id, exc)
                try:
                    link.channel.send(wire.ErrorResponse(error_code=exc.code, message=str(exc)),
                                      exc.correlation_id or 0)
                except ChannelClosed:
                    pass
                return
            if isinstance(frame.message, wire.ErrorResponse):
                log.warning("member %s refused a request: %s", member.member_id, frame.message.message)
                link.fail_all(wire.error_for(frame.message.error_code, frame.message.message))
                return
            if isinstance(frame.message, wire.LeaveGroupRequest):
                self._leave(member, frame)
                return
            if not link.deliver(frame):
                log.warning("member %s sent an unsolicited %s", member.member_id, type(frame.message).__name__)

    def _leave(self, member: Member, frame: wire.Frame) -> None:
        """A clean leave: take the final offsets (the member has stopped
        everything), make them durable, and only then let it go."""
        group = self.groups.get(member.group)
        error = wire.ErrorCode.NONE
        if group is not None and group.members.get(member.member_id) is member and self.active:
            self._accept_offsets(group, member, wire.offsets_of(frame.message.offsets), owned=member.may_run)
            member.running = member.starting = frozenset()  # it stopped everything before it asked
            try:
                self._flush_offsets(group.name)
            except ZkcoordError as exc:
                log.warning("%s offsets of leaving member %s not flushed: %s",
                            group.describe(), member.member_id, exc)
                error = wire.code_for(exc)
        else:
            error = wire.ErrorCode.COORDINATOR_NOT_AVAILABLE
        try:
            member.connection.channel.send(wire.LeaveGroupResponse(error_code=error), frame.correlation_id)
        except ChannelClosed:
            pass

    def _disconnected(self, member: Member) -> None:
        """The member's connection is gone. A dynamic member leaves at once; a
        static one keeps its partitions until its session timeout, in case it
        comes back (seed 004's static membership). Either way, the member may
        not have seen the connection close (a reset on our side only): what it
        ran stays fenced until its lease has ended."""
        group = self.groups.get(member.group)
        if not member.is_static or group is None or group.members.get(member.member_id) is not member:
            self.remove_member(member, "its connection closed")
            return
        self._fence(group, member)
        member.running = member.starting = frozenset()
        member.connected = False
        member.connection.fail_all(ChannelClosed("connection closed"))
        self.schedule.remove(member)
        log.info("%s static member %s disconnected; its partitions wait %d ms for it",
                 group.describe(), member.member_id, member.session_timeout_ms)
        gevent.spawn_later(member.session_timeout, self._static_timeout, member)

    def _static_timeout(self, member: Member) -> None:
        group = self.groups.get(member.group)
        if group is not None and group.members.get(member.member_id) is member and not member.connected:
            self.remove_member(member, "it did not come back within its session timeout")

    def _forget(self, member: Member) -> None:
        member.connected = False
        member.connection.fail_all(ChannelClosed("replaced"))
        member.connection.channel.close()
        self.schedule.remove(member)

    def _fence(self, group: Group, member: Member) -> None:
        """Hold what ``member`` may still fetch until its lease has surely ended."""
        if member.may_run:
            until = lease_end(member.last_sent, member.session_timeout_ms, self.config.lease_margin_ms)
            group.fences.fence(member.member_id, member.may_run, until)
            log.info("%s member %s may run %d partition(s) for %.1fs more; fenced",
                     group.describe(), member.member_id, len(member.may_run), until - self.clock())

    def remove_member(self, member: Member, why: str) -> None:
        """Drop a member and rebalance its group; what it may still be
        fetching stays fenced until its lease has ended (lease.py)."""
        group = self.groups.get(member.group)
        self._forget(member)
        if group is None or group.members.get(member.member_id) is not member:
            return
        self._fence(group, member)
        del group.members[member.member_id]
        log.info("%s member %s removed: %s", group.describe(), member.member_id, why)
        self.request_rebalance(group, f"member {member.member_id} left")

    def _group(self, name: str) -> Group:
        group = self.groups.get(name)
        if group is None:  # handleNewGroup
            group = self.groups[name] = Group(name)
        return group

    # -- rebalancing (seed sections 6 and 7) ---------------------------------------------------

    def request_rebalance(self, group: Group, why: str, delay: float = 0.0) -> None:
        """Queue a rebalance of ``group`` after the debounce delay; requests
        made while one is queued join it (seed 001's rebalance bit), or bring
        it forward if they are due sooner (a round waiting for a fence that a
        returning member lifts). Safe to merge: whatever round runs next
        honours every fence set meanwhile."""
        if self.deposed:
            return
        now = self.clock()
        due = now + max(delay, self.config.rebalance_delay_ms / 1000.0)
        pending = self._rebalance_timers.get(group.name)
        if group.rebalance_pending and pending is not None and pending[0] <= due:
            return
        if pending is not None:
            pending[1].kill(block=False)
        group.rebalance_pending = True
        log.debug("%s rebalance requested: %s", group.describe(), why)
        queue = self._queues[zlib.crc32(group.name.encode()) % len(self._queues)]
        self._rebalance_timers[group.name] = (due, gevent.spawn_later(due - now, queue.put, group.name))

    def _rebalance_handler(self, queue: gevent.queue.Queue) -> None:
        while not self.deposed:
            name = queue.get()
            group = self.groups[name]
            group.rebalance_pending = False  # changes from now on queue another round
            self._rebalance_timers.pop(name, None)
            for attempt in range(self.config.max_rebalance_retries + 1):
                if self.deposed:
                    return
                try:
                    self._rebalance(group)
                    if group.failures:
                        self.store.write_group_failure(group.name, None)
                    group.failures = 0
                    group.last_error = None
                    break
                except Deposed as exc:
                    log.error("%s deposed: %s", group.describe(), exc)
                    self.deposed = True
                    return
                except Exception as exc:  # a ZooKeeper error, a member gone, or a bug: retry, never die
                    group.failures += 1
                    group.last_error = f"{type(exc).__name__}: {exc}"
                    if isinstance(exc, ZkcoordError):
                        log.warning("%s rebalance attempt %d failed: %s", group.describe(), attempt + 1, exc)
                    else:
                        log.exception("%s rebalance attempt %d failed", group.describe(), attempt + 1)
                    if group.rebalance_pending:
                        break  # membership changed meanwhile: the queued round takes over
                    gevent.sleep(self.config.rebalance_backoff_ms / 1000.0 * (2**attempt))
            else:
                group.transition(GroupPhase.FAILED)
                log.error("%s rebalance FAILED after %d attempts: %s",
                          group.describe(), self.config.max_rebalance_retries + 1, group.last_error)
                try:  # visible to `zkcoord groups describe` until a retry succeeds
                    self.store.write_group_failure(group.name, layout.GroupFailure(
                        group.generation, self.config.max_rebalance_retries + 1, group.last_error or "unknown"))
                except Exception as exc:  # the failure is logged either way
                    log.warning("%s could not record the failure: %s", group.describe(), exc)

    def _require_active(self) -> None:
        if self.deposed:
            raise Deposed("this coordinator has been deposed")
        if not self.active:
            raise Suspended("ZooKeeper connection suspended; sending no request")

    def _rebalance(self, group: Group) -> None:
        self._require_active()
        if not group.members:
            group.transition(GroupPhase.EMPTY)
            self._flush_offsets(group.name)
            return
        now = self.clock()
        free_at = group.fences.until(now)
        if free_at is not None:
            # Partitions some dropped member may still fetch: nobody is started
            # on anything until its lease has ended (or it registers again).
            log.info("%s waiting %.1fs for the leases of %s", group.describe(), free_at - now,
                     sorted(group.fences.holders()))
            self.request_rebalance(group, "fenced partitions free", delay=free_at - now)
            return
        subscriptions = group.subscriptions()
        group.strategy = choose_strategy([m.strategies for m in group.members.values()])
        topics = {t for t in self.partitions if any(s.matches(t) for s in subscriptions.values())}
        counts = {t: self.store.partition_count(t) for t in sorted(topics)}  # step 1.1: fresh from ZK
        current = {m.member_id: m.assigned for m in group.members.values()}
        started = self.clock()
        target = target_assignment(subscriptions, counts, group.strategy, current)
        if group.recorded_owners is None:  # first rebalance of this group in this epoch
            group.recorded_owners = self.store.owners(group.name)
        recorded = group.recorded_owners
        running = {m.member_id: m.running for m in group.members.values() if m.connected}
        reason = rebalance_reason(target, recorded, running)
        if reason is None:
            if group.phase is not GroupPhase.STABLE:
                group.transition(GroupPhase.REBALANCING)
                group.transition(GroupPhase.STABLE)
            return
        plan = plan_handoff(target, running, eager=self.config.rebalance_protocol == "eager")
        group.transition(GroupPhase.REBALANCING)
        generation = group.generation + 1
        log.info("%s rebalancing to gen %d (%s, %s): %s; %d partition(s) paused",
                 group.describe(), generation, group.strategy, self.config.rebalance_protocol, reason,
                 len(plan.paused))

        # Persist the new generation, who takes part and who runs what,
        # before anyone is told: a successor fences all of it.
        state = layout.GroupState(
            generation, group.strategy,
            {m: tuple(sorted(tps)) for m, tps in target.items()},
            lease_ms=max((m.session_timeout_ms for m in group.members.values()), default=0),
            running={m.member_id: tuple(sorted(m.may_run)) for m in group.members.values() if m.may_run},
        )
        self.store.write_group_state(group.name, state, exists=group.generation > 0 or self._has_state(group))
        group.generation = generation
        for member in group.members.values():
            member.assigned = target.get(member.member_id, frozenset())

        # A member that left meanwhile stopped with its connection; it needs no Stop.
        self._gather(group, self._present(group, plan.revoke),
                     lambda g, m: self._stop_member(g, m, plan.revoke[m.member_id], plan.revoke_all))
        self._flush_offsets(group.name)  # offsets from the Stop answers, before anyone restarts
        # A member dropped since the round began (its Stop skipped) fenced
        # what it may still run: none of that may be started yet.
        free_at = group.fences.until(self.clock(), {tp for tps in plan.start.values() for tp in tps})
        if free_at is not None:
            raise RebalanceAborted(f"partitions fenced during the round, for {free_at - self.clock():.1f}s more")
        offsets = self._committed(group.name, {tp for tps in plan.start.values() for tp in tps})
        self._gather(group, self._present(group, plan.start),
                     lambda g, m: self._start_member(g, m, plan.start[m.member_id], offsets))
        self._require_active()
        owners = owners_of(target)
        self.store.write_owners(group.name, owners, recorded)  # step 5
        group.recorded_owners = owners  # only this coordinator writes them, fenced
        group.transition(GroupPhase.STABLE)
        self.last_rebalance = RebalanceReport(group.name, generation, len(plan.paused),
                                              sum(len(t) for t in target.values()), self.clock() - started)
        log.info("%s stable: %d member(s), %d partition(s), %d paused, %.0f ms",
                 group.describe(), len(group.members), self.last_rebalance.partitions,
                 self.last_rebalance.paused, self.last_rebalance.seconds * 1000)

    @staticmethod
    def _present(group: Group, member_ids) -> list[Member]:
        return [group.members[m] for m in member_ids if m in group.members]

    def _has_state(self, group: Group) -> bool:
        return self.store.zk.exists(layout.group_state_path(group.name)) is not None

    def _gather(self, group: Group, members: list[Member], action) -> None:
        """Run ``action(group, member)`` for every member at once; raise the first failure."""

        def attempt(member: Member) -> Optional[BaseException]:
            try:
                action(group, member)
            except (ZkcoordError, wire.WireError) as exc:  # returned, so gevent does not print it
                return exc
            return None

        jobs = {gevent.spawn(attempt, member): member for member in members}
        gevent.joinall(jobs, timeout=self.config.rebalance_timeout_ms / 1000.0 + 1)
        hung = [job for job in jobs if not job.ready()]
        if hung:
            # Every job ends here: none may run on into the next round, and a
            # member we stop waiting for is dropped (its partitions fenced).
            gevent.killall(hung, block=True)
            for job in hung:
                self.remove_member(jobs[job], "its rebalance step did not finish in time")
            raise RebalanceAborted(f"{len(hung)} member(s) did not answer in time")
        for job in jobs:
            failure = job.exception or job.value
            if failure is not None:
                raise failure

    def _send_request(self, member: Member, request: wire.Message, timeout: float) -> wire.Message:
        """Send a request and wait for its answer; the caller holds the link's lock.
        Never while ZooKeeper is suspended: a request renews the member's lease."""
        self._require_active()
        member.last_sent = self.clock()  # before it leaves: the member's lease ends by this + T
        return member.connection.call(request, timeout)

    def _call(self, group: Group, member: Member, request: wire.Message) -> wire.Message:
        link: MemberLink = member.connection
        timeout = self.config.rebalance_timeout_ms / 1000.0
        with link.lock:  # the channel is held: no ping goes out meanwhile
            try:
                return self._send_request(member, request, timeout)
            except Suspended:
                raise  # nothing was sent: not the member's fault
            except (RebalanceAborted, ChannelClosed, wire.WireError) as exc:
                self.remove_member(member, f"no valid answer to {type(request).__name__}: {exc}")
                raise RebalanceAborted(f"member {member.member_id}: {exc}") from None

    def _stop_member(self, group: Group, member: Member, partitions, revoke_all: bool) -> None:
        answer = self._call(group, member, wire.StopRequest(
            coordinator_epoch=self.epoch, generation=group.generation, revoke_all=revoke_all,
            partitions=tuple(wire.TopicPartition(t, p) for t, p in sorted(partitions))))
        if not isinstance(answer, wire.StopResponse) or answer.error_code != wire.ErrorCode.NONE:
            raise RebalanceAborted(f"member {member.member_id} failed to stop: {answer}")
        # Judged against what we asked it to stop, not what it runs now: a
        # leave read meanwhile may have emptied that already.
        self._accept_offsets(group, member, wire.offsets_of(answer.offsets), owned=frozenset(partitions))
        member.running = member.running - frozenset(partitions)

    def _start_member(self, group: Group, member: Member, partitions, offsets) -> None:
        request = wire.StartRequest(
            coordinator_epoch=self.epoch, generation=group.generation, strategy=group.strategy,
            partitions=tuple(
                wire.TopicPartitionOffset(t, p, offsets.get((t, p), -1)) for t, p in sorted(partitions)
            ),
        )
        member.starting = frozenset(partitions)  # from now on it may run them
        answer = self._call(group, member, request)
        if not isinstance(answer, wire.RestartFetcherResponse) or answer.error_code != wire.ErrorCode.NONE:
            raise RebalanceAborted(f"member {member.member_id} failed to start: {answer}")
        member.running, member.starting = frozenset(partitions), frozenset()

    # -- offsets ------------------------------------------------------------------------------

    def _committed(self, group: str, partitions) -> dict[TopicPartition, int]:
        """Committed offsets of ``partitions``, read from ZooKeeper once and then
        kept (this coordinator is the only writer, so the cache stays true)."""
        known = self.committed.setdefault(group, {})
        absent = self._no_offset.setdefault(group, set())
        missing = [tp for tp in partitions if tp not in known and tp not in absent]
        if missing:
            found = self.store.offsets(group, missing)
            known.update(found)
            absent.update(tp for tp in missing if tp not in found)
        return {tp: known[tp] for tp in partitions if tp in known}

    def _accept_offsets(self, group: Group, member: Member, offsets: dict[TopicPartition, int],
                        owned: Optional[frozenset[TopicPartition]] = None) -> int:
        """Take offsets a member reports, only for partitions it owns (by
        default, those it runs), never backwards; returns how many were taken."""
        owned = member.running if owned is None else owned
        offsets = {tp: o for tp, o in offsets.items() if offset_is_acceptable(group, member, tp, o, owned)}
        if not offsets:
            return 0
        committed = self._committed(group.name, offsets)
        pending = self.pending_offsets.setdefault(group.name, {})
        taken = 0
        for tp, offset in offsets.items():
            floor = max(committed.get(tp, -1), pending.get(tp, -1))
            if offset < floor:
                log.warning("%s member %s reported offset %d for %s-%d below committed %d; ignored",
                            group.describe(), member.member_id, offset, tp[0], tp[1], floor)
                continue
            pending[tp] = offset
            taken += 1
        return taken

    def _accept_handover(self, group: Group, member: Member, offsets) -> None:
        """A returning member's final offsets for the partitions it is still
        fenced on (after a failover: all it ran or was given in the last
        persisted generation). It stopped them before registering, and nobody
        has been started on them since, so they are exact: whoever runs them
        next redelivers nothing. Offsets of anything else are stale; ignored."""
        taken = self._accept_offsets(group, member, wire.offsets_of(offsets),
                                     owned=group.fences.held_by(member.member_id, self.clock()))
        if taken:
            # Durable before the member hears it is registered and forgets them.
            self._flush_offsets(group.name)
        log.info("%s member %s handed over offsets of %d partition(s)", group.describe(), member.member_id, taken)

    def _flush_offsets(self, only_group: Optional[str] = None) -> None:
        """Write pending offsets, one fenced multi-operation per group (seed improvement 1).

        One flush per group at a time: the periodic flusher and a rebalance may
        both flush, and offsets that arrive during a write stay pending.
        """
        for name in [only_group] if only_group else list(self.pending_offsets):
            lock = self._flush_locks.setdefault(name, gevent.lock.Semaphore())
            with lock:
                pending = self.pending_offsets.get(name)
                if not pending:
                    continue
                committed = self.committed.setdefault(name, {})
                changed = {tp: o for tp, o in pending.items() if committed.get(tp) != o}
                if changed:
                    self._committed(name, changed)  # learn which nodes exist
                    existing = {tp for tp in changed if tp in committed}
                    self.store.write_offsets(name, changed, existing)
                    committed.update(changed)
                    self._no_offset.get(name, set()).difference_update(changed)
                for tp, offset in list(pending.items()):
                    if committed.get(tp) == offset:
                        del pending[tp]

    def _flush_loop(self) -> None:
        while not self.deposed:
            gevent.sleep(self.config.offset_flush_interval_ms / 1000.0)
            if not self.active:
                continue
            try:
                self._flush_offsets()
            except Deposed as exc:
                log.error("offset flush refused, deposed: %s", exc)
                self.deposed = True
            except ZkcoordError as exc:
                log.warning("offset flush failed, will retry: %s", exc)
            except Exception:  # ZooKeeper connection errors from kazoo
                log.exception("offset flush failed, will retry")

    # -- pings (seed section 3) -----------------------------------------------------------------

    def _ping_loop(self) -> None:
        while not self.deposed:
            now = self.clock()
            for member in self.schedule.due(now):
                if not self.active:
                    continue  # suspended: let the members' leases run out
                link: MemberLink = member.connection
                if link.lock.acquire(blocking=False):  # 2.2: held by a rebalance -> skip
                    gevent.spawn(self._ping, member)
            next_due = self.schedule.next_due()
            gevent.sleep(0.05 if next_due is None else min(max(next_due - self.clock(), 0.005), 0.25))

    def _ping(self, member: Member) -> None:
        link: MemberLink = member.connection
        group = self.groups.get(member.group)
        try:
            if group is None:
                return
            answer = self._send_request(
                member,
                wire.PingRequest(num_retries=0, coordinator_epoch=self.epoch, generation=group.generation),
                member.session_timeout,
            )
        except (Suspended, Deposed):
            link.lock.release()  # nothing was sent
            return
        except (RebalanceAborted, ChannelClosed, wire.WireError) as exc:
            link.lock.release()
            self.remove_member(member, f"no answer to ping within its session timeout ({exc})")
            return
        link.lock.release()
        if not isinstance(answer, wire.PingResponse):
            self.remove_member(member, f"answered a ping with {type(answer).__name__}")
            return
        if answer.offsets is not None:
            self._accept_offsets(group, member, wire.offsets_of(answer.offsets))
        idle_ms = answer.last_poll_ms_ago
        if idle_ms < 0:  # never polled: count from its registration
            idle_ms = int((self.clock() - member.registered_at) * 1000)
        if idle_ms > member.max_poll_interval_ms:
            # Alive but not consuming (seed 004's max.poll.interval.ms): its
            # partitions go to someone who is. It is told why, so that it
            # rejoins only once its application polls again.
            why = f"has not polled for {idle_ms} ms (max poll interval {member.max_poll_interval_ms} ms)"
            try:
                link.channel.send(wire.ErrorResponse(error_code=wire.ErrorCode.MAX_POLL_INTERVAL_EXCEEDED,
                                                     message=f"member {member.member_id} {why}"))
            except ChannelClosed:
                pass
            self.remove_member(member, why)

    # -- introspection ----------------------------------------------------------------------------

    def describe_groups(self) -> dict:
        return {
            name: {
                "generation": g.generation,
                "phase": g.phase.value,
                "members": {m.member_id: sorted(m.running) for m in g.members.values()},
                "failures": g.failures,
                "last_error": g.last_error,
            }
            for name, g in sorted(self.groups.items())
        }
