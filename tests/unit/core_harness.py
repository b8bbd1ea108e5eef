"""A manual clock, keyed fake timers and an in-memory ZooKeeper around CoordinatorCore.

Time moves only in ``advance``; timers fire in order of their time. ZooKeeper
operations wait in ``operations`` until the test completes them, one by one
(``complete``) or all (``settle``, which applies them to ``zk``); the
office's round trips succeed as time moves unless ``prove_office`` is False
(ZooKeeper silent to the coordinator while its connection looks fine). Members are
driven by hand (``answer``) or obey whatever is sent to them (``obey``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Optional

from zkcoord.security.principal import ANONYMOUS, Principal
from zkcoord import wire
from zkcoord.coordinator import actions
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.core import CoordinatorCore, CoreMetrics
from zkcoord.coordinator.lease import incarnation_proof
from zkcoord.records import LogEnd
from zkcoord.zk import layout

T_MS = 3000  # members' session timeout
MARGIN_MS = 200
T, MARGIN = T_MS / 1000.0, MARGIN_MS / 1000.0
# After a takeover, what a persisted member ran (its lease T) stays its own
# until it has had the time to come back: T more, and a member's retry.
TAKEOVER = T + MARGIN + T + wire.MEMBER_RETRY_MAX_S
P = [("t", i) for i in range(4)]  # the partitions of topic t, as the harness makes it by default
# What a member answers (a Ping, a Stop, a Start); everything else it is sent is an answer itself.
REQUESTS = (wire.PingRequest, wire.StopRequest, wire.StartRequest)
ZK_SESSION_MS = 6000  # the coordinator's ZooKeeper session: its office lasts 4 s from a round trip
# A new group's first round after the plain debounce, as every later one:
# the initial delay has tests of its own (test_coordinator_core.py).
CONFIG = CoordinatorConfig(lease_margin_ms=MARGIN_MS, rebalance_delay_ms=100, rebalance_timeout_ms=2000,
                           rebalance_backoff_ms=100, offset_flush_interval_ms=1000, initial_rebalance_delay_ms=0,
                           lag_refresh_ms=0)  # the lag's own questions have a test of their own


@dataclass
class FakeZooKeeper:
    """What the coordinator wrote, as ZooKeeper would hold it."""

    owners: dict = field(default_factory=dict)  # group -> {tp: member}
    offsets: dict = field(default_factory=lambda: defaultdict(dict))  # group -> {tp: offset}
    states: dict = field(default_factory=dict)  # group -> GroupState
    failures: dict = field(default_factory=dict)
    writes: list = field(default_factory=list)  # every write, in order
    # group -> its rebalance history, as its node holds it: apart from
    # ``writes``, which the tests of the decisions count.
    histories: dict = field(default_factory=dict)
    # The brokers' log ends, which ReadLogEnds asks for: by partition (an
    # offset, or a LogEnd with its leader's epoch), else ``default_log_end``
    # (None: its leader does not answer).
    log_ends: dict = field(default_factory=dict)
    default_log_end: Optional[int] = 1_000_000
    # While set, every write fails with it, as ZooKeeper refuses them all
    # (NoAuth after an ACL mistake, a quota); reads and the office's round
    # trips still succeed.
    refuse_writes: Optional[BaseException] = None
    # The writes refused while ``refuse_writes`` is set (None: all of them).
    refused_kinds: Optional[tuple[type, ...]] = None

    def refusal(self, op) -> Optional[BaseException]:
        """The error ZooKeeper answers ``op`` with, if any."""
        reads = (actions.ProveOffice, actions.ReadLogEnds, actions.ReadOwners, actions.ReadOffsets)
        if isinstance(op, reads) or (self.refused_kinds is not None and not isinstance(op, self.refused_kinds)):
            return None
        return self.refuse_writes

    def answer(self, op) -> tuple[object, Optional[BaseException]]:
        """ZooKeeper's answer to ``op``: its result and None, or None and the error."""
        error = self.refusal(op)
        return (None, error) if error is not None else (self.apply(op), None)

    def apply(self, op):
        if isinstance(op, actions.ProveOffice):
            return None
        if isinstance(op, actions.ReadLogEnds):
            ends = {tp: self.log_ends.get(tp, self.default_log_end) for tp in op.partitions}
            return {tp: end if isinstance(end, LogEnd) else LogEnd(end) for tp, end in ends.items() if end is not None}
        if isinstance(op, actions.ReadOwners):
            return dict(self.owners.get(op.group, {}))
        if isinstance(op, actions.ReadOffsets):
            known = self.offsets[op.group]
            return {tp: known[tp] for tp in (known if op.partitions is None else op.partitions) if tp in known}
        if isinstance(op, actions.WriteRebalanceHistory):
            self.histories[op.group] = layout.kept(self.histories.get(op.group, []), op.records, op.rounds)
            return None
        self.writes.append(op)
        if isinstance(op, actions.WriteGroupState):
            self.states[op.group] = op.state
        elif isinstance(op, actions.WriteOffsets):
            for tp in op.offsets:
                assert (tp in self.offsets[op.group]) == (tp in op.existing), f"create/set mismatch for {tp}"
            self.offsets[op.group].update(op.offsets)
        elif isinstance(op, actions.WriteOwners):
            assert self.owners.get(op.group, {}) == dict(op.previous), "owners written from a stale view"
            self.owners[op.group] = dict(op.owners)
        elif isinstance(op, actions.WriteGroupFailure):
            self.failures[op.group] = op.failure
        elif isinstance(op, actions.ForgetGroup):
            assert op.offsets or not self.offsets.get(op.group), f"forgetting {op.group}, which has offsets"
            for held in (self.states, self.failures, self.owners, self.offsets):
                held.pop(op.group, None)
        return None


