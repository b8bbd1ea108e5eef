"""Reading transactional producers' records: which records a read_committed
decode keeps (committed transactions and non-transactional records, never an
aborted transaction's, never a transaction marker), with the compiled and
the pure-Python decoder held to the same answer on crafted logs: committed
and aborted transactions, producers interleaved, a producer aborting twice,
fetches that start inside the log or end in a marker, the last stable
offset, and random logs against a model of the broker."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.test_record_decoder import CODECS, Batch, Rec, build, decode_both
from zkcoord.fetch.records import ABORT_MARKER, COMMIT_MARKER, CorruptRecordsError, decode_batches


def data(base: int, producer: int, n: int = 1, *, transactional: bool = True) -> Batch:
    """``n`` records at ``base`` from ``producer``, in a transaction unless told otherwise."""
    return Batch(base, 0, [Rec(i, i, b"p%d" % producer, b"%d" % (base + i), []) for i in range(n)],
                 transactional=transactional, producer_id=producer)


def marker(base: int, producer: int, kind: int, codec: int = 0) -> Batch:
    """A transaction marker: key (version, type), value (version, coordinator epoch)."""
    return Batch(base, codec, [Rec(0, 0, struct.pack(">hh", 0, kind), struct.pack(">hi", 0, 3), [])],
                 control=True, transactional=True, producer_id=producer)


def log(*batches: Batch) -> bytes:
    return b"".join(build(b) for b in batches)


def offsets(columns) -> list[int]:
    return columns.offset_list()


def test_a_committed_transaction_is_read_and_its_marker_counts_as_read():
    records = log(data(0, 1, 3), marker(3, 1, COMMIT_MARKER))
    for aborted in ([], None):
        columns = decode_both(records, aborted_transactions=aborted)
        assert offsets(columns) == [0, 1, 2]
        assert columns.next_offset == 4 and columns.consumed == len(records)


def test_an_aborted_transaction_is_left_out_read_committed_and_read_uncommitted():
    records = log(data(0, 1, 3), marker(3, 1, ABORT_MARKER))
    committed = decode_both(records, aborted_transactions=[(1, 0)])
    assert committed.rows == 0 and committed.next_offset == 4, "a fetch ending in a marker moves past it"
    uncommitted = decode_both(records)
    assert offsets(uncommitted) == [0, 1, 2] and uncommitted.next_offset == 4


def test_interleaved_producers_and_plain_records():
    records = log(
        data(0, 1, 2),  # producer 1's transaction: aborted below
        data(2, 2, 2),  # producer 2's: committed
        data(4, 1),
        marker(5, 2, COMMIT_MARKER),
        marker(6, 1, ABORT_MARKER),
        data(7, 9, 2, transactional=False),  # an idempotent, non-transactional producer
        data(9, 1),  # producer 1 again, a new transaction, committed
        marker(10, 1, COMMIT_MARKER),
    )
    columns = decode_both(records, aborted_transactions=[(1, 0)])
    assert offsets(columns) == [2, 3, 7, 8, 9]
    assert [r.value for r in columns.records("t", 0)] == [b"2", b"3", b"7", b"8", b"9"]
    assert columns.next_offset == 11
    assert offsets(decode_both(records)) == [0, 1, 2, 3, 4, 7, 8, 9]


def test_a_producer_that_aborts_twice_and_then_commits():
    records = log(data(0, 1), marker(1, 1, ABORT_MARKER), data(2, 1, 2), marker(4, 1, ABORT_MARKER),
                  data(5, 1), marker(6, 1, COMMIT_MARKER))
    columns = decode_both(records, aborted_transactions=[(1, 2), (1, 0)])  # in any order
    assert offsets(columns) == [5] and columns.next_offset == 7


def test_a_non_transactional_batch_of_an_aborting_producer_id_is_kept():
    # The transactional flag decides, as in Kafka's consumer: only a
    # transaction's batches can be aborted.
    records = log(data(0, 1), data(1, 1, transactional=False), marker(2, 1, ABORT_MARKER))
    assert offsets(decode_both(records, aborted_transactions=[(1, 0)])) == [1]


def test_a_fetch_from_inside_the_log_keeps_track_of_the_batches_before_its_start():
    # The broker lists the aborted transactions overlapping the fetch; a whole
    # batch is returned, so the decode starts before the position.
    records = log(data(0, 1, 4), data(4, 2, 2), marker(6, 1, ABORT_MARKER), marker(7, 2, COMMIT_MARKER))
    columns = decode_both(records, start=2, aborted_transactions=[(1, 0)])
    assert offsets(columns) == [4, 5] and columns.next_offset == 8
    columns = decode_both(records, start=5, aborted_transactions=[(1, 0)])
    assert offsets(columns) == [5] and columns.next_offset == 8


def test_records_at_or_above_the_last_stable_offset_are_not_read():
    # Producer 2's transaction is open at offset 3: the last stable offset.
    records = log(data(0, 1, 2), marker(2, 1, COMMIT_MARKER), data(3, 2, 2))
    columns = decode_both(records, end=3, aborted_transactions=[])
    assert offsets(columns) == [0, 1] and columns.next_offset == 3


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_a_marker_is_read_in_any_codec(codec):
    records = log(data(0, 1), marker(1, 1, ABORT_MARKER, CODECS[codec]), data(2, 1), marker(3, 1, COMMIT_MARKER))
    assert offsets(decode_both(records, aborted_transactions=[(1, 0)])) == [2]


@pytest.mark.parametrize("key", [b"", b"\x00\x00", None])
def test_a_malformed_marker_is_corrupt_in_both_decoders(key):
    records = log(data(0, 1), Batch(1, 0, [Rec(0, 0, key, b"", [])], control=True, transactional=True,
                                    producer_id=1))
    for compiled in (True, False):
        with pytest.raises(CorruptRecordsError, match="at offset 1: a transaction marker is malformed"):
            decode_batches(records, compiled=compiled, aborted_transactions=[(1, 0)])
    assert offsets(decode_both(records)) == [0], "read_uncommitted never opens a marker"


@pytest.mark.parametrize("kind", [-2, -1, 2, 0x7FFF])  # 0xFFFE, 0xFFFF as int16; LEADER_CHANGE; any other
def test_a_control_record_of_another_type_is_no_abort_marker_in_both_decoders(kind):
    # Kafka's consumer acts on ABORT only: any other control record (one it
    # reads as UNKNOWN too) neither ends an aborted transaction nor is
    # corrupt. The compiled decoder once took type 0xFFFE (-2) for its
    # error status and failed with SystemError.
    records = log(data(0, 1), marker(1, 1, kind), data(2, 1), marker(3, 1, ABORT_MARKER), data(4, 1, transactional=False))
    columns = decode_both(records, aborted_transactions=[(1, 0)])
    assert offsets(columns) == [4] and columns.next_offset == 5
    assert offsets(decode_both(records, aborted_transactions=[])) == [0, 2, 4]


def test_an_empty_control_batch_left_by_the_cleaner_is_no_marker():
    # Kafka's log cleaner keeps a producer's last batch, emptied, so that its
    # state survives compaction: no records, so no abort marker (as Kafka's
    # consumer reads it), and nothing corrupt.
    empty = Batch(2, 0, [], control=True, transactional=True, producer_id=1)
    records = log(data(0, 1), marker(1, 1, ABORT_MARKER), empty, data(3, 1), marker(4, 1, COMMIT_MARKER))
    assert offsets(decode_both(records, aborted_transactions=[(1, 0)])) == [3]
    assert offsets(decode_both(records, aborted_transactions=[])) == [0, 3]


# -- random logs against a model of the broker -------------------------------------------------

@st.composite
def transactional_logs(draw):
    """(log bytes, the broker's aborted transactions, the committed records'
    offsets): producers 1..3 append transactions batch by batch, interleaved,
    each ended by a commit or an abort marker; producer 0 is not
    transactional. Every transaction is ended, so the whole log is stable."""
    batches, aborted, committed = [], [], []
    open_since: dict[int, int] = {}  # producer -> its open transaction's first offset
    pending: dict[int, list[int]] = {}  # producer -> its open transaction's offsets
    offset = 0

    def end_transaction(producer: int) -> None:
        kind = draw(st.sampled_from([COMMIT_MARKER, ABORT_MARKER]))
        batches.append(marker(offset, producer, kind))
        if kind == ABORT_MARKER:
            aborted.append((producer, open_since[producer]))
        else:
            committed.extend(pending[producer])
        del open_since[producer], pending[producer]

    for _ in range(draw(st.integers(1, 25))):
        producer = draw(st.integers(0, 3))
        n = draw(st.integers(1, 3))
        if producer == 0:
            batches.append(data(offset, 9, n, transactional=False))
            committed.extend(range(offset, offset + n))
        elif producer in open_since and draw(st.booleans()):
            end_transaction(producer)
            n = 1
        else:
            open_since.setdefault(producer, offset)
            batches.append(data(offset, producer, n))
            pending.setdefault(producer, []).extend(range(offset, offset + n))
        offset += n
    for producer in sorted(open_since):
        end_transaction(producer)
        offset += 1
    return log(*batches), aborted, sorted(committed), offset


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(transactional_logs(), st.integers(0, 60))
def test_read_committed_reads_exactly_the_committed_records_of_random_logs(case, start):
    records, aborted, committed, end = case
    start = min(start, end)
    columns = decode_both(records, start=start, aborted_transactions=aborted)
    assert offsets(columns) == [o for o in committed if o >= start]
    assert columns.next_offset == end and columns.consumed == len(records)
