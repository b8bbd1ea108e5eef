"""The old message formats' conversions and ListOffsets v0's rule, without
sockets: up-conversion of what old producers send, down-conversion of what
old consumers read, checked with kafka-python's own readers."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from tests.broker.batches import make_batch
from zkcoord import batch_format
from zkcoord.batch_format import CorruptBatchError, UnsupportedMagicError
from zkcoord.broker import legacy
from zkcoord.broker.legacy import SegmentTime, offsets_before


def message_set(magic, codec, values, timestamp=1_000):
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 30)
    for i, value in enumerate(values):
        builder.append(i, timestamp=timestamp + i, key=b"k%d" % i if i % 2 else None, value=value)
    return bytes(builder.build())


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2, 3])
def test_up_conversion_keeps_every_message_its_key_value_and_timestamp(magic, codec):
    values = [b"value-%d-" % i * 20 for i in range(30)] + [None, b""]
    data = message_set(magic, codec, values) + message_set(magic, codec, [b"second set"], timestamp=5_000)
    batch = DefaultRecordBatch(legacy.up_convert(data))
    assert batch.validate_crc() and batch.magic == 2
    records = list(DefaultRecordBatch(legacy.up_convert(data)))
    assert [r.offset for r in records] == list(range(33))
    assert [r.value for r in records] == values + [b"second set"]
    assert [r.key for r in records][:4] == [None, b"k1", None, b"k3"]
    expected_ts = [-1] * 33 if magic == 0 else [1_000 + i for i in range(32)] + [5_000]
    assert [r.timestamp for r in records] == expected_ts
    assert batch.compression_type in (0, codec)  # kept, unless compressing would not shrink it
    assert (batch.producer_id, batch.base_sequence) == (-1, -1)


def test_produce_versions_decide_what_may_be_converted():
    old = message_set(1, 0, [b"x"])
    batch = make_batch([b"v2"])
    assert legacy.to_batches(batch, 0) is batch and legacy.to_batches(b"", 2) == b""
    assert list(DefaultRecordBatch(legacy.to_batches(old, 2)))[0].value == b"x"
    with pytest.raises(UnsupportedMagicError, match="Produce v3"):
        legacy.to_batches(old, 3)
    with pytest.raises(UnsupportedMagicError):
        legacy.up_convert(old + make_batch([b"v2"]))


@pytest.mark.parametrize("damage", ["crc", "truncated", "inner", "codec", "empty-wrapper"])
def test_damaged_old_messages_are_refused(damage):
    data = bytearray(message_set(1, 1 if damage in ("inner", "empty-wrapper") else 0, [b"abc" * 50] * 3))
    if damage == "crc":
        data[-1] ^= 1
    elif damage == "truncated":
        data = data[:-5]
    elif damage == "inner":  # a compressed payload that does not decompress
        data[-10] ^= 0xFF
    elif damage == "codec":  # attributes name a codec the old formats lack
        data = bytearray(message_set(1, 0, [b"abc"]))
        data[batch_format.ENTRY_MAGIC_POSITION + 1] = 5
    else:  # a compressed wrapper whose value is null
        data = bytearray(message_set(1, 0, [None]))
        data[batch_format.ENTRY_MAGIC_POSITION + 1] = 1
    if damage in ("codec", "inner", "empty-wrapper"):
        from kafka.record.util import calc_crc32
        data[12:16] = calc_crc32(bytes(data[16:])).to_bytes(4, "big")
    expected = legacy.UnsupportedCompressionError if damage == "codec" else CorruptBatchError
    with pytest.raises(expected):
        legacy.up_convert(bytes(data))


def read_legacy(data):
    records, out = MemoryRecords(data), []
    while records.has_next():
        batch = records.next_batch()
        out.extend((batch.magic, r.offset, r.timestamp, r.key, r.value) for r in batch)
    return out


@pytest.mark.parametrize("magic", [0, 1])
def test_down_conversion_from_an_offset_within_a_limit(magic):
    stored = bytearray()
    for base, codec in ((0, 0), (3, 1), (6, 4)):
        batch = bytearray(make_batch([b"r%d" % (base + i) for i in range(3)], timestamp=7_000 + base,
                                     key=b"key", compression=codec))
        batch_format.set_base_offset(batch, 0, base, 0)
        stored += batch
    got = read_legacy(legacy.down_convert(bytes(stored), magic, 2, 1 << 20))
    assert [(m, o, v, k) for m, o, _, k, v in got] == [(magic, o, b"r%d" % o, b"key") for o in range(2, 9)]
    assert [t for _, _, t, _, _ in got] == ([None] * 7 if magic == 0 else [7_000 + o for o in range(2, 9)])
    one = read_legacy(legacy.down_convert(bytes(stored), magic, 4, 1))
    assert [o for _, o, _, _, _ in one] == [4]  # never less than one message


def test_down_conversion_leaves_control_batches_out():
    control = bytearray(make_batch([b"marker"]))
    control[batch_format.CRC_START + 1] |= batch_format.CONTROL_FLAG  # attributes, low byte
    assert read_legacy(legacy.down_convert(bytes(control) + make_batch([b"data"]), 1, 0, 1 << 20))[0][4] == b"data"


def test_offsets_before_follows_kafkas_rule():
    segments = [SegmentTime(0, 100), SegmentTime(10, 200), SegmentTime(20, 300)]
    assert offsets_before(segments, 0, 25, False, -1, 2, 1_000) == [25, 20]
    assert offsets_before(segments, 5, 25, False, -2, 9, 1_000) == [5]  # the log start within the first
    assert offsets_before(segments, 0, 20, True, -1, 9, 1_000) == [20, 10, 0]  # an empty last segment
    assert offsets_before(segments, 0, 25, False, 250, 9, 1_000) == [10, 0]
    assert offsets_before(segments, 0, 25, False, 1_000, 9, 1_000) == [25, 20, 10, 0]
    assert offsets_before(segments, 0, 25, False, 50, 9, 1_000) == []
    assert offsets_before(segments, 0, 25, False, -1, 0, 1_000) == []
