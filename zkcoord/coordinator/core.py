"""The coordinator's decisions, without I/O (seed 001 sections 3 to 7).

:class:`CoordinatorCore` owns the groups, their members and rebalance rounds,
the ping schedule, the lease fences and the offsets waiting to be written.
Each public handler takes one event (a registration, a frame, a connection
closed, a timer, the end of a ZooKeeper operation, a topic change, the
ZooKeeper session's state) and the time, changes the state, and returns the
actions for the executor to carry out (actions.py). It never blocks, never
reads a clock and never touches a socket or ZooKeeper, so every decision can
be driven interleaving by interleaving with a manual clock (the unit tests
do; runtime.py does it on gevent).

The rules it keeps (docs/DESIGN.md):
- every request carries the coordinator epoch and the group generation;
- every request to a member is dated (``last_sent``) before it leaves; a
  member dropped without acknowledging that it stopped leaves what it may run
  fenced until its lease has surely ended, on every path (lease.py);
- within a round, every Stop is acknowledged and the offsets it reports are
  written before any Start goes out, and a round ends only once every
  request it sent has been answered or its member dropped: nothing of a
  round runs on into the next;
- while the ZooKeeper connection is suspended nothing is sent, started or
  written; answers are still taken;
- a request goes out only while the coordinator's own office is proven: within
  two thirds of the ZooKeeper session timeout of the start of a fenced round
  trip that succeeded (lease.py's ``office_end``), so none leaves after a
  successor may have been elected;
- the state (ACTIVE, SUSPENDED, DEPOSED) moves only through ``_become``.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import logging
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Hashable, Mapping, Optional

from zkcoord import limits, wire
from zkcoord.coordinator.actions import (
    CancelTimer, Close, Deposed, ForgetGroup, ProveOffice, ReadLogEnds, ReadOffsets, ReadOwners, Send, SetTimer,
    WriteGroupFailure, WriteGroupState, WriteOffsets, WriteOwners,
)
from zkcoord.coordinator.assignors import NoCommonStrategyError, choose_strategy
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.group import UNKNOWN_FAILURE, Group, GroupPhase, IllegalTransition, Member
from zkcoord.coordinator.lease import OFFICE_RENEWAL_SHARE, incarnation_proof, lease_end, office_end
from zkcoord.coordinator.planner import (
    HandoffPlan, Subscription, owners_of, plan_handoff, rebalance_reason, restart_partitions, target_assignment,
)
from zkcoord.coordinator.schedule import PingSchedule
from zkcoord.errors import ZkcoordError, describe
from zkcoord.patterns import PatternError, check_pattern
from zkcoord.records import TopicPartition
from zkcoord.security.principal import ANONYMOUS, Principal
from zkcoord.zk import layout

log = logging.getLogger(__name__)

# Timer keys: ("answers",), ("rebalance", group), ("static", conn),
# ("ping",), ("flush",), ("office",), ("second-proof",), ("forget", group).
PING_TIMER = ("ping",)
# One timer for every request's deadline: at the earliest, and at most once
# a tick; an answered request's deadline is skipped when it comes (thousands
# of pings a second would otherwise set and cancel a timer each). A member
# that does not answer is dropped up to a tick late: its lease, which the
# fences go by, runs from when the request was sent.
ANSWERS_TIMER = ("answers",)
# Members whose ping falls due within this of the one due now are pinged
# together: a tick of the ping timer instead of one per member.
PING_TICK_S = 0.05
FLUSH_TIMER = ("flush",)
OFFICE_TIMER = ("office",)
# After a lapse, the second office round trip (the first does not bring the office back).
SECOND_PROOF_TIMER = ("second-proof",)
# The least wait before a failed round is tried again.
MIN_RETRY_BACKOFF_MS = 100
# A group due to be forgotten but busy (a flush, a round, a fence) is looked
# at again after this, or its retention if shorter.
FORGET_RETRY_S = 60.0


class CoordinatorState(enum.Enum):
    """LOADING: elected, reading what its predecessor left: it admits nobody
    and starts no round (nothing it decides may ignore those fences).
    ACTIVE: in office with a working ZooKeeper connection, the office proven
    by a recent round trip.
    SUSPENDED: the connection is suspended, or the office is not proven
    (no round trip succeeded lately: the session may have ended unnoticed):
    nothing is sent (so the members' leases run out), started or written;
    answers are still taken.
    DEPOSED: out of office (a newer epoch wrote, the session ended, or the
    server resigned): it does nothing more."""

    LOADING = "loading"
    ACTIVE = "active"
    SUSPENDED = "suspended"
    DEPOSED = "deposed"


_STATE_MOVES = {
    CoordinatorState.LOADING: {CoordinatorState.ACTIVE, CoordinatorState.SUSPENDED, CoordinatorState.DEPOSED},
    CoordinatorState.ACTIVE: {CoordinatorState.SUSPENDED, CoordinatorState.DEPOSED},
    CoordinatorState.SUSPENDED: {CoordinatorState.ACTIVE, CoordinatorState.DEPOSED},
    CoordinatorState.DEPOSED: set(),
}


class Suspended(ZkcoordError):
    """The ZooKeeper connection is suspended: the coordinator writes nothing."""

    retriable = True


@dataclass(frozen=True)
class RebalanceReport:
    """The last finished rebalance, for logs, benchmarks and tests."""

    group: str
    generation: int
    paused: int
    partitions: int
    seconds: float


class RoundPhase(enum.Enum):
    """Where a rebalance round is: READING (owners or committed offsets from
    ZooKeeper), PERSISTING (the new generation's state), STOPPING (waiting
    for Stop answers), FLUSHING (their offsets), STARTING (waiting for Start
    answers), RECORDING (the owners)."""

    READING = "reading"
    PERSISTING = "persisting"
    STOPPING = "stopping"
    FLUSHING = "flushing"
    STARTING = "starting"
    RECORDING = "recording"


# Why a member was dropped without leaving (CoreMetrics.member_expired).
EXPIRED_NO_ANSWER = "no_answer"  # a request went unanswered within its timeout
EXPIRED_MAX_POLL = "max_poll_interval"  # alive, but its application stopped polling
EXPIRED_STATIC = "static_timeout"  # a static member did not come back within its session timeout


class CoreMetrics:
    """What the core counts as it decides, for whoever watches it (Kafka's
    GroupCoordinatorMetricsShard). These do nothing; the server's metrics
    (zkcoord/metrics/families.py) count. Called on hot paths (a ping each):
    an implementation only increments."""

    def ping_sent(self) -> None:
        pass

    def member_expired(self, reason: str) -> None:
        pass

    def rebalanced(self, report: RebalanceReport) -> None:
        pass

    def rebalance_failed(self) -> None:
        pass

    def offsets_flushed(self, seconds: float, failed: bool) -> None:
        pass


NO_METRICS = CoreMetrics()


@dataclass(frozen=True)
class Census:
    """How many groups are in each phase and members in each state, now
    (what the metrics endpoint reports at each scrape). A member is
    registering (its handover being written), active, leaving (its leave
    being written) or away (a static member disconnected, waiting for it)."""

    groups: Mapping[str, int]
    members: Mapping[str, int]


MEMBER_STATES = ("registering", "active", "leaving", "away")


@dataclass(eq=False)
class Round:
    """One rebalance of one group, from its plan to its owners written."""

    started: float
    phase: RoundPhase = RoundPhase.READING
    generation: int = 0
    target: Mapping[str, frozenset[TopicPartition]] = field(default_factory=dict)
    plan: Optional[HandoffPlan] = None
    waiting: set[str] = field(default_factory=set)  # members whose answer this phase awaits
    sending: bool = False  # requests are going out: answers to them are not counted yet
    failure: Optional[str] = None  # why it cannot finish; it still waits for its answers
    persisted_members: frozenset[str] = frozenset()  # the members its state names
    reset: Optional[OffsetReset] = None  # an operator's forced reset it carries out, not yet answered


@dataclass(eq=False)
class Request:
    """A request to a member: what to do with its answer, or with its failure
    (no answer, the member dropped, the coordinator suspended before it left)."""

    message: wire.Message
    timeout: float
    on_answer: Callable[[Member, wire.Message, float], None]
    on_failure: Callable[[Member, str, float], None]
    correlation_id: int = 0


@dataclass(eq=False)
class _Flush:
    """The offset write in flight for a group: who waits for it, and who
    asked after it began (they wait for the next one)."""

    waiters: list = field(default_factory=list)
    later: list = field(default_factory=list)
    again: bool = False  # asked for after it began: write once more when it ends


@dataclass(eq=False)
class OffsetReset:
    """An operator's forced reset of a group with members, waiting for the
    round that carries it out: between its Stops and its Starts, ``offsets``
    replace what the Stops reported, and once they are written the operator
    is answered (``answer(error, now)``) and the owners start from them."""

    offsets: Mapping[TopicPartition, int]
    answer: Callable
    conn: Hashable


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


def beyond_log_end(tp: TopicPartition, offset: int, log_end: Optional[int]) -> Optional[str]:
    """Why ``offset`` may not be committed for ``tp`` given its log end
    (None: not learnt), or None if it may. An offset is the next record to
    consume, so the log end itself is the highest allowed: committing more
    would make the group skip records not yet written, for good."""
    if log_end is None:
        return (f"offset {offset} for {tp[0]}-{tp[1]} could not be checked: the partition's leader did not say "
                "where its log ends")
    if offset > log_end:
        return f"offset {offset} for {tp[0]}-{tp[1]} is beyond the partition's log end {log_end}"
    return None


@dataclass(frozen=True)
class KnownLogEnd:
    """A partition's log end as last learnt: the offset, the epoch of the
    leader that said it (-1: not said), and the question it answered."""

    offset: int
    leader_epoch: int
    question: int

    def older_than(self, leader_epoch: int, question: int) -> bool:
        """Whether an answer from a leader of ``leader_epoch`` to question
        ``question`` is newer: a later leader's is, whatever it says (the log
        may have lost its tail with the leadership); within one epoch, or
        where either is not said, the answer to the later question is."""
        if leader_epoch >= 0 and self.leader_epoch >= 0 and leader_epoch != self.leader_epoch:
            return leader_epoch > self.leader_epoch
        return question > self.question


@dataclass(frozen=True)
class LogEndQuestion:
    """A question to the leaders (numbered in the order asked), with the
    topics' ids when it was asked: an answer about a topic deleted (and
    maybe created again) since says nothing of the topic there is now."""

    number: int
    topic_ids: Mapping[str, Optional[str]]


def _ignore(*_args) -> None:
    pass


class CoordinatorCore:
    def __init__(self, config: CoordinatorConfig, epoch: int, zk_session_timeout_ms: int,
                 metrics: CoreMetrics = NO_METRICS):
        """``zk_session_timeout_ms``: the timeout ZooKeeper granted our session
        (negotiated, not requested: the office is dated from it, and from
        any smaller one granted later, session_resumed)."""
        self.config = config
        self.metrics = metrics
        self.epoch = epoch
        self.zk_session_timeout_ms = zk_session_timeout_ms
        self.state = CoordinatorState.LOADING
        self._connected = True  # the ZooKeeper connection, as last reported
        self.office_until = float("-inf")  # requests go out only before this
        self._proving: Optional[float] = None  # when the office round trip in flight began
        self._proof_wanted = False  # another round trip was due while that one was in flight
        self._proven_at = float("-inf")  # when the latest round trip that succeeded began
        # After a lapse, the first round trip that succeeded (began, ended):
        # the office comes back only with a second one begun S/4 after it ended.
        self._first_after_lapse: Optional[tuple[float, float]] = None
        # A round trip begun before this proves nothing: the machine was seen
        # paused then, for longer than the lease clock counted (machine_paused).
        self._void_before = float("-inf")
        self.groups: dict[str, Group] = {}
        self.partitions: dict[str, int] = {}  # topic -> partition count, kept by the topic watches
        self.schedule = PingSchedule()
        self.pending_offsets: dict[str, dict[TopicPartition, int]] = {}
        # Committed offsets as written by this coordinator or read once (it is
        # the only writer, so they stay true), and partitions known to have none.
        self.committed: dict[str, dict[TopicPartition, int]] = {}
        self._no_offset: dict[str, set[TopicPartition]] = {}
        # The log end learnt last of each partition (asked of its leader):
        # an offset at or below it is committed without asking again.
        self.log_ends: dict[TopicPartition, KnownLogEnd] = {}
        self.topic_ids: dict[str, Optional[str]] = {}  # topic -> its id in ZooKeeper (None: it has none)
        self._log_end_questions = itertools.count(1)
        self._reporters: dict[str, dict[TopicPartition, Member]] = {}  # who reported each pending offset
        self.last_rebalance: Optional[RebalanceReport] = None
        self._started_at = float("inf")  # when it started: load() and start() make it act
        self._members: dict[Hashable, Member] = {}  # by connection
        self._registering: dict[Hashable, Member] = {}  # waiting for their handover to be written
        self._away: dict[Hashable, Member] = {}  # static members gone, by their old connection
        self._rounds: dict[str, Round] = {}
        self._rebalance_due: dict[str, float] = {}
        self._flushes: dict[str, _Flush] = {}
        self._operations: dict[int, Callable] = {}
        self._resets: dict[str, OffsetReset] = {}  # forced resets waiting for their round, by group
        self._next_token = 0
        self._ping_at: Optional[float] = None
        self._deadlines: list[tuple[float, int, Hashable, int]] = []  # (at, n, conn, correlation id), a heap
        self._deadline_numbers = itertools.count()  # ties broken in order, whatever conn is
        self._answers_at: Optional[float] = None  # when ANSWERS_TIMER is set for
        self._out: list = []

    # -- the state machine ---------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self.state is CoordinatorState.ACTIVE

    @property
    def deposed(self) -> bool:
        return self.state is CoordinatorState.DEPOSED

    def _become(self, state: CoordinatorState) -> None:
        if state is self.state:
            return
        if state not in _STATE_MOVES[self.state]:
            raise IllegalTransition(f"coordinator epoch {self.epoch}: {self.state.value} -> {state.value} "
                                    "is not allowed")
        log.info("coordinator epoch %d: %s -> %s", self.epoch, self.state.value, state.value)
        self.state = state

    def _take(self) -> list:
        out, self._out = self._out, []
        return out

    def _emit(self, action) -> None:
        self._out.append(action)

    # -- events: lifecycle and ZooKeeper -----------------------------------------------------

    def load(self, states: Mapping[str, Optional[layout.GroupState]], proven_at: float, now: float) -> list:
        """Groups a predecessor left in ZooKeeper (None: a state node that could
        not be read). Their generation continues, and every partition their
        members ran or were given stays fenced until those members come back
        (proving their incarnation) or their lease has run out: our
        predecessor sent nothing after its session ended, which was before
        now. A state that cannot be read (corrupt, or written by a newer
        version) says neither who runs what nor for how long: the whole group
        is fenced for the longest lease a member may hold. ``proven_at``:
        when the office round trip that preceded the reads began (it proves
        nothing if a pause was seen since, machine_paused)."""
        if proven_at >= self._void_before:
            self._office_proven_from(proven_at)
        longest_lease_ms = self.config.max_session_timeout_ms
        for name, state in states.items():
            group = self._group(name)
            group.state_exists = True
            if state is None:
                group.persisted_members = None  # rewritten by the group's next round
                until = lease_end(now, longest_lease_ms, self.config.lease_margin_ms)
                group.fences.fence_whole_group(until)
                self._schedule_round(group, until)
                log.warning("%s state unreadable: nobody is started on any of its partitions for %d ms (the "
                            "longest session timeout allowed), in case its members still run them",
                            group.describe(), longest_lease_ms)
                continue
            group.generation = state.generation
            group.strategy = state.strategy
            group.persisted_members = frozenset(state.assignment) | frozenset(state.running)
            # A state without a lease (written by an older version) fences
            # for the longest any member may hold, never for the margin alone.
            lease_ms = state.lease_ms or longest_lease_ms
            # Held past the lease for the members, alive, coming back: one may
            # first wait out its registration at the predecessor (a paused
            # one still accepts connections; a member waits a session timeout
            # for an answer), then retry. Those that come back lift their own
            # fences; only a member that does not keeps the group waiting.
            until = lease_end(now, lease_ms, self.config.lease_margin_ms) + lease_ms / 1000.0 \
                + wire.MEMBER_RETRY_MAX_S
            for holders in (state.assignment, state.running):
                for member_id, partitions in holders.items():
                    group.fences.fence(member_id, partitions, until, state.proofs.get(member_id, ""))
            if group.persisted_members:
                # If none of them comes back, a round once their leases have
                # ended writes the group empty; one that comes back asks for
                # an earlier round.
                self._schedule_round(group, until)
            else:
                self._empty(group, now)  # its retention runs from now: when it was last seen empty is not kept
            log.info("%s resumed; %d member(s) may still run partitions for up to %d ms",
                     group.describe(), len(group.fences.holders()), lease_ms)
        return self._take()

    def start(self, now: float) -> list:
        """Loaded: admit members, run rounds."""
        if self.state is CoordinatorState.LOADING:
            self._become(CoordinatorState.ACTIVE if self._may_act(now) else CoordinatorState.SUSPENDED)
            self._emit(SetTimer(FLUSH_TIMER, now + self.config.offset_flush_interval_ms / 1000.0))
            self._office_due(now)  # loading may have taken much of the office proven before it
            self._schedule_pending(now)
            self._started_at = now
            log.info("coordinator epoch %d started", self.epoch)
        return self._take()

    def session_suspended(self, now: float) -> list:
        """The ZooKeeper connection is suspended: send, start and write nothing.
        A round under way ends at its next step; its answers are still taken."""
        self._connected = False
        if self.state is CoordinatorState.ACTIVE:
            log.warning("ZooKeeper connection suspended: coordinator stops pinging, starting and writing")
            self._become(CoordinatorState.SUSPENDED)
        return self._take()

    def session_resumed(self, now: float, granted_ms: Optional[int] = None) -> list:
        """The same session is back: rounds that could not run, run (once the
        office is proven again, if it lapsed meanwhile). ``granted_ms``: the
        session timeout the server it reconnected to granted; one smaller
        than any before dates the office from then on (and at once)."""
        self._connected = True
        if granted_ms is not None and granted_ms < self.zk_session_timeout_ms:
            log.warning("coordinator epoch %d: ZooKeeper now grants the session %d ms (was %d ms): the office "
                        "is dated from the smaller", self.epoch, granted_ms, self.zk_session_timeout_ms)
            self.zk_session_timeout_ms = granted_ms
            # The office rests on the latest proof, now dated by the smaller
            # timeout (and never longer than a pause seen since left it).
            self.office_until = min(self.office_until, office_end(self._proven_at, granted_ms))
        if self.state is not CoordinatorState.LOADING:
            self._prove_office(now)
        self._resume(now)
        return self._take()

    def machine_paused(self, gained_s: float, now: float) -> list:
        """The machine was seen paused for ``gained_s`` more than the lease
        clock counted (a virtual machine held by its hypervisor: the runtime
        compares the wall clock's advance with it, clock.PauseWatch). Our
        ZooKeeper session may have expired meanwhile and a successor been
        elected: the office lapses now, and comes back only as after any lapse,
        on round trips begun from now on. Fences and members' deadlines only
        last longer in real time than the clock says: safe as they are."""
        if not self.deposed:
            log.warning("coordinator epoch %d: the machine was paused %.1fs that the lease clock did not count; "
                        "the office lapses", self.epoch, gained_s)
            self._void_before = now
            self._first_after_lapse = None
            self.office_until = min(self.office_until, now)
            self._check_office(now)
        return self._take()

    # -- the office: a lease on being the coordinator ------------------------------------

    def _may_act(self, now: float) -> bool:
        return self._connected and now < self.office_until

    def _resume(self, now: float) -> None:
        if self.state is CoordinatorState.SUSPENDED and self._may_act(now):
            self._become(CoordinatorState.ACTIVE)
            self._schedule_pending(now)

    def _check_office(self, now: float) -> None:
        """Suspend once the office has lapsed: our session may have expired
        unnoticed (this process paused, say) and a successor been elected."""
        if self.state is CoordinatorState.ACTIVE and now >= self.office_until:
            log.warning("coordinator epoch %d: office lapsed %.1fs ago (no ZooKeeper round trip lately); "
                        "sending nothing until it is proven again", self.epoch, now - self.office_until)
            self._become(CoordinatorState.SUSPENDED)
            self._prove_office(now)

    def _office_due(self, now: float) -> None:
        self._prove_office(now)
        self._emit(SetTimer(OFFICE_TIMER, now + self._renewal_interval()))

    def _prove_office(self, now: float) -> None:
        if self._proving is not None:
            # One round trip at a time; one asked for meanwhile (a renewal
            # due, a lapse) starts as soon as it ends, not at the next renewal.
            self._proof_wanted = True
        elif self._connected and not self.deposed:  # resuming proves it
            self._proving = now
            self._proof_wanted = False
            self._zk(ProveOffice, partial(self._office_proven, now))

    def _office_proven(self, began: float, _result, error, now: float) -> None:
        self._proving = None
        if self._proof_wanted:
            self._prove_office(now)
        if error is not None:
            log.warning("coordinator epoch %d: office round trip failed: %s", self.epoch, describe(error))
            return
        if began < self._void_before:
            return  # begun before a pause was seen: it may have been answered before the pause ended the session
        if began >= self.office_until:
            # The office had lapsed when this round trip began: it may have
            # reached the leader through a follower that passes the session's
            # heartbeat on late, just before the session expires (DESIGN.md).
            # Only a second round trip, begun S/4 after this one ended (half a
            # tick and more), shows that the session outlived it; the office
            # is dated from the first. A first whose office would have run
            # out before this one began belongs to an earlier lapse (the link
            # went dark again before its second): this one is the first after
            # the lapse under way, never paired with that older one.
            first = self._first_after_lapse
            if first is None or began >= office_end(first[0], self.zk_session_timeout_ms):
                self._first_after_lapse = (began, now)
                self._emit(SetTimer(SECOND_PROOF_TIMER, now + self._renewal_interval()))
                log.info("coordinator epoch %d: office round trip after a lapse succeeded; a second one in %.1fs "
                         "brings the office back", self.epoch, self._renewal_interval())
                return
            if began < first[1] + self._renewal_interval():
                return  # begun too soon after the first: the timer asks for the one that counts
            self._first_after_lapse = None
            began = first[0]
        self._office_proven_from(began)
        self._resume(now)

    def _renewal_interval(self) -> float:
        """Seconds between office round trips; also between the two that end a lapse."""
        return self.zk_session_timeout_ms * OFFICE_RENEWAL_SHARE / 1000.0

    def _office_proven_from(self, began: float) -> None:
        self._proven_at = max(self._proven_at, began)
        self.office_until = max(self.office_until, office_end(began, self.zk_session_timeout_ms))

    def _schedule_pending(self, now: float) -> None:
        for group in self.groups.values():
            if group.rebalance_pending:
                self._schedule_round(group, now)

    def done(self, token: int, now: float, result=None, error: Optional[BaseException] = None) -> list:
        """A ZooKeeper operation the core asked for has ended."""
        callback = self._operations.pop(token, None)
        if callback is None or self.deposed:
            return self._take()
        if isinstance(error, Deposed):
            log.error("coordinator epoch %d deposed: %s", self.epoch, error)
            self._become(CoordinatorState.DEPOSED)
            return self._take()
        callback(result, error, now)
        return self._take()

    def partitions_changed(self, topic: str, count: int, now: float, topic_id: Optional[str] = None) -> list:
        """The topic watch saw ``topic`` with ``count`` partitions (0: gone)
        and the topic id ``topic_id`` (None: none)."""
        if self.deposed:
            return self._take()
        # A topic deleted, or created again (a new id, maybe the same count), starts its logs anew.
        recreated = not count or self.topic_ids.get(topic) != topic_id
        for tp in [tp for tp in self.log_ends if tp[0] == topic and (recreated or tp[1] >= count)]:
            del self.log_ends[tp]
        self.topic_ids[topic] = topic_id
        if self.partitions.get(topic) != count:
            self.partitions[topic] = count
            log.info("topic %s has %d partition(s)", topic, count)
            for group in list(self.groups.values()):
                if group.interested_in(topic):
                    self.request_rebalance(group, f"topic {topic} now has {count} partition(s)", now)
        return self._take()

    def flush_all(self, now: float) -> list:
        """Write every pending offset (before stepping down)."""
        self._flush_pending(now)
        return self._take()

    def _flush_pending(self, now: float) -> None:
        if self.active:
            for name in [n for n, pending in self.pending_offsets.items() if pending]:
                self._flush(name, now)

    @property
    def flushing(self) -> bool:
        return bool(self._flushes)

    def settled(self, now: float) -> bool:
        """Whether every group is at rest: active for the longest session
        timeout of its members, none mid-round or waiting for one, none
        waiting out a fence. Handing a slot over costs its groups a takeover's
        fences, and a stock client's old registration at the broker it left
        waits out its session (DESIGN.md); handed over again before that,
        they would pay twice."""
        longest = max((m.session_timeout for g in self.groups.values() for m in g.members.values()), default=0.0)
        return self.active and now - self._started_at >= longest and all(
            group.phase is not GroupPhase.REBALANCING and not group.rebalance_pending
            and group.fences.until(now) is None
            for group in self.groups.values())

    def step_down(self, now: float) -> list:
        """Leave office: close every member's connection and do nothing more."""
        if not self.deposed:
            self._become(CoordinatorState.DEPOSED)
        for conn in list(self._members) + list(self._registering):
            self._emit(Close(conn))
        self._members.clear()
        self._registering.clear()
        return self._take()

    def fail(self, now: float) -> list:
        """A handler raised: a bug. Whatever it had decided is dropped, and the
        coordinator steps down (a successor starts from ZooKeeper, with fences)."""
        self._out.clear()
        return self.step_down(now)

    def _zk(self, make, callback: Callable) -> None:
        """Ask for a ZooKeeper operation ``make(token)``; ``callback(result, error, now)`` takes its end."""
        self._next_token += 1
        self._operations[self._next_token] = callback
        self._emit(make(self._next_token))

    # -- events: timers ----------------------------------------------------------------------

    def timer_fired(self, key: Hashable, now: float) -> list:
        if self.deposed:
            return self._take()
        self._check_office(now)
        kind = key[0]
        if kind == "answers":
            self._answers_due(now)
        elif kind == "rebalance":
            self._rebalance_due.pop(key[1], None)
            group = self.groups.get(key[1])
            if group is not None and key[1] not in self._rounds:
                self._begin_round(group, now)
        elif kind == "static":
            self._static_overdue(key[1], now)
        elif kind == "ping":
            self._ping_due(now)
        elif kind == "flush":
            self._emit(SetTimer(FLUSH_TIMER, now + self.config.offset_flush_interval_ms / 1000.0))
            self._flush_pending(now)
        elif kind == "office":
            self._office_due(now)
        elif kind == "second-proof":
            self._prove_office(now)
        elif kind == "forget":
            self._forget_due(key[1], now)
        return self._take()

    # -- events: members ---------------------------------------------------------------------

    def validate(self, request: wire.RegisterConsumerRequest, principal: Principal = ANONYMOUS) -> None:
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
                check_pattern(request.pattern)
            except PatternError as exc:
                raise wire.InvalidRegistration(str(exc)) from None
        if request.auto_offset_reset not in wire.OFFSET_RESETS:
            raise wire.InvalidRegistration(
                f"auto_offset_reset must be one of {wire.OFFSET_RESETS}, not {request.auto_offset_reset!r}"
            )
        if request.session_timeout_ms < self.config.min_session_timeout_ms:
            raise wire.InvalidSessionTimeout(
                f"session timeout {request.session_timeout_ms} ms is below the minimum "
                f"{self.config.min_session_timeout_ms} ms"
            )
        if request.session_timeout_ms > self.config.max_session_timeout_ms:
            raise wire.InvalidSessionTimeout(
                f"session timeout {request.session_timeout_ms} ms exceeds the maximum "
                f"{self.config.max_session_timeout_ms} ms"
            )
        group = self.groups.get(request.group_id)
        others = list(group.strategy_lists) if group else []  # whether one is common: each list once will do
        try:
            choose_strategy(others + [tuple(request.assignment_strategies)])
        except NoCommonStrategyError as exc:
            raise wire.NoCommonStrategy(str(exc)) from None
        if group is not None and group.forgetting:
            raise wire.CoordinatorNotAvailable(f"group {request.group_id} is being forgotten (it was empty past "
                                               "its retention); try again in a moment")
        existing = group.members.get(request.consumer_id) if group else None
        if existing is not None and existing.is_static and request.is_static and existing.principal != principal:
            raise wire.StaticMemberOwnedByOtherPrincipal(
                f"static consumer id {request.consumer_id} of group {request.group_id} is held by "
                f"{existing.principal}; {principal} may not take it over")
        if existing is not None and not (existing.is_static and request.is_static) \
                and not self._same_incarnation(existing, request, principal):
            # A static member may take its own place back (its old connection
            # is closed and fenced); a dynamic id is unique while it lives,
            # but for the process that holds it, back on a new connection
            # (the old one may be open on our side only).
            raise wire.ConsumerIdInUse(
                f"consumer id {request.consumer_id} is already registered in group {request.group_id}"
            )
        if not self.active:
            raise wire.CoordinatorNotAvailable("the coordinator is suspended: ZooKeeper is unreachable or its "
                                               "office is not proven yet")

    @staticmethod
    def _same_incarnation(existing: Member, request: wire.RegisterConsumerRequest, principal: Principal) -> bool:
        """Is ``request`` the dynamic member ``existing`` back, on a new connection?"""
        return (not existing.is_static and not request.is_static and existing.principal == principal
                and bool(existing.proof) and existing.proof == incarnation_proof(request.incarnation, principal))

    def register(self, conn: Hashable, request: wire.RegisterConsumerRequest, correlation_id: int,
                 now: float, *, host: str = "", client_id: str = "", principal: Principal = ANONYMOUS) -> list:
        """A consumer registers on ``conn``. Offsets it hands over (what it ran
        when its last coordinator went) are written before it is answered.
        ``host`` and ``client_id`` are only shown to operators (the group's state);
        ``principal`` is who the server authenticated it as."""
        try:
            self.validate(request, principal)
        except wire.WireError as exc:
            self._refuse(conn, request, correlation_id, exc)
            return self._take()
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
            connection=conn,
            # Its lease runs from before it sent this registration: earlier than now.
            last_sent=now,
            registered_at=now,
            host=host,
            client_id=client_id,
            principal=principal,
            proof=incarnation_proof(request.incarnation, principal),
        )
        group = self._group(request.group_id)
        try:
            handed_over = self._accept_handover(group, member, request.offsets) if request.offsets else 0
        except wire.RebalanceInProgress as exc:
            self._refuse(conn, request, correlation_id, exc)
            return self._take()
        if handed_over:
            self._registering[conn] = member
            self._flush(group.name, now, [partial(self._handover_written, member, request, correlation_id)])
        else:
            self._admit(group, member, correlation_id, now)
        return self._take()

    def received(self, conn: Hashable, message: wire.Message, correlation_id: int, now: float) -> list:
        """A frame from a registered member."""
        member = self._members.get(conn)
        if member is None or self.deposed:
            return self._take()
        if isinstance(message, wire.LeaveGroupRequest):
            self._leave(member, message, correlation_id, now)
        elif isinstance(message, wire.ErrorResponse):
            log.warning("member %s refused a request: %s", member.member_id, message.message)
            self._disconnected(member, f"it refused a request: {message.message}", now)
        else:
            request: Optional[Request] = member.outstanding
            if request is None or request.correlation_id != correlation_id:
                # Rate-limited: a member (or anyone who registered) could send thousands a second.
                limits.abuse_log.log(limits.UNSOLICITED, logging.WARNING, "member %s sent an unsolicited %s",
                                     member.member_id, type(message).__name__)
            else:
                member.outstanding = None  # its deadline will find it answered
                request.on_answer(member, message, now)
                self._send_queued(member, now)
        return self._take()

    def connection_closed(self, conn: Hashable, now: float) -> list:
        for name, reset in list(self._resets.items()):
            if reset.conn == conn:  # the operator gave up before its round began: it never happens
                del self._resets[name]
                log.info("[group %s] offset reset dropped: the operator's connection closed", name)
        if self._registering.pop(conn, None) is None:
            member = self._members.get(conn)
            if member is not None and not self.deposed:
                self._disconnected(member, "its connection closed", now)
        return self._take()

    def _refuse(self, conn, request, correlation_id: int, exc: wire.WireError) -> None:
        # While suspended every member that tries is refused, thousands a
        # second; the suspension itself is logged once, as a warning.
        level = logging.DEBUG if isinstance(exc, wire.CoordinatorNotAvailable) else logging.INFO
        limits.abuse_log.log(limits.REFUSED_REGISTRATION, level, "refused consumer %s of group %s: %s",
                             request.consumer_id, request.group_id, exc)
        self._emit(Send(conn, wire.RegisterConsumerResponse(error_code=exc.code, error_message=str(exc),
                                                            coordinator_epoch=self.epoch), correlation_id))
        self._emit(Close(conn))

    def _handover_written(self, member: Member, request, correlation_id: int, error, now: float) -> None:
        if self._registering.pop(member.connection, None) is not member:
            return  # its connection closed meanwhile
        group = self._group(member.group)
        if error is not None:  # those offsets stay pending: records are redelivered, never lost
            log.warning("%s handover of member %s not written yet: %s", group.describe(), member.member_id, error)
        try:
            self.validate(request, member.principal)  # things may have changed while the handover was written
        except wire.WireError as exc:
            self._refuse(member.connection, request, correlation_id, exc)
            return
        self._admit(group, member, correlation_id, now)

    def _admit(self, group: Group, member: Member, correlation_id: int, now: float) -> None:
        previous = group.members.get(member.member_id)
        if previous is not None and previous.is_static:  # a static member back; its old connection may be open
            member.assigned = previous.assigned
            self._fence(group, previous, now)  # which may be another process, still running
            self._forget(previous, "its static id registered again", now)
            log.info("%s static member %s is back", group.describe(), member.member_id)
        elif previous is not None:  # the same incarnation (validated), its old connection open on our side only
            member.assigned = previous.assigned
            previous.running = previous.starting = frozenset()  # it stopped everything before it registered
            self._forget(previous, "it registered again on a new connection", now)
            log.info("%s member %s is back on a new connection", group.describe(), member.member_id)
        if not member.is_static and group.fences.proves(member.member_id, member.proof):
            # The process fenced under this id, which stops everything before
            # it registers: what it held is free. Anyone else registering
            # under the id (ids are no secret), or a static id's new process,
            # waits for the fences to run out.
            group.fences.release(member.member_id)
        group.add_member(member)
        self._members[member.connection] = member
        self.schedule.add(member, member.session_timeout / 3, now)
        self._arm_ping()
        self._emit(Send(member.connection, wire.RegisterConsumerResponse(coordinator_epoch=self.epoch),
                        correlation_id))
        log.info("%s member %s registered", group.describe(), member.member_id)
        self.request_rebalance(group, f"member {member.member_id} joined", now, joined=True)

    def _leave(self, member: Member, message: wire.LeaveGroupRequest, correlation_id: int, now: float) -> None:
        """A clean leave: take the final offsets (the member has stopped
        everything), make them durable, and only then answer and let it go."""
        group = self.groups.get(member.group)
        if group is None or group.members.get(member.member_id) is not member or not self.active:
            self._emit(Send(member.connection, wire.LeaveGroupResponse(
                error_code=wire.ErrorCode.COORDINATOR_NOT_AVAILABLE), correlation_id))
            self._disconnected(member, "it left", now)
            return
        self._accept_offsets(group, member, wire.offsets_of(message.offsets), owned=member.may_run)
        member.running = member.starting = frozenset()  # it stopped everything before it asked
        member.leaving = True

        def written(error, now: float) -> None:
            if error is not None:
                log.warning("%s offsets of leaving member %s not written: %s",
                            group.describe(), member.member_id, error)
            code = wire.ErrorCode.NONE if error is None else wire.code_for(error)
            self._emit(Send(member.connection, wire.LeaveGroupResponse(error_code=code), correlation_id))
            self._disconnected(member, "it left", now)

        self._flush(group.name, now, [written])

    def _disconnected(self, member: Member, why: str, now: float) -> None:
        """The member's connection is gone (or going). A dynamic member leaves
        at once; a static one keeps its partitions until its session timeout,
        in case it comes back (seed 004's static membership). Either way the
        member may not have seen the connection close (a reset on our side
        only): what it ran stays fenced until its lease has ended."""
        group = self.groups.get(member.group)
        if not member.is_static or group is None or group.members.get(member.member_id) is not member:
            self._remove(member, why, now)
            return
        if not member.connected:
            return
        self._fence(group, member, now)
        member.running = member.starting = frozenset()
        self._forget(member, why, now)
        self._away[member.connection] = member
        self._emit(SetTimer(("static", member.connection), now + member.session_timeout))
        log.info("%s static member %s disconnected (%s); its partitions wait %d ms for it",
                 group.describe(), member.member_id, why, member.session_timeout_ms)

    def _static_overdue(self, conn: Hashable, now: float) -> None:
        member = self._away.pop(conn, None)
        if member is None:
            return
        group = self.groups.get(member.group)
        if group is not None and group.members.get(member.member_id) is member:
            self.metrics.member_expired(EXPIRED_STATIC)
            self._remove(member, "it did not come back within its session timeout", now)

    def _fence(self, group: Group, member: Member, now: float) -> None:
        """Hold what ``member`` may still fetch until its lease has surely ended."""
        if member.may_run:
            until = lease_end(member.last_sent, member.session_timeout_ms, self.config.lease_margin_ms)
            group.fences.fence(member.member_id, member.may_run, until, member.proof)
            log.info("%s member %s may run %d partition(s) for %.1fs more; fenced",
                     group.describe(), member.member_id, len(member.may_run), until - now)

    def _remove(self, member: Member, why: str, now: float) -> None:
        """Drop a member and rebalance its group; what it may still be
        fetching stays fenced until its lease has ended (lease.py)."""
        group = self.groups.get(member.group)
        current = group is not None and group.members.get(member.member_id) is member
        if current:
            self._fence(group, member, now)
            group.remove_member(member.member_id)
            log.info("%s member %s removed: %s", group.describe(), member.member_id, why)
            # Before its requests fail: the round they belong to then knows
            # that another one follows.
            self.request_rebalance(group, f"member {member.member_id} left", now)
        self._forget(member, why, now)

    def _forget(self, member: Member, why: str, now: float) -> None:
        """Close the member's connection; its requests fail."""
        if self._away.pop(member.connection, None) is not None:
            self._emit(CancelTimer(("static", member.connection)))
        if not member.connected:
            return
        member.connected = False
        self._members.pop(member.connection, None)
        self.schedule.remove(member)
        self._emit(Close(member.connection))
        failed = [r for r in (member.outstanding, member.queued) if r is not None]
        member.outstanding = member.queued = None
        for request in failed:
            request.on_failure(member, why, now)

    # -- requests --------------------------------------------------------------------------------

    def _request(self, member: Member, message: wire.Message, timeout: float,
                 on_answer: Callable, on_failure: Callable, now: float) -> None:
        """Send ``message`` to ``member``, or queue it behind the one request
        it has not answered yet (a ping: seed 001's held channel)."""
        self._dispatch(member, Request(message, timeout, on_answer, on_failure), now)

    def _dispatch(self, member: Member, request: Request, now: float) -> None:
        self._check_office(now)
        if not self.active:  # a request renews the member's lease: none unless in office and connected
            request.on_failure(member, "the coordinator is not active", now)
        elif not member.connected:
            request.on_failure(member, "it is not connected", now)
        elif member.outstanding is not None:
            member.queued = request
        else:
            self._send(member, request, now)

    def _send(self, member: Member, request: Request, now: float) -> None:
        member.last_correlation_id += 1
        request.correlation_id = member.last_correlation_id
        member.outstanding = request
        member.last_sent = now  # before it leaves: the member's lease ends by this + T
        self._emit(Send(member.connection, request.message, request.correlation_id))
        self._set_deadline(now + request.timeout, member.connection, request.correlation_id)

    def _set_deadline(self, at: float, conn: Hashable, correlation_id: int) -> None:
        heapq.heappush(self._deadlines, (at, next(self._deadline_numbers), conn, correlation_id))
        if self._answers_at is None or at < self._answers_at:
            self._answers_at = at
            self._emit(SetTimer(ANSWERS_TIMER, at))

    def _answers_due(self, now: float) -> None:
        self._answers_at = None
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, conn, correlation_id = heapq.heappop(self._deadlines)
            self._answer_overdue(conn, correlation_id, now)
        if self._deadlines:  # most are of requests answered long since: look once a tick at most
            self._answers_at = max(self._deadlines[0][0], now + PING_TICK_S)
            self._emit(SetTimer(ANSWERS_TIMER, self._answers_at))

    def _send_queued(self, member: Member, now: float) -> None:
        request, member.queued = member.queued, None
        if request is not None:
            self._dispatch(member, request, now)

    def _answer_overdue(self, conn: Hashable, correlation_id: int, now: float) -> None:
        member = self._members.get(conn)
        request = member.outstanding if member is not None else None
        if request is not None and request.correlation_id == correlation_id:
            self.metrics.member_expired(EXPIRED_NO_ANSWER)
            self._remove(member, f"no answer to {type(request.message).__name__} within "
                                 f"{request.timeout:.1f}s", now)

    # -- pings (seed section 3) ----------------------------------------------------------------

    def _arm_ping(self) -> None:
        at = self.schedule.next_due()
        if at is not None and at != self._ping_at:
            self._ping_at = at
            self._emit(SetTimer(PING_TIMER, at))

    def _ping_due(self, now: float) -> None:
        self._ping_at = None
        for member in self.schedule.due(now + PING_TICK_S):
            # Suspended: let the leases run out. Busy (2.2): the request out renews it.
            if not self.active or member.outstanding is not None or member.leaving:
                continue
            group = self.groups[member.group]
            self.metrics.ping_sent()
            self._request(member, wire.PingRequest(num_retries=0, coordinator_epoch=self.epoch,
                                                   generation=group.generation),
                          member.session_timeout, self._pinged, _ignore, now)
        self._arm_ping()

    def _pinged(self, member: Member, answer: wire.Message, now: float) -> None:
        group = self.groups[member.group]
        if not isinstance(answer, wire.PingResponse):
            self._remove(member, f"it answered a ping with {type(answer).__name__}", now)
            return
        if answer.offsets is not None:
            self._accept_offsets(group, member, wire.offsets_of(answer.offsets), owned=member.running)
        idle_ms = answer.last_poll_ms_ago
        if idle_ms < 0:  # never polled: count from its registration
            idle_ms = int((now - member.registered_at) * 1000)
        if idle_ms > member.max_poll_interval_ms:
            # Alive but not consuming (seed 004's max.poll.interval.ms): its
            # partitions go to someone who is. It is told why, so that it
            # rejoins only once its application polls again.
            why = f"has not polled for {idle_ms} ms (max poll interval {member.max_poll_interval_ms} ms)"
            self._emit(Send(member.connection, wire.ErrorResponse(
                error_code=wire.ErrorCode.MAX_POLL_INTERVAL_EXCEEDED,
                message=f"member {member.member_id} {why}"), 0))
            self.metrics.member_expired(EXPIRED_MAX_POLL)
            self._remove(member, why, now)

    # -- rebalancing (seed sections 6 and 7) ---------------------------------------------------

    def request_rebalance(self, group: Group, why: str, now: float, joined: bool = False) -> None:
        """Something changed: rebalance ``group`` after the debounce delay.
        Requests made meanwhile join it (seed 001's rebalance bit); one made
        during a round runs once that round has ended. Safe to merge: the
        round that runs next honours every fence set meanwhile.

        A join into a group that never had a round (Kafka's initial
        rebalance delay) postpones its first round instead: to the initial
        delay after this join, but no later than the rebalance timeout after
        the first, so that a crowd joining over a while makes one round
        instead of one per debounce. Safe as any debounce: nobody in the
        group runs anything yet."""
        if self.deposed:
            return
        log.debug("%s rebalance requested: %s", group.describe(), why)
        group.rebalance_pending = True
        group.attempts = 0
        at = now + self.config.rebalance_delay_ms / 1000.0
        if joined and group.generation == 0 and group.phase is GroupPhase.EMPTY \
                and self.config.initial_rebalance_delay_ms:
            if group.forming_since is None:
                group.forming_since = now
            # The cap is applied last: past it, a join must not move the
            # round to its own debounce, or a steady trickle of joins would
            # hold the first round off for as long as it lasts.
            cap = group.forming_since + self.config.rebalance_timeout_ms / 1000.0
            at = min(max(at, now + self.config.initial_rebalance_delay_ms / 1000.0), max(cap, now))
            if at <= cap:
                self._rebalance_due.pop(group.name, None)  # the only round that may move later
        self._schedule_round(group, at)

    def _schedule_round(self, group: Group, at: float) -> None:
        due = self._rebalance_due.get(group.name)
        if due is not None and due <= at:
            return
        self._rebalance_due[group.name] = at
        self._emit(SetTimer(("rebalance", group.name), at))

    def _begin_round(self, group: Group, now: float) -> None:
        if not self.active:
            group.rebalance_pending = True  # runs when the connection is back
            return
        group.rebalance_pending = False  # changes from now on ask for another round
        group.forming_since = None
        if group.recorded_owners is None:  # first round of this group in this epoch
            round_ = self._rounds[group.name] = Round(started=now)
            self._zk(partial(ReadOwners, group=group.name), partial(self._owners_read, group, round_))
            return
        if not group.members and not group.recorded_owners and group.persisted_members == frozenset():
            group.transition(GroupPhase.EMPTY)  # and ZooKeeper says so already
            self._flush(group.name, now)
            self._succeeded(group)
            self._empty(group, now)
            return
        free_at = group.fences.until(now)
        if free_at is not None:
            # Partitions some dropped member may still fetch: nobody is started
            # on anything until its lease has ended (or it registers again).
            log.info("%s waiting %.1fs for the leases of %s", group.describe(), free_at - now,
                     sorted(group.fences.holders()))
            group.rebalance_pending = True
            self._schedule_round(group, free_at)
            return
        subscriptions = group.subscriptions()
        if group.members:  # an empty group keeps the strategy it had
            group.strategy = choose_strategy([m.strategies for m in group.members.values()])
        counts = {t: n for t, n in self.partitions.items() if any(s.matches(t) for s in subscriptions.values())}
        current = {m.member_id: m.assigned for m in group.members.values()}
        target = target_assignment(subscriptions, counts, group.strategy, current)
        running = {m.member_id: m.running for m in group.members.values() if m.connected}
        reset = self._resets.pop(group.name, None)
        reason = (rebalance_reason(target, group.recorded_owners, running) or self._membership_changed(group)
                  or ("an operator resets offsets" if reset is not None else None))
        if reason is None:
            if group.phase is not GroupPhase.STABLE:
                group.transition(GroupPhase.REBALANCING)
                group.transition(GroupPhase.STABLE)
            self._succeeded(group)
            return
        plan = plan_handoff(target, running, eager=self.config.rebalance_protocol == "eager")
        if reset is not None:
            plan = restart_partitions(plan, target, running, frozenset(reset.offsets))
        group.transition(GroupPhase.REBALANCING)
        round_ = self._rounds[group.name] = Round(started=now, phase=RoundPhase.PERSISTING,
                                                  generation=group.generation + 1, target=target, plan=plan,
                                                  reset=reset)
        log.info("%s rebalancing to gen %d (%s, %s): %s; %d partition(s) paused",
                 group.describe(), round_.generation, group.strategy, self.config.rebalance_protocol, reason,
                 len(plan.paused))
        # Persist the new generation, who takes part and who runs what,
        # before anyone is told: a successor fences all of it.
        state = layout.GroupState(
            round_.generation, group.strategy,
            {m: tuple(sorted(tps)) for m, tps in target.items()},
            lease_ms=max((m.session_timeout_ms for m in group.members.values()), default=0),
            running={m.member_id: tuple(sorted(m.may_run)) for m in group.members.values() if m.may_run},
            clients={m.member_id: layout.MemberClient(m.host, m.client_id) for m in group.members.values()
                     if m.host or m.client_id},
            proofs={m.member_id: m.proof for m in group.members.values() if m.proof},
        )
        round_.persisted_members = frozenset(state.assignment) | frozenset(state.running)
        self._zk(partial(WriteGroupState, group=group.name, state=state, exists=group.state_exists),
                 partial(self._state_written, group, round_))

    @staticmethod
    def _membership_changed(group: Group) -> Optional[str]:
        """Why the persisted state must be rewritten although nobody's
        partitions change: it names members that have gone (or not those
        that came), as when the last member leaves, or one that ran nothing."""
        if group.persisted_members is None:
            return "the persisted state is not known"
        gone = sorted(group.persisted_members - set(group.members))
        if gone:
            return f"member(s) {', '.join(gone)} gone"
        came = sorted(set(group.members) - group.persisted_members)
        return f"member(s) {', '.join(came)} joined" if came else None

    def _owners_read(self, group: Group, round_: Round, owners, error, now: float) -> None:
        if error is not None:
            self._end_round(group, round_, now, f"reading the owners failed: {describe(error)}")
            return
        del self._rounds[group.name]
        group.recorded_owners = owners
        self._begin_round(group, now)

    def _state_written(self, group: Group, round_: Round, _result, error, now: float) -> None:
        if error is not None:
            group.state_exists = None  # it may have been written after all
            group.persisted_members = None
            self._end_round(group, round_, now, f"writing the group state failed: {describe(error)}")
            return
        group.state_exists = True
        group.persisted_members = round_.persisted_members
        group.generation = round_.generation
        for member in group.members.values():
            member.assigned = round_.target.get(member.member_id, frozenset())
        plan = round_.plan
        round_.phase = RoundPhase.STOPPING
        # A member that left meanwhile stopped with its connection; it needs no Stop.
        self._send_all(group, round_, plan.revoke, lambda partitions: wire.StopRequest(
            coordinator_epoch=self.epoch, generation=group.generation, revoke_all=plan.revoke_all,
            partitions=tuple(TopicPartition(t, p) for t, p in sorted(partitions))), self._stopped, now)

    def _send_all(self, group: Group, round_: Round, per_member: Mapping[str, frozenset[TopicPartition]],
                  make_request: Callable, on_answer: Callable, now: float) -> None:
        """Send one request per member of ``per_member`` still connected; the
        round moves on once every one is answered or has failed."""
        round_.sending = True
        for member_id, partitions in per_member.items():
            member = group.members.get(member_id)
            if member is None or not member.connected or member.leaving:
                continue  # it stops everything with its connection, or has already
            if round_.phase is RoundPhase.STARTING:
                member.starting = partitions  # from now on it may run them, from the committed offsets:
                group.fences.claimed(partitions)  # what earlier holders would hand over is stale
            round_.waiting.add(member_id)
            self._request(member, make_request(partitions), self.config.rebalance_timeout_ms / 1000.0,
                          partial(on_answer, group, round_, partitions), partial(self._step_failed, group, round_),
                          now)
        round_.sending = False
        self._advance(group, round_, now)

    def _step_failed(self, group: Group, round_: Round, member: Member, why: str, now: float) -> None:
        round_.failure = round_.failure or f"member {member.member_id}: {why}"
        round_.waiting.discard(member.member_id)
        self._advance(group, round_, now)

    def _stopped(self, group: Group, round_: Round, partitions, member: Member, answer, now: float) -> None:
        if self._step_answered(round_, member, answer, wire.StopResponse, "stop", now):
            # Judged against what we asked it to stop, not what it runs now: a
            # leave read meanwhile may have emptied that already.
            self._accept_offsets(group, member, wire.offsets_of(answer.offsets), owned=partitions)
            member.running = member.running - partitions
        self._advance(group, round_, now)

    def _started(self, group: Group, round_: Round, partitions, member: Member, answer, now: float) -> None:
        if self._step_answered(round_, member, answer, wire.RestartFetcherResponse, "start", now):
            member.running, member.starting = partitions, frozenset()
        self._advance(group, round_, now)

    def _step_answered(self, round_: Round, member: Member, answer, expected: type, verb: str, now: float) -> bool:
        """Count ``member``'s answer; a wrong or failed one drops the member and fails the round."""
        round_.waiting.discard(member.member_id)
        if isinstance(answer, expected) and answer.error_code == wire.ErrorCode.NONE:
            return True
        round_.failure = round_.failure or f"member {member.member_id} failed to {verb}: {answer}"
        self._remove(member, f"it failed to {verb}: {answer}", now)
        return False

    def _advance(self, group: Group, round_: Round, now: float) -> None:
        """The next step of a round whose requests have all been answered."""
        if round_.sending or round_.waiting or self._rounds.get(group.name) is not round_:
            return
        if round_.failure is not None:
            self._end_round(group, round_, now, round_.failure)
        elif not self.active:
            self._end_round(group, round_, now, "the ZooKeeper connection is suspended")
        elif round_.phase is RoundPhase.STOPPING:
            round_.phase = RoundPhase.FLUSHING  # offsets from the Stop answers, before anyone restarts
            if round_.reset is not None:  # the operator's offsets replace them
                self._reset(group, round_.reset.offsets)
            self._flush(group.name, now, [partial(self._stops_written, group, round_)])
        elif round_.phase is RoundPhase.STARTING:
            round_.phase = RoundPhase.RECORDING
            owners = owners_of(round_.target)
            self._zk(partial(WriteOwners, group=group.name, owners=owners, previous=group.recorded_owners),
                     partial(self._owners_written, group, round_, owners))

    def _stops_written(self, group: Group, round_: Round, error, now: float) -> None:
        if round_.reset is not None:
            reset, round_.reset = round_.reset, None
            reset.answer(error, now)
        if error is not None:
            self._end_round(group, round_, now, f"writing the stopped partitions' offsets failed: {describe(error)}")
            return
        starting = frozenset(tp for tps in round_.plan.start.values() for tp in tps)
        unknown = self._unknown_offsets(group.name, starting)
        if unknown:
            round_.phase = RoundPhase.READING
            self._zk(partial(ReadOffsets, group=group.name, partitions=unknown),
                     partial(self._start_offsets_read, group, round_, unknown))
        else:
            self._send_starts(group, round_, now)

    def _start_offsets_read(self, group: Group, round_: Round, asked, found, error, now: float) -> None:
        if error is not None:
            self._end_round(group, round_, now, f"reading committed offsets failed: {describe(error)}")
            return
        self._offsets_read(group.name, asked, found)
        self._send_starts(group, round_, now)

    def _send_starts(self, group: Group, round_: Round, now: float) -> None:
        if not self.active:
            self._end_round(group, round_, now, "the ZooKeeper connection is suspended")
            return
        # A member dropped since the round began (its Stop skipped) fenced
        # what it may still run: none of that may be started yet.
        starting = frozenset(tp for tps in round_.plan.start.values() for tp in tps)
        free_at = group.fences.until(now, starting)
        if free_at is not None:
            self._end_round(group, round_, now, f"partitions fenced during the round, for {free_at - now:.1f}s more")
            return
        committed = self.committed.get(group.name, {})
        round_.phase = RoundPhase.STARTING
        self._send_all(group, round_, round_.plan.start, lambda partitions: wire.StartRequest(
            coordinator_epoch=self.epoch, generation=group.generation, strategy=group.strategy,
            partitions=tuple(wire.TopicPartitionOffset(t, p, committed.get((t, p), -1))
                             for t, p in sorted(partitions))), self._started, now)

    def _owners_written(self, group: Group, round_: Round, owners, _result, error, now: float) -> None:
        if error is not None:
            group.recorded_owners = None  # read them again: the write may have been applied
            self._end_round(group, round_, now, f"writing the owners failed: {describe(error)}")
            return
        group.recorded_owners = owners  # only this coordinator writes them, fenced
        # The members of the round, not of now: one that joined meanwhile runs another round.
        group.transition(GroupPhase.STABLE if round_.target else GroupPhase.EMPTY)
        if not round_.target:
            self._empty(group, now)
        report = RebalanceReport(group.name, round_.generation, len(round_.plan.paused),
                                 sum(len(t) for t in round_.target.values()), now - round_.started)
        self.last_rebalance = report
        self.metrics.rebalanced(report)
        log.info("%s %s: %d member(s), %d partition(s), %d paused, %.0f ms", group.describe(),
                 group.phase.value, len(round_.target), report.partitions, report.paused, report.seconds * 1000)
        self._end_round(group, round_, now)

    def _end_round(self, group: Group, round_: Round, now: float, failure: Optional[str] = None) -> None:
        if self._rounds.get(group.name) is round_:
            del self._rounds[group.name]
        if round_.reset is not None:  # it failed before the offsets were written: nothing was reset
            reset, round_.reset = round_.reset, None
            reset.answer(wire.RebalanceInProgress(f"the rebalance that was to reset the offsets failed ({failure}); "
                                                  "nothing was reset"), now)
        if failure is None:
            self._succeeded(group)
        else:
            self.metrics.rebalance_failed()
            group.failures += 1
            group.last_error = failure
            log.warning("%s rebalance attempt failed: %s", group.describe(), failure)
            if not self.active:
                group.rebalance_pending = True  # runs again when the connection is back
            elif not group.rebalance_pending:
                # Retried for as long as it fails (what runs differs from the
                # target: a dead member's partitions unconsumed), never only
                # on the next change: a fault that outlasts the retries (a
                # ZooKeeper ACL mistake, a quota) must not wedge the group.
                if group.attempts >= self.config.max_rebalance_retries and group.phase is not GroupPhase.FAILED:
                    self._give_up(group)
                self._schedule_round(group, now + self._retry_backoff(group.attempts))
                group.attempts += 1
        if group.rebalance_pending and self.active and group.name not in self._rebalance_due:
            self._schedule_round(group, now)  # its timer fired during the round

    def _retry_backoff(self, attempts: int) -> float:
        """Seconds before the next try of a round that failed ``attempts`` + 1
        times in a row: doubling from the backoff (at least MIN_RETRY_BACKOFF_MS,
        or a backoff of 0 would retry a failing write without pause, for ever)."""
        base_ms = max(self.config.rebalance_backoff_ms, MIN_RETRY_BACKOFF_MS)
        backoff_ms = base_ms * 2 ** min(attempts, 32)
        return min(backoff_ms, self.config.max_rebalance_backoff_ms) / 1000.0

    def _succeeded(self, group: Group) -> None:
        group.attempts = 0
        if group.failures:
            self._record_failure(group, None)
        group.failures = 0
        group.last_error = None

    def _give_up(self, group: Group) -> None:
        """The group is FAILED (again: each retry's round takes it out of
        FAILED while it runs); its failure node says why, rewritten only
        when that changes, not at every retry."""
        group.transition(GroupPhase.FAILED)
        attempts = self.config.max_rebalance_retries + 1
        # Visible to `zkcoord groups describe` until a retry succeeds.
        failure = layout.GroupFailure.of(group.generation, attempts, group.last_error or "unknown")
        if failure != group.recorded_failure:
            log.error("%s rebalance FAILED after %d attempts (tried again every %.0fs at most): %s",
                      group.describe(), attempts, self.config.max_rebalance_backoff_ms / 1000.0, group.last_error)
            self._record_failure(group, failure)

    def _record_failure(self, group: Group, failure: Optional[layout.GroupFailure]) -> None:
        """Write ``failure`` to the group's failure node (None: clear it), unless it holds that already."""
        if failure == group.recorded_failure:
            return
        group.recorded_failure = failure
        self._zk(partial(WriteGroupFailure, group=group.name, failure=failure),
                 partial(self._failure_recorded, group))

    @staticmethod
    def _failure_recorded(group: Group, _result, error, _now) -> None:
        if error is not None:  # logged either way
            group.recorded_failure = UNKNOWN_FAILURE  # written again next time, whatever it is then
            log.warning("%s could not record its rebalance failure: %s", group.describe(), error)

    def _group(self, name: str) -> Group:
        group = self.groups.get(name)
        if group is None:  # handleNewGroup
            group = self.groups[name] = Group(name)
        return group

    # -- offsets ------------------------------------------------------------------------------

    def _unknown_offsets(self, name: str, partitions) -> frozenset[TopicPartition]:
        known = self.committed.get(name, {})
        absent = self._no_offset.get(name, set())
        return frozenset(tp for tp in partitions if tp not in known and tp not in absent)

    def _offsets_read(self, name: str, asked, found: Mapping[TopicPartition, int]) -> None:
        """Learn committed offsets; pending ones below them are regressions, dropped."""
        known = self.committed.setdefault(name, {})
        absent = self._no_offset.setdefault(name, set())
        pending = self.pending_offsets.get(name, {})
        for tp in asked:
            if tp in known or tp in absent:
                continue  # learnt meanwhile, from our own write: newer than this read
            if tp not in found:
                absent.add(tp)
                continue
            committed = known[tp] = found[tp]
            if pending.get(tp, committed) < committed:
                log.warning("[group %s] offset %d for %s-%d is below committed %d; ignored",
                            name, pending[tp], tp[0], tp[1], committed)
                del pending[tp]

    def _accept_offsets(self, group: Group, member: Member, offsets: Mapping[TopicPartition, int],
                        owned: frozenset[TopicPartition]) -> int:
        """Take offsets a member reports, only for partitions in ``owned``,
        never backwards; returns how many were taken. Where the committed
        offset is not known yet, the check ends when it has been read."""
        offsets = {tp: o for tp, o in offsets.items() if offset_is_acceptable(group, member, tp, o, owned)}
        committed = self.committed.get(group.name, {})
        pending = self.pending_offsets.setdefault(group.name, {})
        reporters = self._reporters.setdefault(group.name, {})
        taken = 0
        for tp, offset in offsets.items():
            floor = max(committed.get(tp, -1), pending.get(tp, -1))
            if offset < floor:
                log.warning("%s member %s reported offset %d for %s-%d below committed %d; ignored",
                            group.describe(), member.member_id, offset, tp[0], tp[1], floor)
                continue
            pending[tp] = offset
            reporters[tp] = member  # told if the offset is beyond the log end
            taken += 1
        return taken

    def _accept_handover(self, group: Group, member: Member, entries) -> int:
        """A returning member's final offsets for the partitions it ran last:
        it was fenced on them when dropped (after a failover: all it ran or
        was given in the last persisted generation), and nobody has been sent
        a Start of them since, however long ago its fence lapsed. It stopped
        them before registering, so they are exact: whoever runs them next
        redelivers nothing (never taken below the committed offset). Offsets
        of anything else are stale; ignored.

        Raises RebalanceInProgress, taking nothing, if the round under way
        will start some of them: its Starts could carry the committed offsets
        from before the handover is written, and if it fails before starting
        them the handover would be lost. The member keeps it and registers
        again once the round has ended."""
        # Only the incarnation that ran them knows what it consumed: offsets
        # from anyone else under the id are ignored, a static registration's
        # among them (a new process of a static id has none to hand over, and
        # a static registration may name a dropped dynamic member's id).
        proven = group.fences.proves(member.member_id, member.proof)
        owned = group.fences.last_ran_by(member.member_id) if proven else frozenset()
        previous = group.members.get(member.member_id)
        if previous is not None:  # a static member or this incarnation back (validated): what it ran
            owned |= previous.may_run
        round_ = self._rounds.get(group.name)
        if round_ is not None and round_.plan is not None:
            planned = {tp for tps in round_.plan.start.values() for tp in tps}
            contested = owned & planned & set(wire.offsets_of(entries))
            if contested:
                raise wire.RebalanceInProgress(
                    f"a rebalance under way will start {len(contested)} partition(s) whose offsets you hand "
                    "over; register again once it has ended")
        taken = self._accept_offsets(group, member, wire.offsets_of(entries), owned=owned)
        log.info("%s member %s hands over offsets of %d partition(s)", group.describe(), member.member_id, taken)
        return taken

    def _flush(self, name: str, now: float, waiters=(), checked: Optional[Mapping[TopicPartition, int]] = None) -> None:
        """Write the group's pending offsets, one fenced multi-operation at a
        time per group (seed improvement 1); each waiter is called with the
        error (None) once a write that began after it asked has ended.
        ``checked``: offsets the leaders were just asked about, to be written
        without asking again."""
        flush = self._flushes.get(name)
        if flush is not None:
            flush.later.extend(waiters)
            flush.again = True
            return
        if not self.active:
            for waiter in waiters:
                waiter(Suspended("the ZooKeeper connection is suspended"), now)
            return
        pending = self.pending_offsets.get(name, {})
        unknown = self._unknown_offsets(name, pending)
        flush = self._flushes[name] = _Flush(list(waiters))
        if unknown:  # learn which nodes exist and check for regressions first
            self._zk(partial(ReadOffsets, group=name, partitions=unknown),
                     partial(self._flush_read, name, unknown, now))
            return
        known = self.committed.setdefault(name, {})
        changed = {tp: o for tp, o in pending.items() if known.get(tp) != o}
        if not changed:
            self._flush_ended(name, None, now)
            return
        # Above the last log end learnt: ask the leaders before writing (an
        # offset at or below it, the steady state of a lagging group, asks nothing).
        beyond = {tp: offset for tp, offset in changed.items()
                  if offset > self._log_end(tp) and (checked or {}).get(tp) != offset}
        if beyond:
            self._zk(partial(ReadLogEnds, partitions=frozenset(beyond)),
                     partial(self._log_ends_read, name, beyond, self._log_end_question(beyond)))
            return
        existing = frozenset(tp for tp in changed if tp in known)
        self._zk(partial(WriteOffsets, group=name, offsets=changed, existing=existing),
                 partial(self._offsets_written, name, changed, now))

    def _flush_read(self, name: str, asked, began: float, found, error, now: float) -> None:
        if error is not None:
            self.metrics.offsets_flushed(now - began, failed=True)
            self._flush_ended(name, error, now)
            return
        self._offsets_read(name, asked, found)
        flush = self._flushes.pop(name)
        self._flush(name, now, flush.waiters + flush.later)

    def _log_end(self, tp: TopicPartition) -> int:
        """The log end learnt last of ``tp``, -1 if none is known."""
        known = self.log_ends.get(tp)
        return -1 if known is None else known.offset

    def _log_end_question(self, partitions) -> LogEndQuestion:
        return LogEndQuestion(next(self._log_end_questions), {tp[0]: self.topic_ids.get(tp[0]) for tp in partitions})

    def _learn_log_ends(self, found, question: LogEndQuestion) -> Mapping[TopicPartition, int]:
        """Learn the answer ``found`` (partition -> LogEnd, or None) to
        ``question``; returns the log ends that judge the offsets it asked
        about. A newer answer replaces what was learnt, even a lower one (a
        log that lost its tail: what is beyond it now is beyond it), an older
        one (KnownLogEnd.older_than) does not. An offset is judged by this
        answer or a later question's, never by an answer to a question
        asked before it was reported (it may since have been written): with
        a newer leader's answer to an earlier question, it is not judged.
        An answer about a topic since deleted or created again is ignored."""
        judged = {}
        for tp, end in (found or {}).items():
            if self.topic_ids.get(tp[0]) != question.topic_ids.get(tp[0]):
                continue
            known = self.log_ends.get(tp)
            if known is None or known.older_than(end.leader_epoch, question.number):
                if known is not None and end.offset < known.offset:
                    log.warning("the log of %s-%d ends at %d (leader epoch %d), below the %d learnt before "
                                "(leader epoch %d): it lost its tail", tp[0], tp[1], end.offset, end.leader_epoch,
                                known.offset, known.leader_epoch)
                known = self.log_ends[tp] = KnownLogEnd(end.offset, end.leader_epoch, question.number)
            if known.question >= question.number:
                judged[tp] = known.offset
        return judged

    def _log_ends_read(self, name: str, asked: dict, question: LogEndQuestion, found, error, now: float) -> None:
        """Judge the offsets ``asked`` about (partition -> offset) by the log
        ends this answer gave. One beyond its partition's log end is refused
        (the committed offset stays, so nothing is skipped) and the member that
        reported it is told, and removed. One whose log end no leader gave in
        time is written as reported: refusing it would start the next owner
        from an older offset and deliver again what a planned handoff must
        not; a leader that cannot answer cannot be fetched from either, so an
        honest offset is not past it. A newer report that came in meanwhile
        waits for the next answer: this one says nothing of it. One whose
        topic was deleted or created again since it was asked about is asked
        again: an answer about the topic before says nothing of the one now."""
        if error is not None:
            log.warning("[group %s] log end offsets of %d partition(s) not learnt: %s: %s", name, len(asked),
                        type(error).__name__, error)
        learnt = self._learn_log_ends(found, question)
        pending = self.pending_offsets.get(name, {})
        reporters = self._reporters.get(name, {})
        renewed = frozenset(tp for tp in asked if self.topic_ids.get(tp[0]) != question.topic_ids.get(tp[0]))
        for tp, offset in sorted(asked.items()):
            if tp in renewed:
                continue
            if tp not in learnt and pending.get(tp) == offset:
                log.info("[group %s] offset %d for %s-%d taken as reported: no leader said where its log ends",
                         name, offset, tp[0], tp[1])
            why = beyond_log_end(tp, offset, learnt[tp]) if tp in learnt else None
            if why is None or pending.get(tp) != offset:
                continue
            del pending[tp]
            member = reporters.pop(tp, None)
            log.warning("[group %s] %s; refused, the committed offset kept", name, why)
            group = self.groups.get(name)
            if member is not None and member.connected and group is not None \
                    and group.members.get(member.member_id) is member:
                self._emit(Send(member.connection, wire.ErrorResponse(
                    error_code=wire.ErrorCode.OFFSET_OUT_OF_RANGE,
                    message=f"member {member.member_id} reported {why}; refused"), 0))
                self._remove(member, f"it reported {why}", now)
        flush = self._flushes.pop(name)
        self._flush(name, now, flush.waiters + flush.later,
                    checked={tp: offset for tp, offset in asked.items() if tp not in renewed})

    def _offsets_written(self, name: str, changed, began: float, _result, error, now: float) -> None:
        self.metrics.offsets_flushed(now - began, failed=error is not None)
        if error is None:
            self.committed.setdefault(name, {}).update(changed)
            self._no_offset.get(name, set()).difference_update(changed)
            pending = self.pending_offsets.get(name, {})
            reporters = self._reporters.get(name, {})
            for tp, offset in changed.items():
                if pending.get(tp) == offset:
                    del pending[tp]
                    reporters.pop(tp, None)
        else:
            # A node created although the write reported a failure would make
            # every later create fail: read them again before the next write.
            self._no_offset.get(name, set()).difference_update(changed)
            log.warning("[group %s] offset write failed, will retry: %s", name, error)
        self._flush_ended(name, error, now)

    def _flush_ended(self, name: str, error, now: float) -> None:
        flush = self._flushes.pop(name)
        for waiter in flush.waiters:
            waiter(error, now)
        if flush.again:
            self._flush(name, now, flush.later)

    # -- an operator's offset reset ----------------------------------------------------------------

    def reset_offsets(self, conn: Hashable, request: wire.ResetOffsetsRequest, correlation_id: int,
                      now: float) -> list:
        """`zkcoord groups reset-offsets` on connection ``conn``: answered
        once decided, then closed. Without ``execute``, the committed
        offsets and the members, nothing changed. With it, the offsets are
        committed (the one way an offset moves backwards, invariant 2) if the
        group has no members; with members, only if forced, by a round that
        stops their owners, commits and starts the owners from them. Every
        refusal changes nothing."""
        def answer(error, now, members=(), previous=None) -> None:
            self._emit(Send(conn, wire.ResetOffsetsResponse(
                error_code=wire.ErrorCode.NONE if error is None else wire.code_for(error),
                error_message="" if error is None else str(error), members=tuple(members),
                previous=wire.offset_entries(previous or {})), correlation_id))
            self._emit(Close(conn))

        try:
            group, offsets = self._check_reset(request)
        except wire.WireError as exc:
            answer(exc, now)
            return self._take()
        if not group.members:  # perhaps made by this request: forgotten in its turn if nothing comes of it
            self._empty(group, now)
        proceed = partial(self._reset_checked, conn, group, request, offsets, answer)
        beyond = frozenset(tp for tp, offset in offsets.items() if offset > self._log_end(tp))
        if request.execute and beyond:
            self._zk(partial(ReadLogEnds, partitions=beyond),
                     partial(self._reset_log_ends_read, offsets, beyond, self._log_end_question(beyond), proceed,
                             answer))
        else:
            proceed(now)
        return self._take()

    def _reset_log_ends_read(self, offsets, asked, question, proceed, answer, found, error, now: float) -> None:
        """A reset beyond a partition's log end (or where it cannot be learnt) resets nothing."""
        learnt = self._learn_log_ends(found, question)
        refusals = [why for why in (beyond_log_end(tp, offsets[tp], learnt.get(tp)) for tp in sorted(asked))
                    if why is not None]
        if refusals:
            cause = f" ({error})" if error is not None else ""
            answer(wire.OffsetOutOfRange("; ".join(refusals) + cause + "; nothing was reset"), now)
        else:
            proceed(now)

    def _reset_checked(self, conn, group: Group, request, offsets, answer, now: float) -> None:
        # Every partition named, or (none named, not executing) every one the group has an offset for.
        asked = frozenset(offsets) if offsets else None
        unknown = self._unknown_offsets(group.name, asked) if asked is not None else None
        decide = partial(self._reset_decided, conn, group, request, offsets, answer)
        if unknown == frozenset():
            decide(asked, now)
        else:
            self._zk(partial(ReadOffsets, group=group.name, partitions=unknown),
                     partial(self._reset_offsets_read, group, decide, answer, unknown))

    def _check_reset(self, request: wire.ResetOffsetsRequest) -> tuple[Group, dict[TopicPartition, int]]:
        """The group and the offsets asked for, or the WireError that refuses them."""
        try:
            layout.group_path(request.group_id)
        except layout.LayoutError as exc:
            raise wire.InvalidRequest(str(exc)) from None
        offsets: dict[TopicPartition, int] = {}
        for entry in request.offsets:
            tp = TopicPartition(entry.topic, entry.partition)
            if tp in offsets:
                raise wire.InvalidRequest(f"{entry.topic}-{entry.partition} is named twice")
            count = self.partitions.get(entry.topic, 0)
            if not count:
                raise wire.UnknownPartition(f"there is no topic {entry.topic!r}")
            if not 0 <= entry.partition < count:
                raise wire.UnknownPartition(f"topic {entry.topic} has no partition {entry.partition} "
                                            f"(it has {count})")
            if request.execute:
                try:
                    layout.encode_offset(entry.offset)
                except layout.LayoutError as exc:
                    raise wire.InvalidRequest(f"{entry.topic}-{entry.partition}: {exc}") from None
            offsets[tp] = entry.offset
        if request.execute and not offsets:
            raise wire.InvalidRequest("a reset to execute names at least one partition")
        if not self.active:
            raise wire.CoordinatorNotAvailable("the coordinator is suspended: ZooKeeper is unreachable or its "
                                               "office is not proven yet")
        existing = self.groups.get(request.group_id)
        if existing is not None and existing.forgetting:
            raise wire.RebalanceInProgress(f"group {request.group_id} is being forgotten (it was empty past its "
                                           "retention); try again in a moment")
        return self._group(request.group_id), offsets

    def _reset_offsets_read(self, group: Group, decide, answer, asked, found, error, now: float) -> None:
        if error is not None:
            answer(error, now)
            return
        asked = frozenset(found) if asked is None else asked
        self._offsets_read(group.name, asked, found)
        decide(asked, now)

    def _reset_decided(self, conn, group: Group, request, offsets, answer, asked, now: float) -> None:
        committed = self.committed.get(group.name, {})
        pending = self.pending_offsets.get(group.name, {})
        if asked is None:
            asked = frozenset(committed) | frozenset(pending)
        # Offsets taken and not yet written are the ones a reset moves from.
        previous = {tp: max(committed.get(tp, -1), pending.get(tp, -1)) for tp in asked}
        previous = {tp: offset for tp, offset in previous.items() if offset >= 0}
        members = sorted(group.members)
        answer = partial(answer, members=members, previous=previous)
        if not request.execute:
            answer(None, now)
            return
        refusal = None
        if not self.active:
            refusal = wire.CoordinatorNotAvailable("the coordinator was suspended")
        elif group.name in self._rounds or group.name in self._resets:
            refusal = wire.RebalanceInProgress(f"group {group.name} is rebalancing; try again in a moment")
        elif members and not request.force:
            refusal = wire.GroupNotEmpty(f"group {group.name} has {len(members)} member(s): {', '.join(members)}; "
                                         "stop them first, or force the reset")
        if refusal is not None:
            answer(refusal, now)
        elif members:
            # Its owners stop, the offsets are written, its owners start from them: a round.
            log.info("%s offset reset of %d partition(s) forced by an operator; rebalancing to carry it out",
                     group.describe(), len(offsets))
            self._resets[group.name] = OffsetReset(offsets, answer, conn)
            self.request_rebalance(group, "an operator resets offsets", now)
        else:
            self._reset(group, offsets)
            self._flush(group.name, now, [answer])

    def _reset(self, group: Group, offsets: Mapping[TopicPartition, int]) -> None:
        """Make ``offsets`` the group's next to write, whatever it held: an
        operator's reset. Offsets a member dropped earlier would hand over
        for them are stale from now on."""
        pending = self.pending_offsets.setdefault(group.name, {})
        pending.update(offsets)
        reporters = self._reporters.get(group.name, {})
        for tp in offsets:
            reporters.pop(tp, None)
        group.fences.claimed(offsets)
        log.info("%s offsets reset by an operator: %s", group.describe(),
                 ", ".join(f"{t}-{p} to {o}" for (t, p), o in sorted(offsets.items())))

    # -- forgetting empty groups (Kafka's offsets.retention.minutes) ------------------------------

    def _empty(self, group: Group, now: float, after: Optional[float] = None) -> None:
        """``group`` has no members now: forget it after its retention
        (``after`` seconds, by default the retention) unless someone joins."""
        retention = self.config.group_retention_ms / 1000.0
        self._emit(SetTimer(("forget", group.name), now + (retention if after is None else after)))

    def _forget_due(self, name: str, now: float) -> None:
        """Forget the group if it still has no members and has no committed
        offset, or (``expire_offsets``, Kafka's offset expiry) whatever
        offsets it has, which go with it. Without expiry a group with offsets
        is kept for good. A group that has members again is looked at when
        it next empties."""
        group = self.groups.get(name)
        if group is None or group.forgetting or group.members or group.phase is not GroupPhase.EMPTY:
            return
        busy = (not self.active or name in self._rounds or name in self._flushes or name in self._resets
                or name in self._rebalance_due or self.pending_offsets.get(name)
                or any(m.group == name for m in self._registering.values()) or group.fences.until(now) is not None)
        if busy:
            self._empty(group, now, after=min(FORGET_RETRY_S, self.config.group_retention_ms / 1000.0))
            return
        if self.committed.get(name) and not self.config.expire_offsets:
            log.debug("%s kept past its retention: it has committed offsets", group.describe())
            return
        group.forgetting = True
        self._zk(partial(ReadOffsets, group=name, partitions=None), partial(self._forget_offsets_read, group))

    def _forget_offsets_read(self, group: Group, found, error, now: float) -> None:
        if error is not None or (found and not self.config.expire_offsets):
            group.forgetting = False
            if error is not None:
                log.warning("%s not forgotten yet: reading its offsets failed: %s", group.describe(), describe(error))
                self._empty(group, now, after=min(FORGET_RETRY_S, self.config.group_retention_ms / 1000.0))
            else:
                self._offsets_read(group.name, frozenset(found), found)
                log.debug("%s kept past its retention: it has committed offsets", group.describe())
            return
        expiring = bool(found) or bool(self.committed.get(group.name))
        self._zk(partial(ForgetGroup, group=group.name, offsets=expiring),
                 partial(self._group_forgotten, group, expiring))

    def _group_forgotten(self, group: Group, expiring: bool, _result, error, now: float) -> None:
        group.forgetting = False
        if error is not None:
            group.state_exists = None  # what is left of it is read again by its next round
            group.recorded_owners = None
            log.warning("%s not forgotten yet: %s", group.describe(), error)
            self._empty(group, now, after=min(FORGET_RETRY_S, self.config.group_retention_ms / 1000.0))
            return
        name = group.name
        if self.groups.get(name) is group:
            del self.groups[name]
        for per_group in (self.committed, self._no_offset, self.pending_offsets, self._reporters):
            per_group.pop(name, None)
        log.info("[group %s] forgotten%s: no members for %d ms", name,
                 ", its committed offsets expired" if expiring else " (it had no committed offsets)",
                 self.config.group_retention_ms)

    # -- introspection ----------------------------------------------------------------------------

    @staticmethod
    def empty_census() -> Census:
        """Every phase and every member state, at 0."""
        return Census(dict.fromkeys((phase.value for phase in GroupPhase), 0), dict.fromkeys(MEMBER_STATES, 0))

    def census(self) -> Census:
        """Groups by phase and members by state, counted now."""
        empty = self.empty_census()
        groups, members = dict(empty.groups), dict(empty.members)
        for group in self.groups.values():
            groups[group.phase.value] += 1
            for member in group.members.values():
                state = "away" if not member.connected else "leaving" if member.leaving else "active"
                members[state] += 1
        members["registering"] = len(self._registering)
        return Census(groups, members)

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