def carry_out(action, sent: dict, closed: set, timers: dict) -> bool:
    """Carry out a Send, a Close or a timer as the executor would, into
    ``sent`` (conn -> [(message, correlation id)]), ``closed`` and ``timers``;
    False for any other action (an operation)."""
    if isinstance(action, actions.Send):
        sent[action.conn].append((action.message, action.correlation_id))
    elif isinstance(action, actions.Close):
        closed.add(action.conn)
    elif isinstance(action, actions.SetTimer):
        timers[action.key] = action.at
    elif isinstance(action, actions.CancelTimer):
        timers.pop(action.key, None)
    else:
        return False
    return True


class Recorded(CoreMetrics):
    """Every report of the core, counted."""

    def __init__(self):
        self.counts = Counter()
        self.rebalances = []
        self.flushes = []

    def ping_sent(self):
        self.counts["ping"] += 1

    def member_expired(self, reason):
        self.counts[reason] += 1

    def rebalanced(self, report):
        self.rebalances.append(report)

    def rebalance_failed(self):
        self.counts["rebalance_failed"] += 1

    def offsets_flushed(self, seconds, failed):
        self.flushes.append((seconds, failed))


def incarnation_of(member_id: str) -> str:
    """The incarnation secret the harness's member ``member_id`` registers with by default."""
    return f"{member_id}'s incarnation"


def proofs(*member_ids: str, principal: Principal = ANONYMOUS) -> dict:
    """What a persisted state holds of those members' default incarnations."""
    return {m: incarnation_proof(incarnation_of(m), principal) for m in member_ids}


