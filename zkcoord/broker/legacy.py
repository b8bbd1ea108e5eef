"""What the broker does for clients older than Kafka 0.11, as a Kafka 2.8
broker does it: the message formats before record batches (magic 0 and 1)
and the answer to ListOffsets version 0.

- Produce v0-v2 may carry a message set of magic 0 or 1. It is stored
  up-converted: one v2 batch holding every message, compressed with the
  codec the producer used, with the messages' timestamps (magic 1) or none
  (magic 0, whose messages have no timestamp: -1, as Kafka stores them).
- Fetch v0-v1 reads magic 0 messages and v2-v3 magic 1. Stored batches are
  down-converted in memory, one uncompressed message per record (so a batch
  of any codec, zstd included, reads on every old client), from the fetch
  offset on, up to the fetch's byte limit but never less than one message.
  Headers have no place in the old formats and are dropped; control batches
  are left out.
- ListOffsets v0 answers with segment boundaries, not record offsets: for a
  time, the base offsets of the segments last modified at or before it
  (:func:`offsets_before`).

Pure functions of bytes; the codecs are kafka-python's record readers and
builders.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder

from zkcoord import batch_format
from zkcoord.batch_format import CorruptBatchError, UnsupportedMagicError

# The last Fetch version whose clients read magic 0, and magic 1 (Kafka's
# FetchRequest v0-v1 and v2-v3); from v4 on, record batches.
_FETCH_MAGIC = {0: 0, 1: 0, 2: 1, 3: 1}
LAST_LEGACY_FETCH = max(_FETCH_MAGIC)
LAST_LEGACY_PRODUCE = 2  # Produce v3 and later carry record batches only
_LEGACY_CODECS = (0, 1, 2, 3)  # none, gzip, snappy, lz4: all that magic 0 and 1 define
_NO_TIMESTAMP = -1
_UNLIMITED = 1 << 62

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


class UnsupportedCompressionError(CorruptBatchError):
    """A message names a codec its format does not define."""


def fetch_magic(version: int) -> int:
    """The message format a Fetch of ``version`` (at most LAST_LEGACY_FETCH) reads."""
    return _FETCH_MAGIC[version]


# -- Produce: up-conversion ---------------------------------------------------------


def to_batches(records, produce_version: int):
    """What a Produce of ``produce_version`` appends for ``records``: its v2
    batches as they are, or its old-format messages up-converted (only
    versions up to LAST_LEGACY_PRODUCE may carry those: from version 3 on,
    UnsupportedMagicError, as Kafka 2.8 refuses them)."""
    if not records:
        return records
    magic = batch_format.peek_entry(records)[1]
    if magic not in (0, 1):
        return records
    if produce_version > LAST_LEGACY_PRODUCE:
        raise UnsupportedMagicError(f"Produce v{produce_version} may carry record batches (magic 2) only, "
                                    f"not messages of magic {magic}")
    return up_convert(records)



def up_convert(records) -> bytes:
    """One v2 record batch with every message of the magic 0/1 message set
    ``records``, offsets from 0 (the log assigns the real ones). Raises
    CorruptBatchError (a bad CRC, a truncated message, a wrapper without a
    value), UnsupportedCompressionError, or UnsupportedMagicError (a v2
    batch among the old messages)."""
    messages = []
    codec = 0
    pos = 0
    while pos < len(records):
        size, magic = batch_format.peek_entry(records, pos)
        if magic not in (0, 1):
            raise UnsupportedMagicError(
                f"a message set of the old formats holds an entry of magic {magic} at byte {pos}")
        wrapper = LegacyRecordBatch(bytes(records[pos:pos + size]), magic)
        if not wrapper.validate_crc():
            raise CorruptBatchError(f"message at byte {pos} fails its CRC")
        if wrapper.compression_type not in _LEGACY_CODECS:
            raise UnsupportedCompressionError(
                f"message at byte {pos} names compression codec {wrapper.compression_type}, "
                f"which magic {magic} does not define")
        codec = codec or wrapper.compression_type
        inner = _read(wrapper, f"message at byte {pos}")
        if not all(message.validate_crc() for message in inner):
            raise CorruptBatchError(f"a message compressed in the one at byte {pos} fails its CRC")
        messages.extend(inner)
        pos += size
    if not messages:
        raise CorruptBatchError("produce request carried no message")
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=_UNLIMITED)
    for index, message in enumerate(messages):
        timestamp = _NO_TIMESTAMP if message.timestamp is None else message.timestamp
        builder.append(index, timestamp=timestamp, key=message.key, value=message.value, headers=[])
    return bytes(builder.build())


# -- Fetch: down-conversion ---------------------------------------------------------


def down_convert(batches, magic: int, first_offset: int, max_bytes: int) -> bytes:
    """The records of the stored v2 ``batches`` at or after ``first_offset``
    as uncompressed messages of ``magic`` (0 or 1), up to ``max_bytes`` but
    at least one. Raises CorruptBatchError for a batch that cannot be read."""
    out = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=_UNLIMITED)
    pos = 0
    while pos < len(batches):
        header = batch_format.parse_header(batches, pos)
        if header.attributes & batch_format.CONTROL_FLAG:
            pos += header.size
            continue
        records = _read(DefaultRecordBatch(bytes(batches[pos:pos + header.size])),
                        f"batch at offset {header.base_offset}")
        for record in records:
            if record.offset < first_offset:
                continue
            size = out.size_in_bytes(record.offset, record.timestamp, record.key, record.value)
            if out.size() and out.size() + size > max_bytes:
                return bytes(out.build())
            out.append(record.offset, timestamp=record.timestamp, key=record.key, value=record.value)
        pos += header.size
    return bytes(out.build())


def _read(batch, where: str) -> list:
    """Every record of a batch or message, decompressed; CorruptBatchError if it cannot be read."""
    try:
        return list(batch)
    except Exception as exc:  # the reader and each codec signal damage in ways of their own
        raise CorruptBatchError(f"{where} cannot be read: {exc!r}"[:200]) from None


# -- ListOffsets v0 -----------------------------------------------------------------


class SegmentTime(NamedTuple):
    base_offset: int
    last_modified_ms: int


def offsets_before(segments: Sequence[SegmentTime], log_start_offset: int, log_end_offset: int,
                   last_segment_empty: bool, timestamp: int, max_offsets: int, now_ms: int) -> list[int]:
    """ListOffsets v0's answer, as Kafka computes it: the candidates are each
    segment's base offset (at least the log start) dated by when its file
    was last written, then the log end dated now (when the last segment holds
    anything). Latest (-1) starts from the last candidate, earliest (-2) from
    the first, a time from the last candidate dated at or before it (none: an
    empty answer); up to ``max_offsets`` are given going back from there,
    largest first.

    >>> segs = [SegmentTime(0, 1000), SegmentTime(50, 2000)]
    >>> offsets_before(segs, 0, 80, False, LATEST_TIMESTAMP, 10, 3000)
    [80, 50, 0]
    >>> offsets_before(segs, 0, 80, False, EARLIEST_TIMESTAMP, 10, 3000)
    [0]
    >>> offsets_before(segs, 0, 80, False, 1500, 10, 3000), offsets_before(segs, 0, 80, False, 999, 10, 3000)
    ([0], [])
    """
    candidates = [(max(s.base_offset, log_start_offset), s.last_modified_ms) for s in segments]
    if not last_segment_empty:
        candidates.append((log_end_offset, now_ms))
    if timestamp == LATEST_TIMESTAMP:
        start = len(candidates) - 1
    elif timestamp == EARLIEST_TIMESTAMP:
        start = 0
    else:
        start = max((i for i, (_, when) in enumerate(candidates) if when <= timestamp), default=-1)
    count = max(0, min(max_offsets, start + 1))
    return sorted((offset for offset, _ in candidates[start - count + 1:start + 1]), reverse=True)
