"""The record buffer behind poll(): seed 003's greedy round robin with a cursor.

Seed 003's example: partitions A, B and C, max.poll.records 300. Greedy takes
as much as it can from one partition before moving to the next, and the
next poll() starts where the last one left off, so that a partition whose
data keeps arriving cannot keep the others from being consumed.
"""

from __future__ import annotations

import doctest
import itertools

from hypothesis import given
from hypothesis import strategies as st

from zkcoord.fetch import buffer
from zkcoord.fetch.buffer import RecordBuffer
from zkcoord.records import Record


class Producer:
    """Makes records with consecutive offsets per partition."""

    def __init__(self) -> None:
        self.next_offset: dict[int, int] = {}

    def records(self, partition: int, count: int, topic: str = "t") -> list[Record]:
        start = self.next_offset.get(partition, 0)
        self.next_offset[partition] = start + count
        return [Record(topic, partition, o, None, b"v%d" % o, 0) for o in range(start, start + count)]


def served(records):
    """The partitions of ``records`` in the order they were served, each once."""
    return [p for p, _ in itertools.groupby(r.partition for r in records)]


def test_the_docstring_example():
    assert doctest.testmod(buffer).failed == 0


def test_an_empty_buffer_gives_nothing():
    assert RecordBuffer().take(10) == []


def test_seed_003_example_greedy_from_one_partition_then_the_next():
    made = Producer()
    buf = RecordBuffer()
    for partition in (0, 1, 2):  # A, B, C
        buf.add(made.records(partition, 250))
    first = buf.take(300)
    assert [(p, len(list(g))) for p, g in itertools.groupby(r.partition for r in first)] == [(0, 250), (1, 50)]
    # The next poll starts where this one left off: B, not A.
    buf.add(made.records(0, 250))
    second = buf.take(300)
    assert [(p, len(list(g))) for p, g in itertools.groupby(r.partition for r in second)] == [(1, 200), (2, 100)]
    third = buf.take(300)
    assert [(p, len(list(g))) for p, g in itertools.groupby(r.partition for r in third)] == [(2, 150), (0, 150)]


def test_a_non_positive_maximum_takes_nothing_and_keeps_everything():
    buf = RecordBuffer()
    buf.add(Producer().records(0, 3))
    assert buf.take(0) == [] and buf.take(-1) == []
    assert len(buf) == 3


def test_counts_follow_adds_takes_and_drops():
    made = Producer()
    buf = RecordBuffer()
    buf.add(made.records(0, 4) + made.records(1, 3))
    assert len(buf) == 7
    assert len(buf.take(5)) == 5 and len(buf) == 2
    buf.add(made.records(2, 6))
    buf.drop([("t", 2)])
    assert len(buf) == 2
    assert len(buf.take(100)) == 2 and len(buf) == 0


def test_drop_removes_only_those_partitions():
    made = Producer()
    buf = RecordBuffer()
    for partition in range(4):
        buf.add(made.records(partition, 5))
    buf.take(7)  # partition 0 done, the cursor inside partition 1
    buf.drop([("t", 1), ("t", 3), ("t", 9), ("other", 0)])  # unknown ones are ignored
    rest = buf.take(100)
    assert [(r.partition, r.offset) for r in rest] == [(2, o) for o in range(5)]
    assert len(buf) == 0


def test_drop_distinguishes_topics():
    made_a, made_b = Producer(), Producer()
    buf = RecordBuffer()
    buf.add(made_a.records(0, 2, topic="a") + made_b.records(0, 2, topic="b"))
    buf.drop([("a", 0)])
    assert {(r.topic, r.partition) for r in buf.take(10)} == {("b", 0)}


def test_dropping_everything_then_adding_again_starts_afresh():
    made = Producer()
    buf = RecordBuffer()
    buf.add(made.records(0, 3) + made.records(1, 3))
    buf.take(4)
    buf.drop([("t", 0), ("t", 1)])
    assert len(buf) == 0 and buf.take(10) == []
    buf.add(made.records(5, 2))
    assert [(r.partition, r.offset) for r in buf.take(10)] == [(5, 0), (5, 1)]


operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 5), st.integers(1, 12)),
        st.tuples(st.just("take"), st.integers(0, 15)),
        st.tuples(st.just("drop"), st.frozensets(st.integers(0, 6), max_size=3)),
    ),
    max_size=60,
)