class CoreHarness:
    """A CoordinatorCore with this module's clock, timers, ZooKeeper and members around it."""

    def __init__(self, config: CoordinatorConfig = CONFIG, epoch: int = 1, states=None,
                 zk: Optional[FakeZooKeeper] = None, partitions=None):
        self.now = 0.0
        self.core = CoordinatorCore(config, epoch, ZK_SESSION_MS)
        self.zk = zk or FakeZooKeeper()
        self.timers: dict = {}
        self.sent: dict = defaultdict(list)  # conn -> [(message, correlation_id)]
        self.closed: set = set()
        self.operations: dict = {}  # token -> operation not completed yet
        self._answered: dict = {}  # conn -> correlation ids it answered
        self._settled: dict = {}  # conn -> how many of its first frames are answered or need no answer
        self.log: list = []  # (time, conn, message) of every frame sent
        self.prove_office = True
        # The brokers answer ReadLogEnds at once (from zk.log_ends); if
        # False, the question waits in ``operations`` like ZooKeeper's.
        self.brokers_answer = True
        self.apply(self.core.load(states or {}, self.now, self.now))
        self.apply(self.core.start(self.now))
        for topic, count in (partitions or {"t": 4}).items():
            self.apply(self.core.partitions_changed(topic, count, self.now))

    # -- the executor's part -------------------------------------------------------------------

    def apply(self, todo: list) -> None:
        for action in todo:
            if carry_out(action, self.sent, self.closed, self.timers):
                if isinstance(action, actions.Send):
                    self.log.append((self.now, action.conn, action.message))
            elif isinstance(action, actions.BrokerOperation) and self.brokers_answer:
                self.apply(self.core.done(action.token, self.now, self.zk.apply(action), None))
            elif isinstance(action, actions.ZooKeeperOperation + actions.BrokerOperation):
                self.operations[action.token] = action
            else:
                raise AssertionError(f"unknown action {action}")

    def advance(self, seconds: float, serve: tuple = (), settle: bool = True) -> None:
        """Move the clock, firing timers in order; after each step, the
        members in ``serve`` obey what they were sent and (``settle``) ZooKeeper answers."""
        end = self.now + seconds
        while True:
            self._react(serve, settle)
            due = [(at, repr(key), key) for key, at in self.timers.items() if at <= end]
            if not due:
                break
            at, _, key = min(due)
            self.now = max(self.now, at)
            del self.timers[key]
            self.apply(self.core.timer_fired(key, self.now))
        self.now = end
        self._react(serve, settle)

    def _react(self, serve, settle) -> None:
        for _ in range(100):
            progressed = any([self.obey(conn) for conn in serve])
            if self.prove_office and not settle:
                for token in [t for t, op in self.operations.items() if isinstance(op, actions.ProveOffice)]:
                    self.apply(self.core.done(token, self.now, self.zk.apply(self.operations.pop(token)), None))
                    progressed = True
            if settle and any(self._answerable(op) for op in self.operations.values()):
                self.settle()
                progressed = True
            if not progressed:
                return
        raise AssertionError("the core and its members never came to rest")

    def _answerable(self, op) -> bool:
        """Does ZooKeeper answer ``op`` (anything but the office's round trips, unless they go through)?"""
        return self.prove_office or not isinstance(op, actions.ProveOffice)

    def complete(self, operation_type=None, result=None, error=None):
        """Complete the oldest pending operation (of ``operation_type``) as told."""
        token = min(t for t, op in self.operations.items() if operation_type is None or isinstance(op, operation_type))
        op = self.operations.pop(token)
        self.apply(self.core.done(token, self.now, result, error))
        return op

    def settle(self) -> None:
        """Let ZooKeeper answer everything pending, as the fake holds it."""
        while True:
            tokens = [t for t, op in self.operations.items() if self._answerable(op)]
            if not tokens:
                return
            token = min(tokens)
            result, error = self.zk.answer(self.operations.pop(token))
            self.apply(self.core.done(token, self.now, result, error))

    # -- members ----------------------------------------------------------------------------------

    def register(self, conn, member_id: str, group: str = "g", topics=("t",), is_static: bool = False,
                 offsets=(), session_timeout_ms: int = T_MS, principal: Principal = ANONYMOUS,
                 incarnation: Optional[str] = None, host: str = "", **kwargs) -> wire.Message:
        """Register ``member_id`` on ``conn`` (connected from ``host``), with
        its default incarnation (incarnation_of) unless told otherwise: the
        same process throughout."""
        request = wire.RegisterConsumerRequest(
            group_id=group, consumer_id=member_id, topics=tuple(topics), is_static=is_static,
            session_timeout_ms=session_timeout_ms, offsets=tuple(offsets),
            incarnation=incarnation_of(member_id) if incarnation is None else incarnation, **kwargs)
        self.apply(self.core.register(conn, request, 99, self.now, host=host, principal=principal))
        return request

    def unanswered(self, conn) -> list:
        """Requests sent to ``conn`` that it has not answered, oldest first."""
        answered = self._answered.setdefault(conn, set())
        sent = self.sent[conn]
        # Skip the frames known to need no answer now, so that an hour of
        # pings is not read again at every step.
        start = self._settled.get(conn, 0)
        while start < len(sent) and (sent[start][1] in answered or not isinstance(sent[start][0], REQUESTS)):
            start += 1
        self._settled[conn] = start
        return [(m, c) for m, c in sent[start:] if c not in answered and isinstance(m, REQUESTS)]

    def answer(self, conn, message: wire.Message, correlation_id: Optional[int] = None) -> None:
        """Deliver ``message`` from ``conn`` (by default, answering its oldest unanswered request)."""
        if correlation_id is None:
            correlation_id = self.unanswered(conn)[0][1]
        self._answered.setdefault(conn, set()).add(correlation_id)
        self.apply(self.core.received(conn, message, correlation_id, self.now))

    def obey(self, conn, offsets: Optional[dict] = None) -> bool:
        """``conn`` answers every request it holds as a healthy member would;
        a Stop reports ``offsets`` (default: offset 10 per partition)."""
        done = False
        while conn not in self.closed and self.unanswered(conn):
            request, correlation_id = self.unanswered(conn)[0]
            if isinstance(request, wire.PingRequest):
                reply = wire.PingResponse(last_poll_ms_ago=0)
            elif isinstance(request, wire.StopRequest):
                stopped = {(tp.topic, tp.partition) for tp in request.partitions}
                reply = wire.StopResponse(offsets=wire.offset_entries(
                    {tp: (offsets or {}).get(tp, 10) for tp in stopped}))
            else:
                reply = wire.RestartFetcherResponse()
            self.answer(conn, reply, correlation_id)
            done = True
        return done

    def requests(self, conn, kind) -> list:
        return [m for m, _ in self.sent[conn] if isinstance(m, kind)]

    def started(self, conn) -> set:
        """Partitions in the Starts ``conn`` was sent."""
        return {(p.topic, p.partition) for m in self.requests(conn, wire.StartRequest) for p in m.partitions}

    def last_request_at(self, conn) -> float:
        return max(t for t, c, m in self.log
                   if c == conn and isinstance(m, (wire.PingRequest, wire.StopRequest, wire.StartRequest)))

    def first_start_elsewhere(self, partitions, conn, after: float = 0.0) -> Optional[float]:
        """When a Start holding any of ``partitions`` first went to a connection other than ``conn``."""
        times = [t for t, c, m in self.log if c != conn and t >= after and isinstance(m, wire.StartRequest)
                 and {(p.topic, p.partition) for p in m.partitions} & set(partitions)]
        return min(times, default=None)

    def running(self, member_id: str, group: str = "g") -> frozenset:
        return self.core.groups[group].members[member_id].running

    def stable(self, members, serve=None, seconds: float = 1.0) -> None:
        """Let the group settle with every one of ``members`` (conns) obeying."""
        self.advance(seconds, serve=tuple(serve or members))
