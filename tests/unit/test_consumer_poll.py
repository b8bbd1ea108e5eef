"""Consumer.poll() against the lease and the callbacks, with a fake fetcher
and the membership's network thread never started: the test plays its part."""

from __future__ import annotations

import pytest

from zkcoord import wire
from zkcoord.consumer.consumer import Consumer
from zkcoord.consumer.membership import GroupMembership, MembershipFailed
from zkcoord.consumer.protocol import LeaseExpired
from zkcoord.records import Record

A, B = ("t", 0), ("t", 1)


class FakeFetcher:
    def __init__(self, brokers, client_id):
        self.next: dict = {}
        self.log: dict = {A: list(range(100)), B: list(range(100))}

    def assignment(self):
        return set(self.next)

    def assign(self, positions):
        for tp, offset in positions.items():
            self.next[tp] = 40 if offset < 0 else offset  # a reset lands on 40

    def position(self, tp):
        return self.next.get(tp)

    def revoke(self, partitions):
        for tp in partitions:
            self.next.pop(tp, None)

    def fetch(self, max_records, timeout_s):
        out = []
        for tp, offset in self.next.items():
            while offset < 100 and len(out) < max_records:
                out.append(Record(tp[0], tp[1], offset, None, b"v", 0))
                offset += 1
            self.next[tp] = offset
        return out

    def close(self):
        pass


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def consumer(monkeypatch):
    monkeypatch.setattr(GroupMembership, "start", lambda self: None)
    events = []
    c = Consumer(["127.0.0.1:1"], group="g", topics=["t"], session_timeout_ms=10_000, max_poll_records=10,
                 auto_offset_reset="largest", fetcher_factory=FakeFetcher,
                 on_assign=lambda p: events.append(("assign", sorted(p))),
                 on_revoke=lambda p: events.append(("revoke", sorted(p))))
    c.events = events
    c.clock = Clock()
    membership = c.membership
    membership.clock = c.clock
    membership.brokers = [wire.Endpoint(1, "127.0.0.1", 9092)]
    protocol = membership.protocol
    protocol.register(c.clock())
    protocol.registered(wire.RegisterConsumerResponse(coordinator_epoch=1))
    yield c
    c._closed = True


def push(consumer, request):
    return consumer.membership.protocol.answer(request, consumer.clock())


def start(*tps, generation=1):
    return wire.StartRequest(coordinator_epoch=1, generation=generation, strategy="range",
                             partitions=tuple(wire.TopicPartitionOffset(t, p, -1) for t, p in tps))


def test_callbacks_run_on_the_application_thread_in_order(consumer):
    push(consumer, start(A))
    assert consumer.events == []  # not on the network thread
    records = consumer.poll(0)
    assert consumer.events == [("assign", [A])]
    assert records and all((r.topic, r.partition) == A for r in records)
    push(consumer, wire.StopRequest(coordinator_epoch=1, generation=2, revoke_all=True))
    assert consumer.poll(0) == []
    assert consumer.events == [("assign", [A]), ("revoke", [A])]


def test_poll_hands_out_nothing_past_the_lease_and_moves_no_position(consumer):
    # Finding 4: a member paused past its session resumes with records buffered.
    push(consumer, start(A))
    consumer.poll(0)
    position = consumer.offsets()[A]
    consumer.clock.now += 10.0  # the lease ran from the registration
    assert consumer.poll(0) == []
    assert consumer.offsets()[A] == position
    # The network thread then finds the lease gone and stops everything:
    # the final offset is the last one handed out, so nothing is lost.
    with pytest.raises(LeaseExpired):
        consumer.membership.protocol.check_lease(consumer.clock())
    assert consumer.membership.protocol.handover == {A: position}


def test_a_reset_start_reports_where_it_began_before_the_first_record(consumer):
    # Finding 7: a LATEST start stopped before its first poll reports the
    # resolved position, so the next owner does not reset again and skip.
    push(consumer, start(A))
    answer = push(consumer, wire.StopRequest(coordinator_epoch=1, generation=2, revoke_all=True))
    assert wire.offsets_of(answer.offsets) == {A: 40}


def test_an_error_that_ended_the_network_thread_is_raised_by_poll(consumer):
    # Finding 9: the thread used to die quietly and poll() returned nothing for ever.
    def run():
        raise RuntimeError("listener bug")

    consumer.membership._run_until_closed = run
    consumer.membership._run()
    with pytest.raises(MembershipFailed, match="listener bug"):
        consumer.poll(0)


def test_poll_batch_hands_out_what_poll_would_as_arrow_columns(consumer):
    pytest.importorskip("pyarrow")
    push(consumer, start(A, B))
    batch = consumer.poll_batch(0)
    assert batch.num_rows == 10  # max_poll_records
    rows = batch.to_pylist()
    # Greedy from one partition (seed 003), from where the reset put it.
    assert [(r["topic"], r["partition"], r["offset"], r["value"]) for r in rows] == \
        [("t", 0, o, b"v") for o in range(40, 50)]
    assert consumer.offsets()[A] == 50
    assert consumer.poll(0)[0].offset == 50  # the two calls share one position
    push(consumer, wire.StopRequest(coordinator_epoch=1, generation=2, revoke_all=True))
    assert consumer.poll_batch(0).num_rows == 0


class LateFetcher(FakeFetcher):
    """Resolves a reset start only later (no leader answered at assign)."""

    def __init__(self, brokers, client_id):
        super().__init__(brokers, client_id)
        self.starts: dict = {}

    def assign(self, positions):
        for tp, offset in positions.items():
            self.starts[tp] = None if offset < 0 else offset

    def position(self, tp):
        return self.starts.get(tp)

    def start_offset(self, tp):
        return self.starts.get(tp)

    def assignment(self):
        return set(self.starts)

    def fetch(self, max_records, timeout_s):
        return []


def test_a_reset_start_resolved_late_is_still_reported_at_a_stop(consumer):
    # Review finding R2: the start came after on_start; a Stop before the first
    # record must still hand over where the reset put the partition.
    consumer._fetcher_factory = LateFetcher
    push(consumer, start(A))
    assert consumer.offsets() == {}
    consumer._fetcher.starts[A] = 40  # a leader answers: the fetch thread resolves it
    answer = push(consumer, wire.StopRequest(coordinator_epoch=1, generation=2, revoke_all=True))
    assert wire.offsets_of(answer.offsets) == {A: 40}


def test_a_start_whose_lease_ran_out_before_poll_is_never_announced(consumer):
    # Drill finding: a member slow over a Start applied it after its lease had
    # run out and the partitions had gone to another member; on_assign then
    # told the application it owned them. It must hear neither assign nor revoke.
    push(consumer, start(A))
    consumer.poll(0)
    push(consumer, start(A, B))
    consumer.clock.now += 10.0  # slow over the Start: the lease ran out meanwhile
    assert consumer.poll(0) == []
    assert consumer.events == [("assign", [A])]  # B waits: the lease is not held
    with pytest.raises(LeaseExpired):
        consumer.membership.protocol.check_lease(consumer.clock())
    assert consumer.poll(0) == []
    assert consumer.events == [("assign", [A]), ("revoke", [A])]  # B withdrawn unheard

