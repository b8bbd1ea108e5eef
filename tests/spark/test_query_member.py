"""The consistent-region handoff of QueryMember, driven directly (no Spark,
no sockets): a Stop waits for the batch in flight and answers with the
offsets of the last committed batch; a stopped query leaves with them at
once."""

from __future__ import annotations

import threading
import time

from zkcoord import wire
from zkcoord.consumer.protocol import MemberProtocol
from zkcoord.spark.group import QueryMember
from zkcoord.spark.offsets import StreamOffset
from zkcoord.spark.options import parse_options

A, B = ("t", 0), ("t", 1)


def member(handoff_ms: int = 5000) -> QueryMember:
    options = parse_options({"zookeeper": "unused:1", "subscribe": "t", "group": "g",
                             "handoffTimeoutMs": str(handoff_ms)}, streaming=True)
    return QueryMember(options, view=None)


def test_stop_waits_for_the_batch_in_flight_then_hands_over_its_end():
    m = member()
    m.on_start({A: 5, B: -1})
    with m.planning() as plan:
        assert plan.owned(StreamOffset({})) == {A: 5, B: None}
        plan.planned(StreamOffset({A: 9, B: 4}, {A: 5, B: 0}), reading={A, B})
    answer = {}
    stopper = threading.Thread(target=lambda: answer.update(m.on_stop(frozenset({A}))))
    stopper.start()
    stopper.join(0.3)
    assert stopper.is_alive(), "the Stop must wait while a batch reading A is in flight"
    with m.planning() as plan:  # Spark plans the next batch: the one ending at A=9 is committed
        owned = plan.owned(StreamOffset({A: 9, B: 4}))
        plan.planned(StreamOffset({A: 9, B: 6}), reading={B})
    stopper.join(5)
    assert answer == {A: 9}
    assert owned == {B: None}, "a partition being stopped is no longer planned"
    assert m.offsets() == {B: 4}


def test_stop_of_a_partition_never_planned_returns_the_granted_offset():
    m = member()
    m.on_start({A: 7, B: -1})
    assert m.on_stop(frozenset({A, B})) == {A: 7}
    assert m.granted() == set()


def test_stop_gives_up_waiting_after_the_handoff_timeout():
    m = member(handoff_ms=200)
    m.on_start({A: 0})
    with m.planning() as plan:
        plan.owned(StreamOffset({A: 3}))
        plan.planned(StreamOffset({A: 8}), reading={A})
    assert m.on_stop(frozenset({A})) == {A: 3}  # the last committed batch, not the one in flight


def test_readers_pickle_without_their_connections():
    import pickle
    import threading as th

    from zkcoord.spark.source import BatchReader, StreamReader

    options = parse_options({"zookeeper": "unused:1", "subscribe": "t", "group": "g"}, streaming=True)
    reader = StreamReader(options)
    reader._view._zk = th.Lock()  # stands for a live session: unpicklable
    reader._group = member()
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.options == options and copy._group is None and copy._view._zk is None
    batch = BatchReader(parse_options({"zookeeper": "unused:1", "subscribe": "t"}, streaming=False))
    assert pickle.loads(pickle.dumps(batch)).options == batch.options


class Leaving:
    """What GroupMembership.close() does to its listener: the protocol's leave."""

    def __init__(self, m: QueryMember):
        self.protocol = MemberProtocol(wire.RegisterConsumerRequest(group_id="g", consumer_id="q"), m)
        self.protocol.register(0.0)
        self.protocol.registered(wire.RegisterConsumerResponse(coordinator_epoch=1))
        self.request = None

    def close(self) -> None:
        self.request = self.protocol.leave()


def test_a_stopped_query_leaves_with_its_last_committed_batch_without_waiting():
    m = member(handoff_ms=30_000)
    membership = m._membership = Leaving(m)
    membership.protocol.answer(wire.StartRequest(coordinator_epoch=1, generation=1, partitions=[
        wire.TopicPartitionOffset("t", 0, 0), wire.TopicPartitionOffset("t", 1, 2)]), 0.0)
    with m.planning() as plan:
        plan.owned(StreamOffset({A: 4, B: 2}))
        plan.planned(StreamOffset({A: 9, B: 2}), reading={A})  # Spark stops the query during this batch
    began = time.monotonic()
    m.close()
    assert time.monotonic() - began < 5, "Spark calls no more: the batch in flight never commits"
    assert wire.offsets_of(membership.request.offsets) == {A: 4, B: 2}
