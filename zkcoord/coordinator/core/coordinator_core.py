"""The core of one coordinator: its parts composed, and every event routed to its part.

Owns nothing but the parts (Kafka's GroupCoordinatorShard over its group and
offset managers). Each public handler takes one event (a registration, a
frame, a connection closed, a timer, the end of a ZooKeeper operation, a
topic change, the ZooKeeper session's state) and the time, hands it to the
part that owns it, and returns the actions the parts decided, in order, for
the executor (runtime.py) to carry out. It never blocks, never reads a
clock and never touches a socket or ZooKeeper, so every decision can be
driven interleaving by interleaving with a manual clock.
"""

from __future__ import annotations

import logging
from typing import Hashable, Mapping, Optional

from zkcoord import wire
from zkcoord.coordinator.actions import Deposed
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.core.describe import Describe
from zkcoord.coordinator.core.groups import GroupTable
from zkcoord.coordinator.core.history import History
from zkcoord.coordinator.core.known_log_ends import KnownLogEnds
from zkcoord.coordinator.core.lag import ConsumerLag
from zkcoord.coordinator.core.membership import Membership
from zkcoord.coordinator.core.observed import NO_METRICS, Census, CoreMetrics, census_of, empty_census
from zkcoord.coordinator.core.office import CoordinatorState, Office
from zkcoord.coordinator.core.offsets import Offsets
from zkcoord.coordinator.core.outbox import Outbox
from zkcoord.coordinator.core.pings import Pings
from zkcoord.coordinator.core.requests import Requests
from zkcoord.coordinator.core.resets import Resets
from zkcoord.coordinator.core.retention import Retention
from zkcoord.coordinator.core.rounds import Rounds
from zkcoord.coordinator.core.takeover import resume_groups
from zkcoord.coordinator.group import Group, GroupPhase, Member
from zkcoord.security.principal import ANONYMOUS, Principal
from zkcoord.zk import layout

log = logging.getLogger(__name__)


