"""Partition-log storage: segments, index, recovery, retention, CRC checks."""

from __future__ import annotations

import os

import pytest

from tests.broker.batches import make_batch, read_values
from zkcoord import batch_format
from zkcoord.batch_format import CorruptBatchError
from zkcoord.broker.log import InvalidProducerEpochError, LogConfig, OutOfOrderSequenceError, PartitionLog
from zkcoord.errors import ConfigError, OffsetOutOfRangeError


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def open_log(path, **kw):
    config = LogConfig(**{"segment_bytes": 4096, "index_interval_bytes": 256, **kw})
    return PartitionLog(str(path), config, Clock())


def read_all(log, offset=0, max_bytes=1 << 30):
    out = []
    while offset < log.log_end_offset:
        part = log.read(offset, max_bytes)
        values = read_values(part.read())
        out.extend(values)
        offset = values[-1][0] + 1
    return out


def payload(i):
    return b"v%05d" % i + bytes([i % 256]) * 40


def fill(log, batches, per_batch=3):
    expected = []
    for b in range(batches):
        values = [payload(b * per_batch + j) for j in range(per_batch)]
        result = log.append(make_batch(values, timestamp=10_000 + b * 10))
        expected.extend((result.base_offset + j, v) for j, v in enumerate(values))
    return expected


def test_offsets_are_assigned_by_rewriting_base_offset(tmp_path):
    log = open_log(tmp_path)
    first = log.append(make_batch([b"a", b"b"]))
    second = log.append(make_batch([b"c"]))
    assert (first.base_offset, first.last_offset) == (0, 1)
    assert (second.base_offset, second.last_offset) == (2, 2)
    data = log.read(2, 1 << 20).read()
    header = batch_format.parse_header(data)
    assert header.base_offset == 2
    batch_format.check_crc(data, 0, header)  # the CRC does not cover the base offset
    assert read_all(log) == [(0, b"a"), (1, b"b"), (2, b"c")]


def test_segments_roll_and_reads_span_them(tmp_path):
    log = open_log(tmp_path)
    expected = fill(log, 60)
    assert len(log.segments) > 3
    assert read_all(log) == expected
    # a read from the middle of a batch starts at that whole batch
    part = read_values(log.read(expected[40][0], 1).read())
    assert expected[40] in part and part[0][0] <= expected[40][0]


def test_read_returns_at_least_one_batch_and_respects_max_bytes(tmp_path):
    log = open_log(tmp_path, segment_bytes=1 << 20)
    fill(log, 50)
    size_one = len(log.read(0, 1).read())
    assert size_one == batch_format.parse_header(log.read(0, 1).read()).size
    some = log.read(0, 1000).read()
    assert size_one <= len(some) <= 1000
    assert len(log.read(0, 1 << 30).read()) == log.size_bytes


def test_out_of_range_reads(tmp_path):
    log = open_log(tmp_path)
    fill(log, 2)
    assert log.read(log.log_end_offset, 100) is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(log.log_end_offset + 1, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)


def test_reopen_uses_indexes_and_keeps_everything(tmp_path):
    log = open_log(tmp_path)
    expected = fill(log, 60)
    log.close()
    log = open_log(tmp_path)
    assert log.log_end_offset == expected[-1][0] + 1
    assert read_all(log) == expected
    more = log.append(make_batch([b"after"]))
    assert more.base_offset == expected[-1][0] + 1


def test_recovery_truncates_a_torn_tail(tmp_path):
    log = open_log(tmp_path, segment_bytes=1 << 20)
    expected = fill(log, 5)
    log.close()
    segment = tmp_path / f"{0:020d}.log"
    size = segment.stat().st_size
    with open(segment, "ab") as f:
        f.write(make_batch([b"torn"])[:-7])  # a batch cut short by a crash
    log = open_log(tmp_path, segment_bytes=1 << 20)
    assert segment.stat().st_size == size
    assert read_all(log) == expected
    assert log.append(make_batch([b"next"])).base_offset == expected[-1][0] + 1


