"""Carrying faults out on a drill's cluster: each kind of
:mod:`~zkcoord.drill.schedule` as inject, hold, restore, and a wait until the
group is whole again, timed against the bound docs/DESIGN.md states.

Faults on the ZooKeeper connection of a server go through a TCP proxy the
drill puts between that server and the ensemble (cut: nothing forwarded
either way, the session expires when it outlasts the session timeout; heal:
forwarding again).

Over Apache Kafka (``DrillCluster.kafka``) the topic lives in Kafka, created
and grown with Kafka's admin API, and the Kafka kinds (``kafka_faults.py``)
break its brokers. What the faults act on is ``target.py``'s
:class:`DrillCluster`; the steps they share are ``fault_steps.py``'s.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import sys
import time
from typing import Callable, Optional

from zkcoord.drill.fault_steps import hold, pick, record, skipped, wait_bound
from zkcoord.drill.history import FaultRecord
from zkcoord.drill.kafka_faults import kafka_broker_pause, kafka_controller_kill, kafka_leader_kill
from zkcoord.drill.schedule import KINDS, PlannedFault
from zkcoord.drill.target import DrillCluster
from zkcoord.testing import ConsumerProcess, ManagedProcess, read_json_lines

log = logging.getLogger(__name__)

MAX_PARTITIONS = 24       # add-partitions stops growing the topic here
CROWD_LEAVE_S = 30.0      # a crowd's clean leave takes at most this long before it is killed


# -- the kinds ---------------------------------------------------------------------------------------


def _kill_server(ctx: DrillCluster, fault: PlannedFault, server, bound: float, what: str,
                 epoch_above: int = -1) -> FaultRecord:
    injected = time.time()
    server.kill()
    whole_at = hold(fault.hold_s, lambda: ctx.is_whole(epoch_above))
    if whole_at is None:
        whole_at = ctx.wait_whole(wait_bound(bound), epoch_above)
    # Restarted at once: the server waits out its killed self's registration.
    server.start(timeout=60)
    restored = time.time()
    ctx.cluster.wait_for_brokers(60)
    rejoined_at = ctx.wait_whole(wait_bound(bound))
    return record(fault, f"{what} server {server.server_id}", injected, restored, injected, whole_at, rejoined_at,
                   bound)


def coordinator_kill(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    return _kill_server(ctx, fault, ctx.coordinator(), ctx.coordinator_bound(), "coordinator",
                        epoch_above=ctx.coordinator_epoch())


def standby_kill(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    server = pick(ctx.standbys(), fault)
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
        whole_during = hold(fault.hold_s, whole if routed_around else None)
    finally:
        end()
    restored = time.time()
    rejoined_at = ctx.wait_whole(wait_bound(bound), epoch_above)
    if routed_around:
        return record(fault, target, injected, restored, injected, whole_during or rejoined_at, rejoined_at, bound)
    return record(fault, target, injected, restored, restored, rejoined_at, rejoined_at, bound)


def consumer_pause(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    consumer = pick(ctx.live_consumers(), fault)
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
    member = pick([c for c in ctx.live_consumers() if c.stock], fault)
    if member is None:
        return skipped(fault, "no stock member running")
    return _held(ctx, fault, member.name, ctx.stock_member_bound(), member.pause, member.resume,
                 routed_around=fault.hold_s > ctx.timing.consumer_session_s)


def stock_member_group_cut(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    """A stock member cut off from the broker its group's requests go to, and
    from nothing else: librdkafka revokes when its session runs out unheard,
    kafka-python (as Java's classic consumer) fetches on from the other
    leaders, which must refuse it once its partitions may be started elsewhere."""
    member = pick([c for c in ctx.live_consumers() if c.stock and c.netns is not None], fault)
    if member is None:
        return skipped(fault, "no stock member running in a namespace")
    server = ctx.group_broker()
    return _held(ctx, fault, f"{member.name} from broker {server.server_id}", ctx.stock_member_bound(),
                 lambda: member.netns.drop_port(server.broker_port), member.netns.heal,
                 routed_around=fault.hold_s > ctx.timing.consumer_session_s)


def consumer_partition(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    consumer = pick([c for c in ctx.live_consumers() if c.netns is not None], fault)
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
    consumer = pick([c for c in ctx.live_consumers() if c.netns is not None], fault)
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
    consumer = pick(ctx.live_consumers(), fault)
    if consumer is None:
        return skipped(fault, "no consumer running")
    injected = time.time()
    consumer.kill()
    bound = ctx.bound_for(consumer)
    whole_at = ctx.wait_whole(wait_bound(bound))
    consumer.start()  # a new process: a new member
    restored = time.time()
    rejoined_at = ctx.wait_whole(wait_bound(bound))
    return record(fault, consumer.name, injected, restored, injected, whole_at, rejoined_at, bound)


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
    whole_at = ctx.wait_whole(wait_bound(bound))
    joiner.terminate()
    restored = time.time()
    rejoined_at = ctx.wait_whole(wait_bound(bound))
    # Disarm: an arming the rebalances left unused would otherwise bite in the
    # next fault, whose planned change would then be blamed for its duplicates.
    if slow.alive:
        slow.signal(signal.SIGUSR2)
    bit = any(e["ts"] >= injected for e in read_json_lines(slow.events_path))
    return record(fault, f"{slow.name} (joined by {joiner.name})", injected, restored, injected, whole_at,
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
        "--max-s", str(round(fault.hold_s + CROWD_LEAVE_S + wait_bound(bound)))])
    injected = time.time()
    crowd.start()
    try:
        hold(fault.hold_s)
        status = _last_status(crowd)
    finally:
        restored = time.time()  # the SIGTERM or the kill: the time to whole counts from here
        if fault.clean:
            crowd.terminate(timeout=CROWD_LEAVE_S)
        else:
            crowd.kill()
    whole_at = ctx.wait_whole(wait_bound(bound))
    target = (f"{count} members from one process ({status.get('registered', 0)} registered, "
              f"{status.get('holding', 0)} holding partitions), then "
              + ("all left cleanly" if fault.clean else "kill -9"))
    note = "" if status.get("registered") else "no member of the crowd registered in the hold"
    return record(fault, target, injected, restored, restored, whole_at, whole_at, bound, note=note)


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
    whole_at = ctx.wait_whole(wait_bound(bound))
    return record(fault, target, injected, injected, injected, whole_at, whole_at, bound)


def member_join(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    joiner = ctx.add_consumer(start=False)
    return _planned(ctx, fault, joiner.name, joiner.start)


def member_leave(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    live = ctx.live_consumers()
    if len(live) <= 1:
        return skipped(fault, "only one consumer running")
    leaver = pick(live, fault)
    return _planned(ctx, fault, leaver.name, leaver.terminate)


def add_partitions(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    current = len(ctx.partitions())
    if current + 2 > MAX_PARTITIONS:
        return skipped(fault, f"the topic has {current} partitions already")
    return _planned(ctx, fault, f"{ctx.topic}: {current} -> {current + 2} partitions",
                    lambda: ctx.add_partitions(current + 2), extra_s=ctx.topic_change_lag_s)


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
