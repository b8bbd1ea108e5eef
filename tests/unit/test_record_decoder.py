"""The compiled record-batch decoder against the pure-Python one, and both
against kafka-python's reader: record for record, over every codec, control
batches, compacted gaps, LogAppendTime, headers, null keys and values, ranges
that cut batches, partial batches at the end, and corrupt input."""

from __future__ import annotations

import struct
from typing import NamedTuple, Optional

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from zkcoord.fetch import records as decoder
from zkcoord.fetch.records import CorruptRecordsError, RecordColumns, decode_batches
from zkcoord.records import Record

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def test_the_compiled_decoder_is_built():
    # CI installs with a C compiler: the fast path must be the one under test.
    assert decoder.compiled_decoder_built(), "zkcoord.fetch._recordbatch did not build"


class Rec(NamedTuple):
    offset_delta: int
    timestamp_delta: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: list


class Batch(NamedTuple):
    base_offset: int
    codec: int
    records: list
    control: bool = False
    log_append_time: Optional[int] = None  # the broker's time, when LogAppendTime
    transactional: bool = False
    producer_id: int = 7  # when transactional


def build(batch: Batch) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=batch.codec, is_transactional=batch.transactional,
        producer_id=batch.producer_id if batch.transactional else -1, producer_epoch=0 if batch.transactional else -1,
        base_sequence=0 if batch.transactional else -1, batch_size=1 << 30)
    for r in batch.records:
        builder.append(r.offset_delta, timestamp=1_767_225_600_000 + r.timestamp_delta, key=r.key, value=r.value,
                       headers=r.headers)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, batch.base_offset)  # the CRC does not cover the base offset
    attributes = struct.unpack_from(">h", data, 21)[0]
    if batch.control:
        attributes |= 0x20
    if batch.log_append_time is not None:
        attributes |= 0x08
        struct.pack_into(">q", data, 35, batch.log_append_time)
    struct.pack_into(">h", data, 21, attributes)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def oracle(data: bytes, start: int = 0, end: Optional[int] = None):
    """(offset, timestamp, type, key, value, headers) per record, read with kafka-python."""
    out = []
    pos = 0
    while pos + 17 <= len(data):
        length = struct.unpack_from(">i", data, pos + 8)[0]
        if pos + 12 + length > len(data):
            break
        batch = DefaultRecordBatch(data[pos:pos + 12 + length])
        assert batch.validate_crc()
        if not batch.is_control_batch:
            for r in batch:
                if r.offset >= start and (end is None or r.offset < end):
                    out.append((r.offset, r.timestamp, r.timestamp_type, r.key, r.value,
                                [(k, v) for k, v in r.headers]))
        pos += 12 + length
    return out