def test_recovery_truncates_at_a_bad_crc(tmp_path):
    log = open_log(tmp_path, segment_bytes=1 << 20)
    expected = fill(log, 6)
    log.close()
    segment = tmp_path / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    # flip one byte inside the value of the fifth batch
    pos = 0
    for _ in range(4):
        pos += batch_format.parse_header(data, pos).size
    data[pos + batch_format.HEADER_SIZE + 5] ^= 0xFF
    segment.write_bytes(bytes(data))
    log = open_log(tmp_path, segment_bytes=1 << 20)
    assert read_all(log) == expected[: 4 * 3]


def test_append_rejects_corrupt_batches_and_writes_nothing(tmp_path):
    log = open_log(tmp_path)
    fill(log, 2)
    before = read_all(log)
    good = bytearray(make_batch([b"x", b"y"]))
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    for bad in (bytes(bad_crc), bytes(bad_magic), bytes(good[:30]), b"", b"\x00" * 70,
                bytes(good) + bytes(bad_crc)):
        with pytest.raises(CorruptBatchError):
            log.append(bad)
    assert read_all(log) == before


def test_idempotent_producer_dedup_and_ordering(tmp_path):
    log = open_log(tmp_path)
    pid = 77
    first = log.append(make_batch([b"a", b"b"], producer_id=pid, producer_epoch=0, base_sequence=0))
    retry = log.append(make_batch([b"a", b"b"], producer_id=pid, producer_epoch=0, base_sequence=0))
    assert retry == first
    log.append(make_batch([b"c"], producer_id=pid, producer_epoch=0, base_sequence=2))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(make_batch([b"d"], producer_id=pid, producer_epoch=0, base_sequence=7))
    other = 78
    log.append(make_batch([b"p"], producer_id=other, producer_epoch=3, base_sequence=0))
    with pytest.raises(InvalidProducerEpochError):
        log.append(make_batch([b"q"], producer_id=other, producer_epoch=2, base_sequence=1))
    assert [v for _, v in read_all(log)] == [b"a", b"b", b"c", b"p"]
    log.close()
    # the state survives a restart, so a retry after it is still recognised
    log = open_log(tmp_path)
    again = log.append(make_batch([b"p"], producer_id=other, producer_epoch=3, base_sequence=0))
    assert again.base_offset == 3
    assert [v for _, v in read_all(log)] == [b"a", b"b", b"c", b"p"]


def test_retention_by_size_keeps_the_newest_data(tmp_path):
    log = open_log(tmp_path, retention_bytes=8192, retention_ms=-1)
    expected = fill(log, 100)
    segments = len(log.segments)
    deleted = log.apply_retention(now_ms=0)
    assert deleted > 0 and len(log.segments) == segments - deleted
    assert log.size_bytes - log.segments[0].size < 8192
    assert log.log_start_offset > 0
    kept = [e for e in expected if e[0] >= log.log_start_offset]
    assert read_all(log, log.log_start_offset) == kept
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)  # a fetch below the log start
    log.close()
    assert open_log(tmp_path).log_start_offset == kept[0][0]


def test_retention_by_time_expires_everything_but_keeps_offsets(tmp_path):
    log = open_log(tmp_path, retention_ms=1000)
    fill(log, 40)  # timestamps 10_000 .. 10_390
    assert log.apply_retention(now_ms=10_500) == 0
    before = len(log.segments)
    end = log.log_end_offset
    assert before > 1
    assert log.apply_retention(now_ms=11_250) > 0  # the oldest segments only
    assert 0 < log.log_start_offset < end
    # all of it expired: the active segment is rolled so that it can go too
    log.apply_retention(now_ms=10_000_000)
    assert len(log.segments) == 1 and log.segments[0].size == 0
    assert log.log_start_offset == log.log_end_offset == end
    assert log.read(end, 100) is None
    assert log.append(make_batch([b"new"])).base_offset == end
    log.close()
    reopened = open_log(tmp_path, retention_ms=1000)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (end, end + 1)


