"""Fetch fences in a real ZooKeeper (broker/fence_store.py): two brokers'
publishers and a reader, as each broker runs them."""

from __future__ import annotations

import gevent
from kazoo.client import KazooClient

from zkcoord.broker.fence_store import FencePublisher, FenceReader
from zkcoord.broker.groups.fences import Tie
from zkcoord.testing import wait_until
from zkcoord.zk.gevent_handler import GeventHandler
from zkcoord.zk.layout import FetchFence

TIE = Tie("10.0.0.7", "zkcoord-consume-42")
IDLE_MS = 4_000  # the writers look every second


def _client(connect: str) -> KazooClient:
    client = KazooClient(hosts=connect, handler=GeventHandler())
    client.start()
    return client


def _fence(member: str, *partitions: int, tie: Tie = TIE, group: str = "g") -> FetchFence:
    return FetchFence(group, member, tie.host, tie.client_id, frozenset(("t", p) for p in partitions))


def test_a_client_that_let_go_at_one_broker_is_no_longer_refused_by_the_fences_another_broker_kept(zk_connect):
    # The client followed its group to broker B; broker A, which it left,
    # abandoned its old member once silent and fenced what it held. Its
    # fresh join at B shows it let go: A's fence in that group goes, B's own
    # fences stay (B's rules narrow them), and other clients' stay.
    old_broker, new_broker = _client(zk_connect), _client(zk_connect)
    other = Tie("10.0.0.8", "zkcoord-consume-43")
    lifted = []
    at_old = FencePublisher(old_broker, IDLE_MS, on_lifted=lifted.append)
    at_new = FencePublisher(new_broker, IDLE_MS)
    reader = FenceReader(new_broker, IDLE_MS)
    try:
        at_old.want({("g", "m1"): _fence("m1", 0, 1), ("g", "x"): _fence("x", 2, tie=other),
                     ("h", "m0"): _fence("m0", 3, group="h")})
        at_new.want({("g", "m2"): _fence("m2", 4)})
        wait_until(lambda: reader.refused(*TIE) == {("t", p) for p in (0, 1, 3, 4)}, timeout=10,
                   message="every fence read", sleep=gevent.sleep)
        reader.lift("g", TIE)
        wait_until(lambda: reader.refused(*TIE) == {("t", 3), ("t", 4)}, timeout=10, message="the old fence lifted",
                   sleep=gevent.sleep)
        assert reader.refused(*other) == {("t", 2)}
        # Its writer learns it and drops the fence, so as not to write it
        # again (after a lost session, say); it keeps its other fences.
        wait_until(lambda: lifted == [("g", "m1")], timeout=10, message="the old writer told", sleep=gevent.sleep)
        assert sorted(at_old._wanted) == [("g", "x"), ("h", "m0")]
    finally:
        for closing in (reader, at_old, at_new):
            closing.close()
        old_broker.stop()
        new_broker.stop()
