"""Consumer.poll() against the lease and the callbacks, with a fake fetcher
and the membership's network thread never started: the test plays its part
(on a thread of its own where a Stop has to wait for the application)."""

from __future__ import annotations

import threading
import time

import pytest

from zkcoord import wire
from zkcoord.consumer.consumer import Consumer
from zkcoord.member.membership import GroupMembership, MembershipFailed
from zkcoord.member.protocol import LeaseExpired
from zkcoord.records import Record
from zkcoord.wire.codec import Frame

A, B = ("t", 0), ("t", 1)


class FakeFetcher:
    def __init__(self, brokers, client_id, metrics=None):
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
    """The lease clock, moved by hand, and a wall clock that keeps its
    distance from it unless a test moves it alone (a paused machine)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.wall_ahead = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.now + self.wall_ahead


@pytest.fixture
def make_consumer(monkeypatch):
    """Registered consumers (T = 10 s, 10 records a poll) on clocks the test moves."""
    monkeypatch.setattr(GroupMembership, "start", lambda self: None)
    monkeypatch.setattr(GroupMembership, "close", lambda self, timeout=None: None)  # no thread to join
    made = []

    def make() -> Consumer:
        events = []
        c = Consumer(["127.0.0.1:1"], group="g", topics=["t"], session_timeout_ms=10_000, max_poll_records=10,
                     auto_offset_reset="largest", fetcher_factory=FakeFetcher,
                     on_assign=lambda p: events.append(("assign", sorted(p))),
                     on_revoke=lambda p: events.append(("revoke", sorted(p))))
        c.events = events
        c.clock = Clock()
        membership = c.membership
        membership.clock = c.clock
        membership.wall_clock = c.clock.wall
        membership.brokers = [wire.NodeAddress(1, "127.0.0.1", 9092)]
        protocol = membership.protocol
        protocol.register(c.clock())
        protocol.registered(wire.RegisterConsumerResponse(coordinator_epoch=1))
        made.append(c)
        return c

    yield make
    for c in made:
        c._closed = True


@pytest.fixture
def consumer(make_consumer) -> Consumer:
    return make_consumer()


def push(consumer, request):
    return consumer.membership.protocol.answer(request, consumer.clock())


def push_while_polling(consumer, request, timeout: float = 5.0):
    """Push ``request`` from a thread of its own, as the network thread
    would, while the application goes on polling: a Stop waits for the
    application to finish its batch. Returns the answer and what was polled."""
    answers, polled = [], []
    network = threading.Thread(target=lambda: answers.append(push(consumer, request)))
    network.start()
    deadline = time.monotonic() + timeout
    while network.is_alive():
        assert time.monotonic() < deadline, f"no answer to {request} within {timeout}s"
        polled += consumer.poll(0)
        network.join(0.01)
    return answers[0], polled


def ping():
    return wire.PingRequest(coordinator_epoch=1, generation=1)


def stop(*tps, generation=2):
    return wire.StopRequest(coordinator_epoch=1, generation=generation, revoke_all=False,
                            partitions=tuple(wire.TopicPartition(t, p) for t, p in tps))


def start(*tps, generation=1):
    return wire.StartRequest(coordinator_epoch=1, generation=generation, strategy="range",
                             partitions=tuple(wire.TopicPartitionOffset(t, p, -1) for t, p in tps))


def test_callbacks_run_on_the_application_thread_in_order(consumer):
    push(consumer, start(A))
    assert consumer.events == []  # not on the network thread
    records = consumer.poll(0)
    assert consumer.events == [("assign", [A])]
    assert records and all((r.topic, r.partition) == A for r in records)
    push_while_polling(consumer, wire.StopRequest(coordinator_epoch=1, generation=2, revoke_all=True))
    assert consumer.poll(0) == []
    assert consumer.events == [("assign", [A]), ("revoke", [A])]


def test_poll_hands_out_nothing_past_the_lease_and_moves_no_position(consumer):
    # Finding 4: a member paused past its session resumes with records buffered.
    push(consumer, start(A))
    position = consumer.poll(0)[-1].offset + 1
    consumer.clock.now += 10.0  # the lease ran from the registration
    assert consumer.poll(0) == []
    assert consumer.poll(0) == []  # finishing what the one before handed out: nothing
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
    assert consumer.poll(0)[0].offset == 50  # the two calls share one position
    assert consumer.offsets()[A] == 50  # and the second finished the first's batch
    push_while_polling(consumer, wire.StopRequest(coordinator_epoch=1, generation=2, revoke_all=True))
    assert consumer.poll_batch(0).num_rows == 0


class LateFetcher(FakeFetcher):
    """Resolves a reset start only later (no leader answered at assign)."""

    def __init__(self, brokers, client_id, metrics=None):
        super().__init__(brokers, client_id, metrics)
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



# -- what the application has finished with (the offsets reported) ----------------------------------


def test_a_ping_during_a_batch_reports_the_offsets_before_it_and_after_it_once_the_application_polls_again(
        consumer):
    # Issue 31, item 6: a ping answered while the application processed a
    # batch reported the batch as consumed, and a crash then skipped it.
    push(consumer, start(A))
    assert [r.offset for r in consumer.poll(0)] == list(range(40, 50))
    during = push(consumer, ping())
    assert wire.offsets_of(during.offsets) == {A: 40}
    consumer.poll(0)  # done with 40..49, handed 50..59
    after = push(consumer, ping())
    assert wire.offsets_of(after.offsets) == {A: 50}


def test_a_stop_waits_for_the_application_to_finish_its_batch_and_hands_over_what_follows_it(consumer):
    # A planned change delivers nothing twice: the next owner starts after
    # the batch the application holds, once it has finished with it.
    push(consumer, start(A, B))
    assert {(r.topic, r.partition) for r in consumer.poll(0)} == {A}  # 40..49
    answers = []
    network = threading.Thread(target=lambda: answers.append(push(consumer, stop(A))))
    network.start()
    network.join(0.3)
    assert network.is_alive(), "the Stop answered while the application held records of A"
    polled = consumer.poll(0)  # the application is done with its batch
    network.join(5.0)
    assert wire.offsets_of(answers[0].offsets) == {A: 50}
    assert all((r.topic, r.partition) == B for r in polled)  # nothing of A since the Stop


def test_a_stop_that_finds_no_time_to_wait_hands_the_unfinished_batch_to_the_next_owner_again(consumer):
    # At least once rather than maybe never: the application may fail in it.
    push(consumer, start(A))
    assert consumer.poll(0)  # 40..49
    consumer.clock.now += 6.0  # the lease (to 1010) has less than half a session timeout left
    answer = push(consumer, stop(A))
    assert wire.offsets_of(answer.offsets) == {A: 40}


def test_close_counts_the_batch_as_finished_but_an_exception_out_of_the_with_block_does_not(make_consumer):
    closed, failed = make_consumer(), make_consumer()
    for c in (closed, failed):
        push(c, start(A))
        assert c.poll(0)  # 40..49
    closed.close()
    with pytest.raises(RuntimeError):
        with failed:
            raise RuntimeError("the application failed in the middle of its batch")
    # What each member's leave carries (the network thread sends it).
    assert wire.offsets_of(closed.membership.protocol.leave().offsets) == {A: 50}
    assert wire.offsets_of(failed.membership.protocol.leave().offsets) == {A: 40}


# -- a paused machine ----------------------------------------------------------------------------------


def test_after_a_pause_the_lease_clock_did_not_count_poll_hands_out_nothing_until_the_coordinator_renews_the_lease(
        consumer):
    # Issue 31, item 5: a virtual machine held by its hypervisor wakes with
    # its lease clock where it stopped; only its wall clock is put right.
    push(consumer, start(A))  # at 1000: the lease runs to 1010
    assert [r.offset for r in consumer.poll(0)] == list(range(40, 50))
    consumer.clock.now += 1.0
    consumer.clock.wall_ahead += 30.0  # paused 30 s
    assert consumer.poll(0) == []
    consumer.clock.now += 1.0
    push(consumer, ping())  # proves the answer sent at 1000, before the pause, arrived
    assert consumer.poll(0) == []
    consumer.clock.now += 1.0
    push(consumer, ping())  # proves the one sent at 1002, after the pause
    assert [r.offset for r in consumer.poll(0)] == list(range(50, 60))


class ScriptedChannel:
    """The coordinator's end of the network thread's connection: each step
    moves the clocks and returns the request to read; then the member closes."""

    def __init__(self, membership, steps):
        self.membership, self.steps, self.sent = membership, list(steps), []

    def receive(self, timeout=None):
        if not self.steps:
            self.membership._closing.set()
            return None
        request = self.steps.pop(0)()
        return Frame(type=request.TYPE, version=1, correlation_id=len(self.sent) + 1, message=request)

    def send(self, message, correlation_id=None):
        self.sent.append(message)
        return correlation_id


def test_the_network_thread_notices_a_pause_when_it_answers(consumer):
    push(consumer, start(A))

    def paused_then_pinged():
        consumer.clock.now += 1.0
        consumer.clock.wall_ahead += 30.0
        return ping()

    channel = ScriptedChannel(consumer.membership, [ping, paused_then_pinged])
    consumer.membership._serve(channel)
    assert [type(m) for m in channel.sent] == [wire.PingResponse] * 2
    # Read without the application's own reading of the clocks.
    assert not consumer.membership.protocol.holds_lease(consumer.clock())
