"""Byte layouts of Kafka's record batches: the record-batch header (magic 2)
as it sits in the broker's segment files and in a Fetch response (the
consumers' decoder, zkcoord.fetch.records, reads it with these names), the
prefix every message format shares (how a run of old-format messages is
walked), and the entries of the broker's sparse index.

Below both of its users, the broker that stores batches and the fetcher
that decodes them. With the decoder, it is the only code of the data plane
that packs or unpacks bytes by hand; the Kafka request and response codecs
come from kafka-python's protocol classes.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from crc32c import crc32c

from zkcoord.errors import ZkcoordError

# The v2 record batch header, in Kafka's order (all big-endian).
_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
# Bytes needed to learn a batch's extent: base offset, length, ... last offset delta.
PEEK_SIZE = 27
_PEEK = struct.Struct(">qi")
_LAST_DELTA = struct.Struct(">i")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
# Every message format (magic 0, 1 and 2) starts an entry with its offset and
# the length of the rest, and keeps its magic byte at position 16.
_ENTRY_PREFIX = struct.Struct(">qi")
ENTRY_MAGIC_POSITION = 16
# The smallest old-format message: CRC, magic, attributes, key and value lengths (magic 0).
LEGACY_MIN_LENGTH = 14

LOG_OVERHEAD = 12  # base offset + batch length: the bytes batch length does not count
CRC_START = 21  # the CRC covers attributes .. end of batch
MAGIC = 2
NO_PRODUCER_ID = -1
COMPRESSION_MASK = 0x07
LOG_APPEND_TIME_FLAG = 0x08  # the broker, not the producer, set the records' timestamps
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20

# One sparse index entry: offset relative to the segment base, byte position in
# the segment, and the largest timestamp of every batch before that position.
_INDEX_ENTRY = struct.Struct(">iiq")
INDEX_ENTRY_SIZE = _INDEX_ENTRY.size


class CorruptBatchError(ZkcoordError):
    """Bytes that should hold a record batch do not: short, bad magic, bad CRC."""


class UnsupportedMagicError(CorruptBatchError):
    """Messages of a format the request may not carry where they are: the
    old formats (magic 0 or 1) in a Produce of version 3 or later, or a
    record batch among old-format messages (Kafka's INVALID_RECORD)."""


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)


def _check_magic(header: BatchHeader) -> None:
    if header.magic in (0, 1):
        raise UnsupportedMagicError(f"message format magic {header.magic} where only record batches "
                                    f"(magic 2) may be")
    if header.magic != MAGIC:
        raise CorruptBatchError(f"record batch magic {header.magic} is not a known format")


def parse_header(buf, pos: int = 0) -> BatchHeader:
    """The header of the batch at ``buf[pos:]``; raises CorruptBatchError if it
    cannot be a magic-2 batch that fits in ``buf``."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptBatchError("record batch shorter than its header")
    header = BatchHeader(*_HEADER.unpack_from(buf, pos))
    _check_magic(header)
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptBatchError(f"record batch length {header.batch_length} is too small")
    if pos + header.size > len(buf):
        raise CorruptBatchError("record batch runs past the end of its buffer")
    if header.last_offset_delta < 0:
        raise CorruptBatchError("record batch has a negative last offset delta")
    return header


def parse_header_only(head) -> BatchHeader:
    """The header from its first HEADER_SIZE bytes, without the batch body."""
    if len(head) < HEADER_SIZE:
        raise CorruptBatchError("record batch shorter than its header")
    header = BatchHeader(*_HEADER.unpack_from(head, 0))
    _check_magic(header)
    return header


def check_crc(buf, pos: int, header: BatchHeader) -> None:
    """Raise CorruptBatchError unless the batch's CRC-32C matches its bytes."""
    actual = crc32c(memoryview(buf)[pos + CRC_START : pos + header.size])
    if actual != header.crc:
        raise CorruptBatchError(f"record batch CRC {actual:#010x} != stored {header.crc:#010x}")


def peek_entry(buf, pos: int = 0) -> tuple[int, int]:
    """(total size, magic) of the batch or old-format message at ``buf[pos:]``;
    CorruptBatchError unless it lies whole within ``buf``."""
    if len(buf) - pos <= ENTRY_MAGIC_POSITION:
        raise CorruptBatchError("message shorter than its header")
    _, length = _ENTRY_PREFIX.unpack_from(buf, pos)
    magic = buf[pos + ENTRY_MAGIC_POSITION]
    if length < LEGACY_MIN_LENGTH:
        raise CorruptBatchError(f"message length {length} is too small")
    if pos + LOG_OVERHEAD + length > len(buf):
        raise CorruptBatchError("message runs past the end of its buffer")
    return LOG_OVERHEAD + length, magic


def peek_extent(buf) -> tuple[int, int, int]:
    """(base offset, total size, last offset delta) from a PEEK_SIZE prefix."""
    base, length = _PEEK.unpack_from(buf, 0)
    (delta,) = _LAST_DELTA.unpack_from(buf, 23)
    return base, length + LOG_OVERHEAD, delta


def set_base_offset(buf: bytearray, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Stamp the broker's offset and leader epoch; neither is covered by the CRC."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)
    _LEADER_EPOCH.pack_into(buf, pos + 12, leader_epoch)


def pack_index_entry(relative_offset: int, position: int, max_timestamp_before: int) -> bytes:
    return _INDEX_ENTRY.pack(relative_offset, position, max_timestamp_before)


def unpack_index(data: bytes) -> list[tuple[int, int, int]]:
    usable = len(data) - len(data) % INDEX_ENTRY_SIZE
    return [entry for entry in _INDEX_ENTRY.iter_unpack(data[:usable])]
