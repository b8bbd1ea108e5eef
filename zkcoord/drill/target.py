"""The cluster a drill's faults act on: its servers, its ensemble and the
proxies before it, its members (thin and stock), its topic, and the bounds
docs/DESIGN.md states for each kind of recovery (invariant 5).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable, Optional, Sequence

from zkcoord import wire
from zkcoord.drill.schedule import Timing
from zkcoord.drill.secure import DrillSecrets
from zkcoord.drill.workload import AcknowledgementWatch
from zkcoord.testing import (
    ConsumerProcess, LocalCluster, OwnershipViolation, ProxiedEnsemble, WaitTimeout, group_is_whole,
    partitions_of, wait_until,
)
from zkcoord.testing.kafka import KRAFT_MODE, KafkaCluster
from zkcoord.testing.netns import NetworkNamespace
from zkcoord.zk.ensemble import LocalEnsemble

log = logging.getLogger(__name__)

DEBOUNCE_S = 0.1          # the servers' --rebalance-delay-ms
RECONNECT_S = wire.MEMBER_RETRY_MAX_S  # a member's longest reconnect backoff
REBALANCE_SLACK_S = 3.0   # a few round trips and ZooKeeper writes, on a loaded 2-core machine
KAFKA_ADMIN_S = 120.0  # longest Kafka may take to create or grow the topic and elect its leaders, on a busy machine


@dataclasses.dataclass
class DrillCluster:
    """What the faults act on. Without ``ensemble`` (a cluster the drill did
    not start) only the consumers are the drill's to break."""

    cluster: LocalCluster
    group: str
    topic: str
    timing: Timing
    consumers_wanted: int
    consumer_args: Sequence[str]
    ensemble: Optional[LocalEnsemble] = None
    proxies: dict[int, ProxiedEnsemble] = dataclasses.field(default_factory=dict)
    bootstrap: Optional[Sequence[str]] = None  # the servers of a cluster the drill did not start
    use_netns: bool = False  # each thin consumer in a network namespace of its own (partition kinds)
    # This many of the members are stock Kafka clients, through these brokers' group APIs.
    stock_wanted: int = 0
    kafka_brokers: Optional[str] = None
    secrets: Optional[DrillSecrets] = None  # a secured drill's: every member signs in with its credential
    # The big-group fault's crowd: this many thin members with these options.
    big_group_members: int = 0
    crowd_args: Sequence[str] = ()
    namespaces: list[NetworkNamespace] = dataclasses.field(default_factory=list)
    kafka: Optional[KafkaCluster] = None  # the records in Apache Kafka's brokers, not in the servers' own
    # From now on, when the producer has each partition's next record acknowledged (None: no producer).
    watch_acknowledgements: Callable[[], Optional[AcknowledgementWatch]] = lambda: None
    # A KRaft cluster's topic is in no ZooKeeper node: its partitions as Kafka's metadata last said,
    # and how late the servers may learn a change of them (their look at Kafka's metadata; 0: a watch).
    kafka_partitions: set = dataclasses.field(default_factory=set)
    topic_change_lag_s: float = 0.0

    # -- the group ----------------------------------------------------------------------------------

    def live_consumers(self) -> list[ConsumerProcess]:
        return [c for c in self.cluster.consumers if c.reachable]

    def member_options(self, stock: bool, options: Optional[Sequence[str]] = None) -> tuple[str, ...]:
        """``options`` (by default ``consumer_args``) and, in a secured drill, the member's credential."""
        return (*(self.consumer_args if options is None else options),
                *(self.secrets.member_args(stock) if self.secrets is not None else ()))

    def add_consumer(self, start: bool = True) -> ConsumerProcess:
        netns = None
        if self.use_netns:
            # Each member in a namespace of its own: a stock member too, whose
            # fetches the brokers then tell apart by its own address.
            netns = NetworkNamespace(len(self.namespaces) + 1)
            self.namespaces.append(netns)
            netns.create()
        stock = [c for c in self.live_consumers() if c.stock]
        if len(stock) < self.stock_wanted:
            # Every other stock member runs kafka-python, which (like Java's
            # classic consumer) fetches on when it loses its group; the others
            # librdkafka, which revokes when its session runs out unheard
            # (and all of them in a secured drill: kafka-python runs it without TLS and SASL here).
            extra = ("--kafka-client", "kafka-python") if len(stock) % 2 and self.secrets is None else ()
            return self.cluster.add_consumer(
                self.group, topics=[self.topic], session_timeout_ms=int(self.timing.consumer_session_s * 1000),
                extra=(*self.member_options(stock=True), *extra), start=start, kafka_brokers=self.kafka_brokers,
                netns=netns)
        return self.cluster.add_consumer(
            self.group, topics=[self.topic], session_timeout_ms=int(self.timing.consumer_session_s * 1000),
            extra=self.member_options(stock=False), bootstrap=self.bootstrap, start=start, netns=netns)

    def remove_namespaces(self) -> None:
        for netns in self.namespaces:
            netns.remove()

    def partitions(self) -> set:
        if self.kafka is not None and self.kafka.mode == KRAFT_MODE:
            return self.kafka_partitions
        return partitions_of(self.cluster.zk, [self.topic])

    def create_topic(self, partitions: int) -> None:
        self._shape_topic(partitions, create=True)

    def add_partitions(self, total: int) -> None:
        self._shape_topic(total, create=False)

    def _shape_topic(self, partitions: int, create: bool) -> None:
        """Create the drill's topic or grow it to ``partitions``: through
        Kafka's admin API over Kafka (replicated as the cluster's default,
        and its partitions read back from Kafka), else zkcoord's."""
        if self.kafka is None:
            (self.cluster.create_topic if create else self.cluster.add_partitions)(self.topic, partitions)
            return
        (self.kafka.create_topic if create else self.kafka.add_partitions)(self.topic, partitions,
                                                                            timeout=KAFKA_ADMIN_S)
        self.kafka_partitions = {(self.topic, p) for p in self.kafka.replicas_of(self.topic)}

    def coordinator_epoch(self) -> int:
        """The epoch of the group's coordinator slot (-1: never elected)."""
        from zkcoord.admin.groups import group_coordinator

        epoch = group_coordinator(self.cluster.zk, self.group)[3]
        return -1 if epoch is None else epoch

    def is_whole(self, epoch_above: int = -1) -> bool:
        """Every partition owned by exactly one running member, ZooKeeper
        agreeing, and every running member registered with the coordinator of
        the current epoch (which must be above ``epoch_above``: a coordinator
        that died leaves its members looking whole until they notice)."""
        epoch = self.coordinator_epoch()
        if epoch <= epoch_above:
            return False
        # A stock client does not know the coordinator's epoch: its bridge does.
        if any((c.status() or {}).get("epoch") != epoch for c in self.live_consumers() if not c.stock):
            return False
        try:
            return group_is_whole(self.cluster.zk, self.group, self.cluster.consumers, self.partitions())
        except OwnershipViolation:
            return False  # seen from status files mid-change; the checker judges ownership from the history

    def slots_at_rest(self) -> bool:
        """No coordinator slot about to change hands: every slot held, none
        by a server above its share (coordinator/slots.py)."""
        from zkcoord.admin.client import slot_count, slot_holder
        from zkcoord.coordinator.slots import slots_at_rest
        from zkcoord.zk.nodes import read_servers

        servers = read_servers(self.cluster.zk)
        holders = {slot: slot_holder(self.cluster.zk, slot)[0] for slot in range(slot_count(self.cluster.zk))}
        return slots_at_rest(holders, {server: info.withdrawn for server, info in servers.items()})

    def wait_slots_at_rest(self, timeout: float) -> bool:
        """Until no slot is about to change hands (False: not within ``timeout``)."""
        try:
            wait_until(self.slots_at_rest, timeout, interval=0.2, message="the coordinator slots to be at rest")
        except WaitTimeout:
            return False
        return True

    def wait_whole(self, timeout: float, epoch_above: int = -1) -> Optional[float]:
        """time.time() when the group was whole, or None if not within ``timeout``."""
        try:
            wait_until(lambda: self.is_whole(epoch_above), timeout, interval=0.1,
                       message="the group to be whole")
        except WaitTimeout:
            return None
        return time.time()

    # -- servers ------------------------------------------------------------------------------------

    def coordinator_id(self) -> int:
        """The server elected in the group's coordinator slot, once there is one."""
        from zkcoord.admin.groups import group_coordinator

        server = wait_until(lambda: group_coordinator(self.cluster.zk, self.group)[2], 30,
                            message=f"a coordinator of group {self.group}")
        return int(server)

    def coordinator(self):
        return self.cluster.servers[self.coordinator_id()]

    def group_broker(self):
        """The server whose broker the group's stock members send their group
        requests to (GroupBridge.coordinator_broker: the coordinator's own,
        else the lowest live broker id)."""
        coordinator = self.coordinator()
        if coordinator.alive:
            return coordinator
        return min((s for s in self.cluster.servers.values() if s.alive), key=lambda s: s.server_id)

    def standbys(self) -> list:
        """Live servers that do not coordinate the group: with several
        coordinator slots, the coordinators of other slots."""
        coordinator = self.coordinator_id()
        return [s for s in self.cluster.servers.values() if s.alive and s.server_id != coordinator]

    # -- bounds (docs/DESIGN.md, invariant 5) ---------------------------------------------------------

    def member_bound(self) -> float:
        """A member gone: its session timeout, debounce and one rebalance."""
        return self.timing.consumer_session_s + DEBOUNCE_S + REBALANCE_SLACK_S

    def bound_for(self, consumer) -> float:
        """The bound for ``consumer`` gone: a stock member's is longer (below)."""
        return self.stock_member_bound() if consumer.stock else self.member_bound()

    def stock_member_bound(self) -> float:
        """A stock member gone unheard: the bridge waits its session for it,
        then the registration's fence holds up to a session more."""
        return self.member_bound() + self.timing.consumer_session_s

    def coordinator_bound(self) -> float:
        """The coordinator gone: its ZooKeeper session, election, members'
        reconnect, the fence (at most the longest member session), debounce and
        rebalance; with stock members, one more session (docs/DESIGN.md: the
        broker a stock client left holds its registration until the client
        has been silent that long)."""
        moved_stock_member = self.timing.consumer_session_s if self.stock_wanted else 0.0
        return (self.timing.zk_session_s + RECONNECT_S + self.timing.consumer_session_s + moved_stock_member
                + DEBOUNCE_S + REBALANCE_SLACK_S)
