"""Carrying faults out on a drill's cluster: each kind of
:mod:`~zkcoord.drill.schedule` as inject, hold, restore, and a wait until the
group is whole again, timed against the bound docs/DESIGN.md states.

Faults on the ZooKeeper connection of a server go through a TCP proxy the
drill puts between that server and the ensemble (cut: nothing forwarded
either way, the session expires when it outlasts the session timeout; heal:
forwarding again).

Over Apache Kafka (``DrillCluster.kafka``) the topic lives in Kafka, created
and grown with Kafka's admin API, and the Kafka kinds break its brokers:
membership does not change, so the group is whole again once the broken
broker's leaderships moved and the group committed, on those partitions,
records acknowledged after the fault (the producer and the members followed
the new leaders).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import sys
import time
from typing import Callable, Optional, Sequence

from zkcoord import wire
from zkcoord.drill.history import FaultRecord
from zkcoord.drill.schedule import KINDS, PlannedFault, Timing
from zkcoord.drill.secure import DrillSecrets
from zkcoord.drill.workload import AcknowledgementWatch
from zkcoord.fetch.columnar import PROBE_TIMEOUT_S, REQUEST_TIMEOUT_S
from zkcoord.testing import (ConsumerProcess, LocalCluster, ManagedProcess, OwnershipViolation, ProxiedEnsemble,
                             WaitTimeout, group_is_whole, partitions_of, read_json_lines, wait_until)
from zkcoord.testing.kafka import KRAFT_MODE, KafkaCluster
from zkcoord.testing.netns import NetworkNamespace
from zkcoord.zk.nodes import read_offsets
from zkcoord.zk.ensemble import LocalEnsemble

log = logging.getLogger(__name__)

DEBOUNCE_S = 0.1          # the servers' --rebalance-delay-ms
RECONNECT_S = wire.MEMBER_RETRY_MAX_S  # a member's longest reconnect backoff
REBALANCE_SLACK_S = 3.0   # a few round trips and ZooKeeper writes, on a loaded 2-core machine
MAX_PARTITIONS = 24       # add-partitions stops growing the topic here
CROWD_LEAVE_S = 30.0      # a crowd's clean leave takes at most this long before it is killed
# A broker gone past its session, as the drill expects it to take (it waits
# twice that and more before it calls the group stuck): the controller
# electing new leaders (a new controller first, when it was the controller),
# the members' fetchers and the producer learning them (metadata, a retry),
# and a commit reaching ZooKeeper, on a loaded 2-core machine.
KAFKA_FAILOVER_SLACK_S = 6.0
# The members' side alone, from when Kafka serves the broken broker's
# partitions again (the producer has a record acknowledged on each): their
# fetchers learning the new leaders (metadata, a retry), reading a record
# written since and a commit reaching ZooKeeper, on a loaded 2-core machine.
KAFKA_MEMBERS_FOLLOW_S = 6.0
# A new controller first reads the cluster's state (ZooKeeper mode: every
# topic and partition from ZooKeeper; KRaft: the quorum elects and the new
# leader catches up on the metadata log) before it moves any leadership.
KAFKA_CONTROLLER_FAILOVER_S = 4.0
# A Kafka node started again (a JVM, its logs recovered, registered) or woken
# may take this long to serve on a busy 2-core machine (KRaft's took over a minute).
KAFKA_RESTART_S = 180.0
KAFKA_RECOVERY_LOOK_S = 0.5  # how often a Kafka fault's recovery is looked at (each look asks the cluster)
KAFKA_REPLICATED_S = 120.0  # longest a broker back may take to be in sync on every partition again
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


def _pick(candidates: list, fault: PlannedFault):
    if not candidates:
        return None
    return candidates[fault.pick % len(candidates)]


def _record(fault: PlannedFault, target: str, injected: float, restored: float, recovery_from: float,
            whole_at: Optional[float], rejoined_at: Optional[float], bound: float, note: str = "") -> FaultRecord:
    return FaultRecord(index=fault.index, kind=fault.kind, target=target, planned=fault.planned,
                       injected=injected, restored=restored, recovery_from=recovery_from, whole_at=whole_at,
                       rejoined_at=rejoined_at, bound_s=round(bound, 3), note=note)


def _wait_bound(bound: float) -> float:
    """How long to wait for a whole group before calling it stuck: well past the bound."""
    return 2 * bound + 10


def _hold(seconds: float, watch: Optional[Callable[[], bool]] = None) -> Optional[float]:
    """Let the fault last ``seconds`` (the fault is the passage of time), and
    return when ``watch`` first held during it (None: never, or no watch)."""
    deadline = time.monotonic() + seconds
    seen = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return seen
        if seen is None and watch is not None:
            try:
                if watch():
                    seen = time.time()
            except Exception:  # noqa: BLE001 - ZooKeeper may be what the fault took away
                pass
        time.sleep(min(0.1, left))


# -- the kinds ---------------------------------------------------------------------------------------


def _kill_server(ctx: DrillCluster, fault: PlannedFault, server, bound: float, what: str,
                 epoch_above: int = -1) -> FaultRecord:
    injected = time.time()
    server.kill()
    whole_at = _hold(fault.hold_s, lambda: ctx.is_whole(epoch_above))
    if whole_at is None:
        whole_at = ctx.wait_whole(_wait_bound(bound), epoch_above)
    # Restarted at once: the server waits out its killed self's registration.
    server.start(timeout=60)
    restored = time.time()
    ctx.cluster.wait_for_brokers(60)
    rejoined_at = ctx.wait_whole(_wait_bound(bound))
    return _record(fault, f"{what} server {server.server_id}", injected, restored, injected, whole_at, rejoined_at,
                   bound)


def coordinator_kill(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    return _kill_server(ctx, fault, ctx.coordinator(), ctx.coordinator_bound(), "coordinator",
                        epoch_above=ctx.coordinator_epoch())


def standby_kill(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    server = _pick(ctx.standbys(), fault)
    if server is None:
        return skipped(fault, "no standby server alive")
    return _kill_server(ctx, fault, server, ctx.member_bound(), "standby")


def _held(ctx: DrillCluster, fault: PlannedFault, target: str, bound: float, begin: Callable[[], None],
          end: Callable[[], None], routed_around: bool, epoch_above: int = -1,
          recovered: Optional[Callable[[float], bool]] = None) -> FaultRecord:
    """A fault that lasts ``fault.hold_s``: ``begin``, hold, ``end`` (always),
    then a wait for a whole group. When the system must route around it (it
    outlasts a session timeout), the time to whole counts from ``begin`` and
    the group must be whole (above ``epoch_above``) during the hold or soon
    after; with ``recovered`` (given the injection's time), whole only once
    that holds too (a fault that leaves the group looking whole at first)."""
    injected = time.time()
    begin()

    def whole() -> bool:
        return ctx.is_whole(epoch_above) and (recovered is None or recovered(injected))

    try:
        whole_during = _hold(fault.hold_s, whole if routed_around else None)
    finally:
        end()
    restored = time.time()
    rejoined_at = ctx.wait_whole(_wait_bound(bound), epoch_above)
    if routed_around:
        return _record(fault, target, injected, restored, injected, whole_during or rejoined_at, rejoined_at, bound)
    return _record(fault, target, injected, restored, restored, rejoined_at, rejoined_at, bound)


def consumer_pause(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    consumer = _pick(ctx.live_consumers(), fault)
    if consumer is None:
        return skipped(fault, "no consumer running")
    routed_around = fault.hold_s > ctx.timing.consumer_session_s
    return _held(ctx, fault, consumer.name, ctx.bound_for(consumer), consumer.pause, consumer.resume, routed_around)


def _past_zk_session(ctx: DrillCluster, fault: PlannedFault) -> tuple[bool, int]:
    """Paused or cut off past its ZooKeeper session, the coordinator must be
    replaced: whether it must, and the epoch the group must get beyond."""
    if fault.hold_s > ctx.timing.zk_session_s:
        return True, ctx.coordinator_epoch()
    return False, -1


def coordinator_pause(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    server = ctx.coordinator()
    # A paused coordinator still accepts connections: a member may first wait
    # out a registration there (its session timeout) before it finds the new one.
    bound = ctx.coordinator_bound() + ctx.timing.consumer_session_s
    return _held(ctx, fault, f"coordinator server {server.server_id}", bound, server.pause, server.resume,
                 *_past_zk_session(ctx, fault))


def coordinator_zk_cut(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    server = ctx.coordinator()
    proxies = ctx.proxies[server.server_id]
    return _held(ctx, fault, f"coordinator server {server.server_id}", ctx.coordinator_bound(), proxies.cut,
                 proxies.heal, *_past_zk_session(ctx, fault))


def stock_member_pause(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    member = _pick([c for c in ctx.live_consumers() if c.stock], fault)
    if member is None:
        return skipped(fault, "no stock member running")
    return _held(ctx, fault, member.name, ctx.stock_member_bound(), member.pause, member.resume,
                 routed_around=fault.hold_s > ctx.timing.consumer_session_s)


def stock_member_group_cut(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    """A stock member cut off from the broker its group's requests go to, and
    from nothing else: librdkafka revokes when its session runs out unheard,
    kafka-python (as Java's classic consumer) fetches on from the other
    leaders, which must refuse it once its partitions may be started elsewhere."""
    member = _pick([c for c in ctx.live_consumers() if c.stock and c.netns is not None], fault)
    if member is None:
        return skipped(fault, "no stock member running in a namespace")
    server = ctx.group_broker()
    return _held(ctx, fault, f"{member.name} from broker {server.server_id}", ctx.stock_member_bound(),
                 lambda: member.netns.drop_port(server.broker_port), member.netns.heal,
                 routed_around=fault.hold_s > ctx.timing.consumer_session_s)


def consumer_partition(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    consumer = _pick([c for c in ctx.live_consumers() if c.netns is not None], fault)
    if consumer is None:
        return skipped(fault, "no consumer running in a namespace")
    routed_around = fault.hold_s > ctx.timing.consumer_session_s
    return _held(ctx, fault, consumer.name, ctx.bound_for(consumer), consumer.netns.cut, consumer.netns.heal,
                 routed_around)


def coordinator_members_partition(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    """Every member's traffic to and from the coordinator's port dropped: the
    coordinator still holds ZooKeeper, so nobody can route around it; the
    group must be whole again soon after the heal."""
    server = ctx.coordinator()
    namespaces = [c.netns for c in ctx.cluster.consumers if c.netns is not None]

    def cut() -> None:
        for netns in namespaces:
            netns.drop_port(server.port)

    def heal() -> None:
        for netns in namespaces:
            netns.heal()

    return _held(ctx, fault, f"coordinator server {server.server_id}", ctx.coordinator_bound(), cut, heal,
                 routed_around=False)


def one_way_loss(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    """A member's connection to the coordinator lost one way only, as after
    a reset one side saw or a route lost one way: the packets of that open
    connection dropped in one direction, new connections passing. The member
    stops when its lease ends and registers again on a new connection; the
    same incarnation takes its place back with what it consumed, so the
    group is whole again about a session timeout after the injection."""
    consumer = _pick([c for c in ctx.live_consumers() if c.netns is not None], fault)
    if consumer is None:
        return skipped(fault, "no consumer running in a namespace")
    server = ctx.coordinator()
    inbound = fault.kind == "member-to-coordinator-loss"
    dropped: list[int] = []

    def begin() -> None:
        dropped.extend(consumer.netns.drop_one_way(server.port, inbound=inbound))

    def started_again(injected: float) -> bool:  # it registered anew and was started on its partitions
        return any(e["event"] == "start" and e["ts"] >= injected for e in read_json_lines(consumer.events_path))

    record = _held(ctx, fault, consumer.name, ctx.member_bound(), begin, consumer.netns.heal, routed_around=True,
                   recovered=started_again)
    if not dropped:
        return dataclasses.replace(record, note="no open connection to the coordinator was found to drop")
    return record


def _kill_zk_nodes(ctx: DrillCluster, fault: PlannedFault, count: int) -> FaultRecord:
    ensemble = ctx.ensemble
    running = ensemble.running_nodes()
    if not running:
        return skipped(fault, "no ZooKeeper node running")
    first = fault.pick % len(running)
    victims = [running[(first + i) % len(running)] for i in range(min(count, len(running)))]

    def kill() -> None:
        for node in victims:
            ensemble.kill_node(node)

    def restart() -> None:
        for node in victims:
            ensemble.start_node(node)
        ensemble.wait_for_quorum(60)

    return _held(ctx, fault, "ZooKeeper node(s) " + ",".join(map(str, victims)), ctx.coordinator_bound(), kill,
                 restart, routed_around=False)


def zk_node_kill(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    return _kill_zk_nodes(ctx, fault, 1)


def zk_quorum_loss(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    return _kill_zk_nodes(ctx, fault, 2)


def consumer_kill(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    consumer = _pick(ctx.live_consumers(), fault)
    if consumer is None:
        return skipped(fault, "no consumer running")
    injected = time.time()
    consumer.kill()
    bound = ctx.bound_for(consumer)
    whole_at = ctx.wait_whole(_wait_bound(bound))
    consumer.start()  # a new process: a new member
    restored = time.time()
    rejoined_at = ctx.wait_whole(_wait_bound(bound))
    return _record(fault, consumer.name, injected, restored, injected, whole_at, rejoined_at, bound)


def slow_member(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    """Arm the member holding the most partitions to be slow on its next Start
    or Stop, then make the group rebalance with a join; the joiner leaves again."""
    live = [c for c in ctx.live_consumers() if not c.stock]  # slowness is armed in thin consumers only
    if not live:
        return skipped(fault, "no thin consumer running")
    slow = max(live, key=lambda c: (len(c.assignment()), -live.index(c)))
    injected = time.time()
    slow.signal(signal.SIGUSR1)
    joiner = ctx.add_consumer()
    bound = ctx.member_bound() + ctx.timing.rebalance_timeout_s
    whole_at = ctx.wait_whole(_wait_bound(bound))
    joiner.terminate()
    restored = time.time()
    rejoined_at = ctx.wait_whole(_wait_bound(bound))
    # Disarm: an arming the rebalances left unused would otherwise bite in the
    # next fault, whose planned change would then be blamed for its duplicates.
    if slow.alive:
        slow.signal(signal.SIGUSR2)
    bit = any(e["ts"] >= injected for e in read_json_lines(slow.events_path))
    return _record(fault, f"{slow.name} (joined by {joiner.name})", injected, restored, injected, whole_at,
                   rejoined_at, bound, note="" if bit else "the slow member was sent no Start or Stop")


def big_group(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    """A crowd of thin members (:mod:`~zkcoord.drill.crowd`, one process)
    joins the group and stays for the hold, then crashes all at once (kill
    -9) or, when the fault is clean, leaves all at once (a planned change:
    not one record may be delivered twice). Its members write what they
    deliver and their Starts and Stops beside the consumers', so the checker
    judges them with the rest. The group must be whole without them within
    a member's bound of the kill or the leave."""
    count = ctx.big_group_members
    directory = ctx.cluster.directory / f"{ConsumerProcess.DIRECTORY_PREFIX}crowd-{fault.index}"
    bootstrap = ",".join(ctx.bootstrap or ctx.cluster.bootstrap)
    session_ms = int(ctx.timing.consumer_session_s * 1000)
    bound = ctx.member_bound()
    crowd = ManagedProcess(f"crowd of fault {fault.index}", directory, [
        sys.executable, "-m", "zkcoord.drill.crowd", "--bootstrap", bootstrap, "--group", ctx.group,
        "--topic", ctx.topic, "--session-timeout-ms", str(session_ms),
        *ctx.member_options(stock=False, options=ctx.crowd_args), "--members", str(count),
        "--directory", str(directory),
        # Gone by itself should the drill die without stopping it.
        "--max-s", str(round(fault.hold_s + CROWD_LEAVE_S + _wait_bound(bound)))])
    injected = time.time()
    crowd.start()
    try:
        _hold(fault.hold_s)
        status = _last_status(crowd)
    finally:
        restored = time.time()  # the SIGTERM or the kill: the time to whole counts from here
        if fault.clean:
            crowd.terminate(timeout=CROWD_LEAVE_S)
        else:
            crowd.kill()
    whole_at = ctx.wait_whole(_wait_bound(bound))
    target = (f"{count} members from one process ({status.get('registered', 0)} registered, "
              f"{status.get('holding', 0)} holding partitions), then "
              + ("all left cleanly" if fault.clean else "kill -9"))
    note = "" if status.get("registered") else "no member of the crowd registered in the hold"
    return _record(fault, target, injected, restored, restored, whole_at, whole_at, bound, note=note)


def _last_status(crowd: ManagedProcess) -> dict:
    """The last status line a crowd printed (empty: none yet)."""
    for line in reversed(crowd.log_tail(4000).splitlines()):
        try:
            status = json.loads(line)
        except ValueError:
            continue
        if isinstance(status, dict):
            return status
    return {}


def _planned(ctx: DrillCluster, fault: PlannedFault, target: str, change: Callable[[], None],
             extra_s: float = 0.0) -> FaultRecord:
    """A planned change: made at once, then the wait for a whole group (within
    a member's bound, and ``extra_s`` more for the change to be learnt)."""
    injected = time.time()
    change()
    bound = ctx.member_bound() + extra_s
    whole_at = ctx.wait_whole(_wait_bound(bound))
    return _record(fault, target, injected, injected, injected, whole_at, whole_at, bound)


def member_join(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    joiner = ctx.add_consumer(start=False)
    return _planned(ctx, fault, joiner.name, joiner.start)


def member_leave(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    live = ctx.live_consumers()
    if len(live) <= 1:
        return skipped(fault, "only one consumer running")
    leaver = _pick(live, fault)
    return _planned(ctx, fault, leaver.name, leaver.terminate)


def add_partitions(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    current = len(ctx.partitions())
    if current + 2 > MAX_PARTITIONS:
        return skipped(fault, f"the topic has {current} partitions already")
    return _planned(ctx, fault, f"{ctx.topic}: {current} -> {current + 2} partitions",
                    lambda: ctx.add_partitions(current + 2), extra_s=ctx.topic_change_lag_s)


# -- Apache Kafka's brokers (a drill over Kafka) -----------------------------------------------------


def kafka_recovery(injected: float, served_again: Optional[float], whole_at: Optional[float],
                   members_blind_s: float) -> tuple[float, float]:
    """Where a Kafka fault's time to whole counts from, and its bound.

    Kafka's own failover (the broken broker's session running out, a
    controller electing leaders, the producer finding them) is Kafka's: on a
    loaded machine it took 23 s for a 4 s session, and the members were whole
    0.6 s after Kafka had every partition served again. So the time counts
    from ``served_again``, when the producer had a record acknowledged again
    on every partition the broken broker led (at the latest ``whole_at``: a
    member may commit a record before the producer hears of it; from the
    injection if Kafka never served them again), and the bound is the
    members' part: following the new leaders and committing
    (:data:`KAFKA_MEMBERS_FOLLOW_S`), after waiting out a request they sent
    the broken broker, unanswered up to ``members_blind_s`` after the
    injection (a paused broker; a killed one refuses at once).

    >>> kafka_recovery(100.0, 123.2, 123.8, 0.0)  # Kafka slow: 23.2 s are its own
    (123.2, 6.0)
    >>> kafka_recovery(100.0, 106.0, 119.0, 15.0)  # a paused broker: the members' fetch hung till 115
    (106.0, 15.0)
    """
    start = min((t for t in (served_again, whole_at) if t is not None), default=injected)
    return start, KAFKA_MEMBERS_FOLLOW_S + max(0.0, injected + members_blind_s - start)


def _kafka_fault(ctx: DrillCluster, fault: PlannedFault, victim: int, target: str, wait_bound: float,
                 begin: Callable[[], None], back: Callable[[], None], members_blind_s: float = 0.0) -> FaultRecord:
    """Kafka node ``victim`` broken (``begin``) for the hold and until the
    group is whole without it (or long past ``wait_bound``), then brought
    back (``back``) and in sync on every partition again before the next
    fault. Routed around: whole once every partition ``victim`` led has
    another leader and a committed offset past the highest offset
    acknowledged before the fault (the producer wrote through the new
    leader, and the members read from it), timed and bounded by
    :func:`kafka_recovery`. A new leader is elected only by a live
    controller, so when ``victim`` was the controller that says a new one
    took office; should it have led none of the topic's partitions, whole is
    when the controller is another node (and Kafka served again then).

    The acknowledged offsets are taken at the first look, half a second in:
    an acknowledgement the broker sent just before it went is counted by then."""
    kafka = ctx.kafka
    led = sorted(p for p, replicas in kafka.replicas_of(ctx.topic).items() if replicas.leader == victim)
    looked = {"at": time.monotonic(), "recovered": False, "acknowledged": None, "watch": None,
              "new controller": None}

    def recovered() -> bool:
        if looked["recovered"] or time.monotonic() - looked["at"] < KAFKA_RECOVERY_LOOK_S:
            return looked["recovered"]
        looked["at"] = time.monotonic()
        if looked["acknowledged"] is None:
            looked["watch"] = ctx.watch_acknowledgements()
            looked["acknowledged"] = looked["watch"].above if looked["watch"] is not None else {}
            return False
        if led:
            leaders = kafka.replicas_of(ctx.topic)
            committed = read_offsets(ctx.cluster.zk, ctx.group)
            looked["recovered"] = all(
                leaders[p].leader not in (victim, -1)
                and committed.get((ctx.topic, p), 0) > looked["acknowledged"].get((ctx.topic, p), -1) + 1
                for p in led)
        else:
            looked["recovered"] = kafka.controller() != victim
            if looked["recovered"]:
                looked["new controller"] = time.time()
        return looked["recovered"]

    def whole() -> bool:
        return ctx.is_whole() and recovered()

    def served_again() -> Optional[float]:
        """When the producer had every partition ``victim`` led acknowledged again."""
        if not led:
            return looked["new controller"]
        first = looked["watch"].first if looked["watch"] is not None else {}
        times = [first.get((ctx.topic, p)) for p in led]
        return None if None in times else max(times)

    injected = time.time()
    begin()
    try:
        whole_at = _hold(fault.hold_s, whole)
        if whole_at is None:  # the broker stays away until the cluster and the group have routed around it
            try:
                whole_at = wait_until(lambda: whole() and time.time(), _wait_bound(wait_bound), interval=0.1,
                                      message="the group to be whole past the Kafka fault")
            except WaitTimeout:
                whole_at = None
    finally:
        back()
        wait_until(lambda: all(replicas.isr == frozenset(kafka.brokers)
                               for replicas in kafka.replicas_of(ctx.topic).values()),
                   KAFKA_REPLICATED_S, interval=0.5, message=f"broker {victim} in sync on every partition again")
        if looked["watch"] is not None:
            looked["watch"].close()
    restored = time.time()
    recovery_from, bound = kafka_recovery(injected, served_again(), whole_at, members_blind_s)
    rejoined_at = ctx.wait_whole(_wait_bound(wait_bound))
    notes = [f"Kafka served again {recovery_from - injected:.1f} s in"]
    if not led:
        notes.append("it led none of the topic's partitions")
    return _record(fault, f"{target} (led {len(led)} partitions)", injected, restored, recovery_from, whole_at,
                   rejoined_at, bound, note="; ".join(notes))


def _leader_of_picked(ctx: DrillCluster, fault: PlannedFault) -> Optional[int]:
    """The broker leading the partition the fault picks (None: that partition has no leader now)."""
    partitions = sorted(p for _, p in ctx.partitions())
    leader = ctx.kafka.leader_of(ctx.topic, partitions[fault.pick % len(partitions)])
    return leader if leader >= 0 else None


def kafka_failover_bound(ctx: DrillCluster) -> float:
    """A Kafka broker gone: its session with ZooKeeper or the controllers, then
    the failover (what the drill waits for, before it calls the group stuck)."""
    return ctx.timing.kafka_session_s + KAFKA_FAILOVER_SLACK_S


def kafka_leader_kill(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    victim = _leader_of_picked(ctx, fault)
    if victim is None:
        return skipped(fault, "the picked partition has no leader")
    broker = ctx.kafka.brokers[victim]
    return _kafka_fault(ctx, fault, victim, f"kafka broker {victim}", kafka_failover_bound(ctx), broker.kill,
                        lambda: ctx.kafka.restart(victim, timeout=KAFKA_RESTART_S))


def kafka_broker_pause(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    """A paused leader keeps its connections and the kernel still accepts
    new ones: a member's fetch already sent to it goes unanswered until the
    fetcher gives the broker up, and the fetcher's question for the new
    leaders may go to the same silent broker first and wait its timeout."""
    victim = _leader_of_picked(ctx, fault)
    if victim is None:
        return skipped(fault, "the picked partition has no leader")
    blind_s = REQUEST_TIMEOUT_S + PROBE_TIMEOUT_S
    wait_bound = max(ctx.timing.kafka_session_s, blind_s) + KAFKA_FAILOVER_SLACK_S
    return _kafka_fault(ctx, fault, victim, f"kafka broker {victim}", wait_bound, ctx.kafka.brokers[victim].pause,
                        lambda: ctx.kafka.resume(victim, timeout=KAFKA_RESTART_S), members_blind_s=blind_s)


def kafka_controller_kill(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    victim = ctx.kafka.controller()
    wait_bound = kafka_failover_bound(ctx) + KAFKA_CONTROLLER_FAILOVER_S
    return _kafka_fault(ctx, fault, victim, f"kafka controller {victim}", wait_bound, ctx.kafka.brokers[victim].kill,
                        lambda: ctx.kafka.restart(victim, timeout=KAFKA_RESTART_S))


def skipped(fault: PlannedFault, why: str) -> FaultRecord:
    """A fault the drill did not inject."""
    now = time.time()
    return _record(fault, "-", now, now, now, now, now, 0.0, note=f"skipped: {why}")


def interrupted(fault: PlannedFault, injected: float) -> FaultRecord:
    """A fault under way when the drill stopped: its window still covers what happened under it."""
    return _record(fault, "?", injected, time.time(), injected, None, None, 0.0,
                   note="the drill stopped during this fault")


ACTIONS: dict[str, Callable[[DrillCluster, PlannedFault], FaultRecord]] = {
    "coordinator-kill": coordinator_kill,
    "standby-kill": standby_kill,
    "consumer-kill": consumer_kill,
    "consumer-pause-long": consumer_pause,
    "consumer-pause-short": consumer_pause,
    "coordinator-pause-long": coordinator_pause,
    "coordinator-pause-short": coordinator_pause,
    "coordinator-zk-expiry": coordinator_zk_cut,
    "coordinator-zk-blip": coordinator_zk_cut,
    "member-to-coordinator-loss": one_way_loss,
    "coordinator-to-member-loss": one_way_loss,
    "zk-node-kill": zk_node_kill,
    "zk-quorum-loss": zk_quorum_loss,
    "consumer-partition": consumer_partition,
    "coordinator-members-partition": coordinator_members_partition,
    "stock-member-pause-long": stock_member_pause,
    "stock-member-group-cut": stock_member_group_cut,
    "slow-member": slow_member,
    "member-join": member_join,
    "member-leave": member_leave,
    "add-partitions": add_partitions,
    "big-group": big_group,
    "kafka-leader-kill": kafka_leader_kill,
    "kafka-broker-pause": kafka_broker_pause,
    "kafka-controller-kill": kafka_controller_kill,
}
assert set(ACTIONS) == set(KINDS), "every kind has an action"


def keep_population(ctx: DrillCluster) -> bool:
    """Between faults, keep the running consumers within one of what the drill
    asked for (joins and leaves drift it): start or cleanly stop members.
    Returns whether it changed anything."""
    live = ctx.live_consumers()
    changed = False
    while len(live) < ctx.consumers_wanted - 1:
        live.append(ctx.add_consumer())
        changed = True
    for extra in live[ctx.consumers_wanted + 1:]:
        extra.terminate()
        changed = True
    return changed