def test_offset_for_timestamp(tmp_path):
    log = open_log(tmp_path)
    fill(log, 60)  # batch b has records at 10_000 + 10 b + j, j < 3
    assert log.offset_for_timestamp(10_000) == (0, 10_000)
    assert log.offset_for_timestamp(10_000 + 10 * 33 + 2) == (33 * 3 + 2, 10_332)
    assert log.offset_for_timestamp(10_000 + 10 * 33 + 5) == (34 * 3, 10_340)
    assert log.offset_for_timestamp(99_999) is None


def test_flush_policy_by_message_count(tmp_path, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    log = open_log(tmp_path, flush_messages=5)
    fill(log, 1)
    assert calls == []
    fill(log, 1)  # 6 records >= 5
    assert len(calls) == 2  # the log and its index


def test_config_is_validated():
    for bad in ({"segment_bytes": 10}, {"flush_messages": 0}, {"retention_ms": -5}):
        with pytest.raises(ConfigError):
            LogConfig(**bad)


def test_flush_policy_by_time(tmp_path, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    clock = Clock()
    log = PartitionLog(str(tmp_path), LogConfig(flush_ms=500), clock)
    log.maybe_flush()
    assert calls == []  # nothing written yet
    fill(log, 1)
    clock.now += 0.4
    log.maybe_flush()
    assert calls == []
    clock.now += 0.2
    log.maybe_flush()
    assert len(calls) == 2
    log.maybe_flush()
    assert len(calls) == 2  # nothing new since the flush


def test_offset_for_timestamp_in_a_batch_it_cannot_decompress(tmp_path):
    log = open_log(tmp_path)
    fill(log, 2)
    batch = bytearray(make_batch([b"a", b"b", b"c"], timestamp=50_000))
    # claim zstd (codec 4) without compressing: the records cannot be decoded,
    # the header (and so the CRC, recomputed here) still can
    batch[22] = (batch[22] & ~batch_format.COMPRESSION_MASK) | 4
    from crc32c import crc32c
    batch[17:21] = crc32c(bytes(batch[batch_format.CRC_START:])).to_bytes(4, "big")
    result = log.append(bytes(batch))
    assert log.offset_for_timestamp(50_001) == (result.base_offset, 50_002)


def test_reopen_rebuilds_a_missing_or_damaged_index(tmp_path):
    log = open_log(tmp_path)
    expected = fill(log, 60)
    log.close()
    indexes = sorted(tmp_path.glob("*.index"))
    indexes[1].unlink()
    data = indexes[2].read_bytes()
    indexes[2].write_bytes(data[:-5])  # a torn last entry
    garbage = bytearray(indexes[0].read_bytes())
    garbage[4:8] = (10**9).to_bytes(4, "big")  # a position past the end of the log
    indexes[0].write_bytes(bytes(garbage))
    log = open_log(tmp_path)
    assert read_all(log) == expected
    for offset, value in expected[::17]:
        assert read_values(log.read(offset, 1).read())[0][0] <= offset


def test_segments_of_records_without_timestamps_expire_by_file_time(tmp_path):
    """Magic-0 messages are stored with no timestamp (-1); as Kafka does, such
    a segment is dated by when its file was last written."""
    log = open_log(tmp_path, retention_ms=1000)
    undated = make_batch([b"x" * 300], timestamp=-1)
    while len(log.segments) < 3:
        log.append(undated)
    assert all(s.max_timestamp == -1 for s in log.segments)
    written_ms = log.segments[0].last_modified_ms()
    assert log.apply_retention(now_ms=written_ms + 500) == 0
    old = (written_ms - 5000) / 1000
    os.utime(log.segments[0].log_path, (old, old))
    assert log.apply_retention(now_ms=written_ms + 500) == 1
    assert [s.base_offset for s in log.segments] == [b for b, _ in log.segment_times()]
    log.close()