class CoordinatorCore:
    def __init__(self, config: CoordinatorConfig, epoch: int, zk_session_timeout_ms: int,
                 metrics: CoreMetrics = NO_METRICS):
        """``zk_session_timeout_ms``: the timeout ZooKeeper granted our session
        (negotiated, not requested: the office is dated from it, and from
        any smaller one granted later, session_resumed)."""
        self.config = config
        out = self.out = Outbox()
        office = self.office = Office(epoch, zk_session_timeout_ms, out, on_active=self._became_active)
        table = self.table = GroupTable()
        log_ends = self.known_log_ends = KnownLogEnds()
        # The parts below membership drop members through it, and the rounds empty groups through retention.
        requests = self.requests = Requests(office, out, metrics, expire=self._remove)
        offsets = self.offsets = Offsets(config, office, out, table, log_ends, metrics, remove=self._remove)
        pings = self.pings = Pings(office, out, table, requests, offsets, metrics, remove=self._remove)
        history = self.history = History(config, office, out)
        rounds = self.rounds = Rounds(config, office, out, table, requests, offsets, metrics,
                                      remove=self._remove, empty=self._empty, history=history)
        self.membership = Membership(config, office, out, table, requests, pings, offsets, rounds, metrics)
        self.retention = Retention(config, office, out, table, offsets, rounds, self.membership.registering_in)
        self.resets = Resets(office, out, table, offsets, log_ends, rounds, empty=self.retention.empty)
        self.describer = Describe(office, out, table)
        self.consumer_lag = ConsumerLag(config, office, out, table, offsets, log_ends)
        # Timer keys by their first element: ("answers",), ("rebalance", group),
        # ("static", conn), ("ping",), ("flush",), ("office",), ("second-proof",), ("forget", group), ("lag",).
        self._timers = {
            "answers": lambda key, now: requests.deadlines_due(now),
            "rebalance": lambda key, now: rounds.due(key[1], now),
            "static": lambda key, now: self.membership.static_overdue(key[1], now),
            "ping": lambda key, now: pings.due(now),
            "flush": lambda key, now: offsets.flush_due(now),
            "office": lambda key, now: office.renewal_due(now),
            "second-proof": lambda key, now: office.prove(now),
            "forget": lambda key, now: self.retention.due(key[1], now),
            "lag": lambda key, now: self.consumer_lag.due(now),
        }
        self.metrics = metrics

    @property
    def metrics(self) -> CoreMetrics:
        return self._metrics

    @metrics.setter
    def metrics(self, metrics: CoreMetrics) -> None:
        """What every part counts into (a watcher may be put in after the core is made)."""
        self._metrics = metrics
        for part in (self.requests, self.offsets, self.pings, self.rounds, self.membership):
            part.metrics = metrics

    def _remove(self, member: Member, why: str, now: float) -> None:
        self.membership.remove(member, why, now)

    def _empty(self, group: Group, now: float) -> None:
        self.retention.empty(group, now)

    def _became_active(self, now: float) -> None:
        self.rounds.schedule_pending(now)
        self.history.write_pending()

    # -- what it holds, for the runtime, the metrics and the tests ---------------------------------

    @property
    def epoch(self) -> int:
        return self.office.epoch

    @property
    def zk_session_timeout_ms(self) -> int:
        return self.office.zk_session_timeout_ms

    @property
    def state(self) -> CoordinatorState:
        return self.office.state

    @property
    def active(self) -> bool:
        return self.office.active

    @property
    def deposed(self) -> bool:
        return self.office.deposed

    @property
    def office_until(self) -> float:
        return self.office.until

    @property
    def groups(self) -> dict[str, Group]:
        return self.table.by_name

    @property
    def partitions(self) -> dict[str, int]:
        return self.table.partitions

    @property
    def committed(self) -> dict:
        return self.offsets.committed

    @property
    def pending_offsets(self) -> dict:
        return self.offsets.pending

    @property
    def log_ends(self) -> dict:
        return self.known_log_ends.ends

    @property
    def last_rebalance(self):
        return self.rounds.last

    @property
    def flushing(self) -> bool:
        return self.offsets.flushing

    # -- events: lifecycle and ZooKeeper -----------------------------------------------------

    def load(self, states: Mapping[str, Optional[layout.GroupState]], proven_at: float, now: float) -> list:
        """Groups a predecessor left in ZooKeeper (takeover.py). ``proven_at``:
        when the office round trip that preceded the reads began (it proves
        nothing if a pause was seen since, machine_paused)."""
        self.office.loaded(proven_at)
        resume_groups(self.table, states, self.config, now, self.rounds.schedule, self._empty,
                      self.membership.read_owners)
        return self.out.take()

    def start(self, now: float) -> list:
        """Loaded: admit members, run rounds."""
        if self.office.loading:
            self.office.start(now)
            self.offsets.start(now)
            self.consumer_lag.start(now)
            self.rounds.schedule_pending(now)
            log.info("coordinator epoch %d started", self.epoch)
        return self.out.take()

    def session_suspended(self, now: float) -> list:
        """The ZooKeeper connection is suspended: send, start and write nothing.
        A round under way ends at its next step; its answers are still taken."""
        self.office.session_suspended()
        return self.out.take()

    def session_resumed(self, now: float, granted_ms: Optional[int] = None) -> list:
        """The same session is back: rounds that could not run, run (once the
        office is proven again, if it lapsed meanwhile). ``granted_ms``: the
        session timeout the server it reconnected to granted; one smaller
        than any before dates the office from then on (and at once)."""
        self.office.session_resumed(now, granted_ms)
        return self.out.take()

    def machine_paused(self, gained_s: float, now: float) -> list:
        """The machine was seen paused for ``gained_s`` more than the lease
        clock counted (a virtual machine held by its hypervisor: the runtime
        compares the wall clock's advance with it, clock.PauseWatch). Our
        ZooKeeper session may have expired meanwhile and a successor been
        elected: the office lapses now, and comes back only as after any lapse,
        on round trips begun from now on. Fences and members' deadlines only
        last longer in real time than the clock says: safe as they are."""
        self.office.machine_paused(gained_s, now)
        return self.out.take()

    def done(self, token: int, now: float, result=None, error: Optional[BaseException] = None) -> list:
        """A ZooKeeper operation the core asked for has ended."""
        callback = self.out.ended(token)
        if callback is None or self.deposed:
            return self.out.take()
        if isinstance(error, Deposed):
            log.error("coordinator epoch %d deposed: %s", self.epoch, error)
            self.office.become(CoordinatorState.DEPOSED)
            return self.out.take()
        callback(result, error, now)
        return self.out.take()

    def partitions_changed(self, topic: str, count: int, now: float, topic_id: Optional[str] = None) -> list:
        """The topic watch saw ``topic`` with ``count`` partitions (0: gone)
        and the topic id ``topic_id`` (None: none)."""
        if self.deposed:
            return self.out.take()
        self.known_log_ends.topic_changed(topic, count, topic_id)
        if self.table.partitions.get(topic) != count:
            self.table.partitions[topic] = count
            log.info("topic %s has %d partition(s)", topic, count)
            for group in self.table:
                if group.interested_in(topic):
                    self.rounds.request(group, f"topic {topic} now has {count} partition(s)", now)
        return self.out.take()

    def flush_all(self, now: float) -> list:
        """Write every pending offset (before stepping down)."""
        self.offsets.flush_pending(now)
        return self.out.take()

    def settled(self, now: float) -> bool:
        """Whether every group is at rest: active, and its last member
        registered, for the longest session timeout of its members, none
        mid-round or waiting for one, none waiting out a fence. Handing a
        slot over costs its groups a takeover's fences, and a stock client's
        old registration at the broker it left waits out its session
        (DESIGN.md); handed over again before that, they would pay twice. A
        member just registered may be such a client, followed here after the
        takeover (the last to arrive when a server came back and the slot was
        about to be handed to it again)."""
        groups = self.table.by_name.values()
        members = [m for g in groups for m in g.members.values()]
        longest = max((m.session_timeout for m in members), default=0.0)
        youngest = max((m.registered_at for m in members), default=self.office.started_at)
        return self.active and now - max(self.office.started_at, youngest) >= longest and all(
            group.phase is not GroupPhase.REBALANCING and not group.rebalance_pending
            and group.fences.until(now) is None
            for group in groups)

    def step_down(self, now: float) -> list:
        """Leave office: close every member's connection and do nothing more."""
        if not self.deposed:
            self.office.become(CoordinatorState.DEPOSED)
        self.membership.close_all()
        return self.out.take()

    def fail(self, now: float) -> list:
        """A handler raised: a bug. Whatever it had decided is dropped, and the
        coordinator steps down (a successor starts from ZooKeeper, with fences)."""
        self.out.discard()
        return self.step_down(now)

    def timer_fired(self, key: Hashable, now: float) -> list:
        if self.deposed:
            return self.out.take()
        self.office.check(now)
        handler = self._timers.get(key[0])
        if handler is not None:
            handler(key, now)
        return self.out.take()

    # -- events: members and operators ---------------------------------------------------------

    def validate(self, request: wire.RegisterConsumerRequest, principal: Principal = ANONYMOUS) -> None:
        """Registration checks; raises the wire error to send back."""
        self.membership.validate(request, principal)

    def register(self, conn: Hashable, request: wire.RegisterConsumerRequest, correlation_id: int,
                 now: float, *, host: str = "", client_id: str = "", principal: Principal = ANONYMOUS) -> list:
        """A consumer registers on ``conn``. Offsets it hands over (what it ran
        when its last coordinator went) are written before it is answered.
        ``host`` and ``client_id`` are only shown to operators (the group's state);
        ``principal`` is who the server authenticated it as."""
        self.membership.register(conn, request, correlation_id, now, host, client_id, principal)
        return self.out.take()

    def received(self, conn: Hashable, message: wire.Message, correlation_id: int, now: float) -> list:
        """A frame from a registered member."""
        self.membership.received(conn, message, correlation_id, now)
        return self.out.take()

    def connection_closed(self, conn: Hashable, now: float) -> list:
        self.rounds.drop_resets_of(conn)  # an operator that gave up before its round began
        self.membership.connection_closed(conn, now)
        return self.out.take()

    def reset_offsets(self, conn: Hashable, request: wire.ResetOffsetsRequest, correlation_id: int,
                      now: float) -> list:
        """`zkcoord groups reset-offsets` on connection ``conn``: answered
        once decided, then closed. Without ``execute``, the committed
        offsets and the members, nothing changed. With it, the offsets are
        committed (the one way an offset moves backwards, invariant 2) if the
        group has no members; with members, only if forced, by a round that
        stops their owners, commits and starts the owners from them. Every
        refusal changes nothing."""
        self.resets.reset_offsets(conn, request, correlation_id, now)
        return self.out.take()

    def describe_group(self, conn: Hashable, request: wire.DescribeGroupRequest, correlation_id: int,
                       now: float) -> list:
        """An operator's DescribeGroupRequest on connection ``conn``: answered
        at once from memory (each member's kind, client id, lease remaining,
        partitions and unanswered request), then closed. Changes nothing."""
        self.describer.describe_group(conn, request, correlation_id, now)
        return self.out.take()

    # -- introspection ----------------------------------------------------------------------------

    @staticmethod
    def empty_census() -> Census:
        """Every phase and every member state, at 0."""
        return empty_census()

    def census(self) -> Census:
        """Groups by phase and members by state, counted now."""
        return census_of(self.table, len(self.membership.registering))

    def lag_by_topic(self) -> dict[tuple[str, str], int]:
        """(group, topic) -> its consumer lag, as far as this coordinator knows (lag.py)."""
        return self.consumer_lag.by_topic()

    def describe_groups(self) -> dict:
        return {
            name: {
                "generation": g.generation,
                "phase": g.phase.value,
                "members": {m.member_id: sorted(m.running) for m in g.members.values()},
                "failures": g.failures,
                "last_error": g.last_error,
            }
            for name, g in sorted(self.table.by_name.items())
        }