@given(operations)
def test_every_record_is_returned_once_in_partition_order_until_dropped(ops):
    made = Producer()
    buf = RecordBuffer()
    waiting: dict[int, list[int]] = {}  # the offsets each partition still holds, in order
    for op in ops:
        if op[0] == "add":
            _, partition, count = op
            records = made.records(partition, count)
            buf.add(records)
            waiting.setdefault(partition, []).extend(r.offset for r in records)
        elif op[0] == "take":
            got = buf.take(op[1])
            assert len(got) == min(op[1], sum(len(o) for o in waiting.values()))
            for record in got:
                # The oldest record its partition holds, and nothing else.
                assert waiting[record.partition] and record.offset == waiting[record.partition].pop(0)
        else:
            buf.drop(("t", p) for p in op[1])
            for partition in op[1]:
                waiting.pop(partition, None)
        assert len(buf) == sum(len(o) for o in waiting.values())


@st.composite
def prefetching_runs(draw):
    """Polls as the consumer makes them: it fetches only while fewer than
    max_poll_records are buffered, and at most the difference (seed 003's
    first prefetch heuristic); how the fetch spreads over partitions is
    arbitrary."""
    max_records = draw(st.integers(1, 30))
    partitions = draw(st.integers(2, 6))
    polls = draw(st.lists(st.lists(st.integers(0, partitions - 1), max_size=30), min_size=1, max_size=80))
    return max_records, polls


@given(prefetching_runs())
def test_with_the_consumers_prefetch_rule_no_partition_waits_beyond_one_poll(run):
    max_records, polls = run
    made = Producer()
    buf = RecordBuffer()
    for fetched in polls:
        room = max_records - len(buf)
        if room > 0:
            for partition in fetched[:room]:
                buf.add(made.records(partition, 1))
        held = {p for p, n in made.next_offset.items() if n}  # every partition that ever had data
        got = buf.take(max_records)
        assert len(buf) == 0, "a poll left records behind although they fitted"
        assert {r.partition for r in got} <= held


@st.composite
def busy_runs(draw):
    """Polls of a buffer fed freely: between two polls each partition may
    receive anything from nothing to twice max_poll_records."""
    max_records = draw(st.integers(1, 20))
    partitions = draw(st.integers(2, 5))
    arrivals = draw(st.lists(st.lists(st.integers(0, 2 * max_records), min_size=partitions, max_size=partitions),
                             min_size=1, max_size=60))
    return max_records, arrivals


@given(busy_runs())
def test_no_partition_starves_while_others_keep_receiving_data(run):
    """Round robin, seen from outside. A turn is a partition's service from
    when it is first served until another partition is served or it has
    handed out what it held when the turn began; a turn may
    span polls (the partition left off resumes) but never hands out more than
    the records the partition held when the turn began, so data that keeps
    arriving cannot extend it: what it serves beyond that counts as a new
    turn. While a partition holds records, no other partition begins two
    turns before it is served."""
    max_records, arrivals = run
    made = Producer()
    buf = RecordBuffer()
    held: dict[int, int] = {}
    turn: list = [None, 0]  # the partition in its turn, records it may still hand out
    waiting: dict[int, set] = {}  # partition holding records -> partitions that began a turn since
    for counts in arrivals:
        for partition, count in enumerate(counts):
            if count:
                buf.add(made.records(partition, count))
                if not held.get(partition):
                    waiting[partition] = set()
                held[partition] = held.get(partition, 0) + count
        for partition, group in itertools.groupby(r.partition for r in buf.take(max_records)):
            taken = len(list(group))
            if partition == turn[0] and turn[1]:  # the turn goes on, for what it had left
                going_on = min(taken, turn[1])
                turn[1] -= going_on
                held[partition] -= going_on
                taken -= going_on
            if taken:  # a new turn
                for other, began in waiting.items():
                    if other != partition:
                        assert partition not in began, (
                            f"partition {partition} began a second turn while {other} waited")
                        began.add(partition)
                waiting[partition] = set()
                turn[:] = [partition, held[partition] - taken]
                held[partition] -= taken
            if not held[partition]:
                waiting.pop(partition, None)


def test_a_partition_refilled_every_poll_does_not_starve_the_others():
    made = Producer()
    buf = RecordBuffer()
    buf.add(made.records(0, 15) + made.records(1, 1))
    served_one = False
    for _ in range(50):
        got = buf.take(10)
        served_one |= any(r.partition == 1 for r in got)
        buf.add(made.records(0, 10))  # partition 0 keeps receiving data
    assert served_one, "partition 1's record was never returned in 50 polls"
