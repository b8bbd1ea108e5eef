"""A connection lost on one side only, between the coordinator and one member,
with real processes: the member runs in a network namespace of its own, and
the packets of its coordinator connection are dropped one way only.

Member to coordinator: the member's answers never arrive. It stops when its
lease ends and registers again on a new connection, while the coordinator
still waits on the old one; it is the same incarnation, so it takes its place
back at once with the offsets it consumed: nothing is delivered twice (it was
refused CONSUMER_ID_IN_USE until the coordinator timed the old connection
out, its partitions went to others from the last commit, and 1,100 to 1,500
records per fault were delivered again).

Coordinator to member: the member hears nothing, stops when its lease ends
and registers again; closing the old connection, it is seen to go, and the
same incarnation lifts its own fence with its handover: the same.
"""

from __future__ import annotations

import pytest

from tests.e2e.checks import delivered_values, wait_whole
from tests.e2e.test_rebalancing import Production, delivered_exactly_once, more_deliveries
from zkcoord.admin.topics import create_topic
from zkcoord.testing import netns, partitions_of, wait_until

WHY_NOT = netns.unavailable_reason()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")

SESSION_MS = 4000
SETTLE_S = 30


@pytest.mark.parametrize("inbound", [True, False], ids=["member-to-coordinator", "coordinator-to-member"])
def test_a_member_whose_connection_is_lost_one_way_takes_its_place_back_and_redelivers_nothing(cluster, zk,
                                                                                                 inbound):
    create_topic(zk, "t", 6)
    partitions = partitions_of(zk, ["t"])
    namespace = netns.NetworkNamespace(1).create()
    try:
        cut_off = cluster.add_consumer("g", topics=["t"], session_timeout_ms=SESSION_MS, netns=namespace)
        other = cluster.add_consumer("g", topics=["t"], session_timeout_ms=SESSION_MS)
        consumers = [cut_off, other]
        wait_until(lambda: wait_whole(zk, "g", consumers, partitions, timeout=SETTLE_S) is not None
                   and all(c.assignment() for c in consumers), timeout=SETTLE_S, message="settled")
        held = set(cut_off.assignment())
        coordinator = cluster.servers[cluster.coordinator_id()]
        member_id = cut_off.status()["consumer_id"]
        # Its answers lost, it comes back while the coordinator still holds
        # the old connection; its requests lost, the coordinator sees that
        # connection close when the member gives it up, and takes the
        # member's handover and lifts its fence as it registers again.
        back = (f"member {member_id} is back on a new connection" if inbound
                else f"member {member_id} hands over offsets")
        production = Production(cluster, "t")
        wait_until(lambda: len(delivered_values(consumers)) > 300, timeout=SETTLE_S, message="deliveries")
        assert namespace.drop_one_way(coordinator.port, inbound=inbound), "no coordinator connection to drop"
        # Its lease ends, it stops, and it is back on a new connection while
        # the coordinator still holds the old one.
        wait_until(lambda: back in coordinator.log_tail(200_000), timeout=SETTLE_S,
                   message="the cut-off member to take its place back")
        wait_until(lambda: set(cut_off.assignment()) == held, timeout=SETTLE_S,
                   message="the member running its partitions again")
        more_deliveries(consumers, 300, SETTLE_S, "deliveries after it came back")
        delivered_exactly_once(consumers, production.stop(), SETTLE_S)
        assert "already registered" not in coordinator.log_tail(200_000)
    finally:
        namespace.remove()
