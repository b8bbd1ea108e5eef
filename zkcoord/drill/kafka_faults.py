"""Faults on Apache Kafka's brokers, for a drill over Kafka: a leader
killed, a broker paused, the controller killed. Membership does not change,
so the group is whole again once the broken broker's leaderships moved and
the group committed, on those partitions, records acknowledged after the
fault (the producer and the members followed the new leaders).
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Optional

from zkcoord.drill.fault_steps import hold, record, skipped, wait_bound
from zkcoord.drill.history import FaultRecord
from zkcoord.drill.schedule import PlannedFault
from zkcoord.drill.target import DrillCluster
from zkcoord.fetch.columnar import PROBE_TIMEOUT_S, REQUEST_TIMEOUT_S
from zkcoord.testing import WaitTimeout, wait_until
from zkcoord.zk.nodes import read_offsets

log = logging.getLogger(__name__)

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
# A new controller first reads the cluster's state (ZooKeeper mode: every
# topic and partition from ZooKeeper; KRaft: the quorum elects and the new
# leader catches up on the metadata log) before it moves any leadership.
KAFKA_CONTROLLER_FAILOVER_S = 4.0
# A Kafka node started again (a JVM, its logs recovered, registered) or woken
# may take this long to serve on a busy 2-core machine (KRaft's took over a minute).
KAFKA_RESTART_S = 180.0
KAFKA_RECOVERY_LOOK_S = 0.5  # how often a Kafka fault's recovery is looked at (each look asks the cluster)
KAFKA_REPLICATED_S = 120.0  # longest a broker back may take to be in sync on every partition again


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


def _kafka_fault(ctx: DrillCluster, fault: PlannedFault, victim: int, target: str, stuck_after: float,
                 begin: Callable[[], None], back: Callable[[], None], members_blind_s: float = 0.0) -> FaultRecord:
    """Kafka node ``victim`` broken (``begin``) for the hold and until the
    group is whole without it (or long past ``stuck_after``), then brought
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
        whole_at = hold(fault.hold_s, whole)
        if whole_at is None:  # the broker stays away until the cluster and the group have routed around it
            try:
                whole_at = wait_until(lambda: whole() and time.time(), wait_bound(stuck_after), interval=0.1,
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
    rejoined_at = ctx.wait_whole(wait_bound(stuck_after))
    notes = [f"Kafka served again {recovery_from - injected:.1f} s in"]
    if not led:
        notes.append("it led none of the topic's partitions")
    return record(fault, f"{target} (led {len(led)} partitions)", injected, restored, recovery_from, whole_at,
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
    stuck_after = max(ctx.timing.kafka_session_s, blind_s) + KAFKA_FAILOVER_SLACK_S
    return _kafka_fault(ctx, fault, victim, f"kafka broker {victim}", stuck_after, ctx.kafka.brokers[victim].pause,
                        lambda: ctx.kafka.resume(victim, timeout=KAFKA_RESTART_S), members_blind_s=blind_s)


def kafka_controller_kill(ctx: DrillCluster, fault: PlannedFault) -> FaultRecord:
    victim = ctx.kafka.controller()
    stuck_after = kafka_failover_bound(ctx) + KAFKA_CONTROLLER_FAILOVER_S
    return _kafka_fault(ctx, fault, victim, f"kafka controller {victim}", stuck_after, ctx.kafka.brokers[victim].kill,
                        lambda: ctx.kafka.restart(victim, timeout=KAFKA_RESTART_S))