def rows(columns: RecordColumns):
    types = list(struct.unpack(f"<{columns.rows}i", columns.timestamp_types))
    recs = columns.records("t", 3)
    assert recs == columns.records_python("t", 3, 0, columns.rows), "compiled and pure-Python Records differ"
    assert [type(r) for r in recs] == [Record] * columns.rows
    for begin, end in ((0, 0), (1, columns.rows), (columns.rows // 2, columns.rows - 1)):
        if 0 <= begin <= end <= columns.rows:
            assert columns.records("t", 3, begin, end) == recs[begin:end]
    assert all(r.topic == "t" and r.partition == 3 for r in recs)
    return [(r.offset, r.timestamp, t, r.key, r.value, h)
            for r, t, h in zip(recs, types, columns.headers())]


def decode_both(data, **kwargs) -> RecordColumns:
    fast = decode_batches(data, compiled=True, **kwargs)
    slow = decode_batches(data, compiled=False, **kwargs)
    assert fast == slow, "the compiled and the pure-Python decoder disagree"
    return fast


def simple(n: int, codec: int = 0, base: int = 0, **kw) -> Batch:
    return Batch(base, codec, [Rec(i, i, b"k%d" % i, b"v" * (i % 7), []) for i in range(n)], **kw)


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_every_codec_decodes_as_kafka_python_reads_it(codec):
    batches = [
        Batch(0, CODECS[codec], [Rec(0, 0, None, b"first", []), Rec(1, 5, b"", None, []),
                                 Rec(2, 9, b"key", b"x" * 300, [("h1", b"a"), ("h2", None), ("", b"")])]),
        simple(50, CODECS[codec], base=3),
    ]
    data = b"".join(build(b) for b in batches)
    columns = decode_both(data)
    assert rows(columns) == oracle(data)
    assert columns.rows == 53 and columns.next_offset == 53 and columns.consumed == len(data)
    assert columns.key_nulls == 1 and columns.value_nulls == 1


def test_control_batches_and_compacted_gaps_leave_offsets_out_but_count_as_read():
    data = b"".join([
        build(Batch(0, 0, [Rec(0, 0, b"a", b"1", []), Rec(3, 1, b"b", b"2", []), Rec(7, 2, b"c", b"3", [])])),
        build(Batch(8, 0, [Rec(0, 0, b"\x00\x00", b"", [])], control=True, transactional=True)),
        build(Batch(9, 4, [Rec(0, 0, b"d", b"4", [])], transactional=True)),
        # A compacted batch whose last records are gone keeps its last offset delta:
        # the builder cannot write that, so the next batch begins past the gap.
        build(Batch(20, 2, [Rec(0, 0, b"e", b"5", [])])),
    ])
    columns = decode_both(data)
    assert columns.offset_list() == [0, 3, 7, 9, 20]
    assert rows(columns) == oracle(data)
    assert columns.next_offset == 21
    # A run that ends in a control batch still moves past it.
    only_marker = build(Batch(8, 0, [Rec(0, 0, b"\x00\x00", b"", [])], control=True, transactional=True))
    marker = decode_both(only_marker, start=8)
    assert marker.rows == 0 and marker.next_offset == 9


def test_log_append_time_gives_every_record_the_brokers_time():
    data = build(simple(4, log_append_time=1_800_000_000_123))
    columns = decode_both(data)
    assert rows(columns) == oracle(data)
    assert {r[1] for r in rows(columns)} == {1_800_000_000_123} and {r[2] for r in rows(columns)} == {1}


@pytest.mark.parametrize("start,end", [(0, None), (5, None), (5, 12), (0, 1), (12, 13), (19, None), (30, None),
                                       (4, 4)])
def test_ranges_cut_batches_where_asked(start, end):
    data = build(simple(10, 0, base=0)) + build(simple(10, 3, base=10))
    columns = decode_both(data, start=start, end=end)
    assert rows(columns) == oracle(data, start, end)
    assert columns.next_offset == (min(end, 20) if end is not None else max(start, 20))


def test_a_partial_batch_at_the_end_is_left_for_the_next_fetch():
    first, second = build(simple(5)), build(simple(5, base=5))
    for cut in (1, 16, 17, 60, len(second) - 1):
        columns = decode_both(first + second[:cut])
        assert columns.offset_list() == [0, 1, 2, 3, 4]
        assert columns.next_offset == 5 and columns.consumed == len(first)
    assert decode_both(b"").rows == 0


def test_records_refuse_rows_outside_the_columns():
    columns = decode_both(build(simple(3)))
    with pytest.raises(ValueError):
        columns.records("t", 0, 0, 4)
    with pytest.raises(ValueError):
        columns.records("t", 0, 2, 1)


def test_arrow_columns_are_the_records():
    pa = pytest.importorskip("pyarrow")
    data = build(Batch(0, 1, [Rec(0, 0, None, b"v0", [("a", b"1")]), Rec(1, 1, b"k1", None, []),
                              Rec(2, 2, b"k2", b"v2", [("b", None), ("c", b"3")])]))
    columns = decode_both(data)
    table = columns.to_arrow("topic-x", 9, include_headers=True)
    table.validate(full=True)
    assert table.schema == decoder.arrow_schema(include_headers=True)
    got = table.to_pylist()
    assert [r["key"] for r in got] == [None, b"k1", b"k2"]
    assert [r["value"] for r in got] == [b"v0", None, b"v2"]
    assert {r["topic"] for r in got} == {"topic-x"} and {r["partition"] for r in got} == {9}
    assert [r["offset"] for r in got] == [0, 1, 2]
    assert [int(r["timestamp"].timestamp() * 1000) for r in got] == [1_767_225_600_000 + i for i in range(3)]
    assert [r["headers"] for r in got] == [[{"key": "a", "value": b"1"}], [],
                                           [{"key": "b", "value": None}, {"key": "c", "value": b"3"}]]
    empty = decode_both(b"").to_arrow("t", 0)
    assert empty.num_rows == 0 and empty.schema == pa.schema(decoder.arrow_schema())


# -- corrupt input ----------------------------------------------------------------------------

def errors_of_both(data, **kwargs) -> str:
    messages = []
    for compiled in (True, False):
        with pytest.raises(CorruptRecordsError) as info:
            decode_batches(data, compiled=compiled, **kwargs)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    return messages[0]


def test_a_bad_crc_is_refused_unless_crcs_are_not_checked():
    data = bytearray(build(simple(3)))
    data[-2] ^= 0xFF  # a byte of the last value
    assert "fails its CRC" in errors_of_both(bytes(data))
    assert decode_both(bytes(data), check_crcs=False).rows == 3


def test_old_message_formats_and_unknown_codecs_are_refused():
    data = bytearray(build(simple(2)))
    data[16] = 1
    assert "magic 1" in errors_of_both(bytes(data), check_crcs=False)
    data = bytearray(build(simple(2)))
    data[22] = (data[22] & ~0x07) | 5
    assert "unknown compression codec 5" in errors_of_both(bytes(data), check_crcs=False)
    data = bytearray(build(simple(2)))
    data[22] = (data[22] & ~0x07) | 4  # claims zstd, is not compressed
    assert "cannot decompress zstd" in errors_of_both(bytes(data), check_crcs=False)


def test_lengths_past_their_batch_are_refused():
    data = bytearray(build(simple(3)))
    struct.pack_into(">i", data, 57, 4)  # one record more than there is
    assert "runs past the batch" in errors_of_both(bytes(data), check_crcs=False)
    struct.pack_into(">i", data, 57, 2)  # one record less
    assert "bytes past its last record" in errors_of_both(bytes(data), check_crcs=False)


def test_offsets_and_timestamps_that_overflow_are_refused():
    data = bytearray(build(simple(3)))
    struct.pack_into(">q", data, 0, 2**63 - 2)  # base offset: the third record's offset overflows
    assert "overflows" in errors_of_both(bytes(data))
    data = bytearray(build(simple(3)))
    struct.pack_into(">q", data, 27, 2**63 - 1)  # first timestamp: the second record's overflows
    assert "overflows" in errors_of_both(bytes(data), check_crcs=False)


# -- every shape hypothesis can think of -------------------------------------------------------

blobs = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(st.tuples(st.text(max_size=6), blobs), max_size=3)


@st.composite
def batch_runs(draw):
    batches, base = [], draw(st.integers(0, 1000))
    for _ in range(draw(st.integers(0, 5))):
        deltas = sorted(draw(st.sets(st.integers(0, 30), min_size=1, max_size=8)))
        control = draw(st.booleans()) and draw(st.booleans())
        records = [Rec(d, draw(st.integers(-5, 5_000)), draw(blobs), draw(blobs), draw(headers)) for d in deltas]
        batches.append(Batch(base, draw(st.sampled_from(list(CODECS.values()))), records, control=control,
                             transactional=control,
                             log_append_time=draw(st.one_of(st.none(), st.integers(0, 2**42)))))
        base += deltas[-1] + 1 + draw(st.integers(0, 5))
    return batches, base


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(batch_runs(), st.integers(0, 1200), st.one_of(st.none(), st.integers(0, 1400)), st.integers(0, 200))
def test_any_run_of_batches_decodes_identically_on_both_paths(run, start, end, cut):
    batches, _ = run
    data = b"".join(build(b) for b in batches)
    data = data[:max(0, len(data) - cut)] if cut < 50 else data
    columns = decode_both(data, start=start, end=end)
    assert rows(columns) == oracle(data, start, end)


def damaged(run, data_strategy) -> bytes:
    """A run of batches with 1 to 4 bytes overwritten at random (empty when the run is)."""
    batches, _ = run
    data = bytearray(b"".join(build(b) for b in batches))
    for _ in range(data_strategy.draw(st.integers(1, 4)) if data else 0):
        data[data_strategy.draw(st.integers(0, len(data) - 1))] = data_strategy.draw(st.integers(0, 255))
    return bytes(data)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(batch_runs(), st.data())
def test_any_damage_gives_the_same_answer_or_the_same_error_on_both_paths(run, data_strategy):
    data = damaged(run, data_strategy)
    if not data:
        return
    outcomes = []
    for compiled in (True, False):
        try:
            outcomes.append(decode_batches(bytes(data), compiled=compiled, check_crcs=False))
        except CorruptRecordsError as exc:
            outcomes.append(str(exc))
    assert outcomes[0] == outcomes[1]
