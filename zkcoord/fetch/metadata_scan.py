"""A Metadata answer read for its brokers, topics and leaders, straight from its bytes.

kafka-python decodes every field of every partition of a Metadata answer into
objects: tens of milliseconds for a cluster of ten thousand partitions, which
a server polling Kafka (``--kafka-bootstrap``, KafkaClusterWatch) pays at
every answer that differs from the last. What it needs is the brokers, and
each topic's error, id and partitions with their leaders: :func:`scan` reads
those and steps over the rest (replicas, ISRs, tagged fields), about five
times faster. The flexible versions only (9 and up: every Kafka that runs in
KRaft mode answers them); the caller decodes older ones whole.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, Optional

FIRST_FLEXIBLE_VERSION = 9
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
# A partition's error code, index, leader and leader epoch.
_PARTITION_HEAD = struct.Struct(">hiii")


class ScanError(ValueError):
    """The bytes are not a Metadata answer of the version given."""


class ScannedTopic(NamedTuple):
    error_code: int
    name: Optional[str]
    topic_id: Optional[bytes]  # the 16 bytes of its Uuid (None before version 10)
    partitions: list[tuple[int, int, int]]  # (error code, partition index, leader id)


class Scanned(NamedTuple):
    brokers: dict[int, tuple[str, int]]  # node id -> (host, port)
    topics: list[ScannedTopic]


def scan(body, version: int) -> Scanned:
    """The brokers and topics of the Metadata answer ``body`` (the bytes past
    its response header) of ``version`` (9 or more). Raises ScanError if the
    bytes do not read as one, to the last byte."""
    if version < FIRST_FLEXIBLE_VERSION:
        raise ScanError(f"Metadata version {version} is not a flexible one")
    reader = _Reader(memoryview(body))
    try:
        reader.pos = 4  # throttle time
        brokers = {}
        for _ in range(reader.count()):
            node_id = reader.int32()
            host = reader.string()
            port = reader.int32()
            reader.string()  # rack
            reader.skip_tags()
            brokers[node_id] = (host or "", port)
        reader.string()  # cluster id
        reader.pos += 4  # controller id
        topics = [_topic(reader, version) for _ in range(reader.count())]
        if version <= 10:
            reader.pos += 4  # cluster authorized operations
        reader.skip_tags()
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise ScanError(f"not a Metadata v{version} answer: {exc}") from None
    if reader.pos != len(reader.buf):
        raise ScanError(f"not a Metadata v{version} answer: {len(reader.buf) - reader.pos} byte(s) left over")
    return Scanned(brokers, topics)


def _topic(reader: "_Reader", version: int) -> ScannedTopic:
    error_code = reader.int16()
    name = reader.string()
    topic_id = None
    if version >= 10:
        topic_id = bytes(reader.buf[reader.pos:reader.pos + 16])
        reader.pos += 16
    reader.pos += 1  # is internal
    partitions = []
    count = reader.count()
    # Ten thousand partitions and more: the loop keeps the position in a
    # local and reads one-byte lengths in place, the common case.
    buf, pos, unpack, head = reader.buf, reader.pos, _PARTITION_HEAD.unpack_from, _PARTITION_HEAD.size
    for _ in range(count):
        error, index, leader, _epoch = unpack(buf, pos)
        pos += head
        for _array in range(3):  # replicas, ISR, offline replicas: int32s
            length = buf[pos]
            if length < 0x80:
                pos += 4 * length - 3 if length else 1
            else:
                reader.pos = pos
                length = reader.count()
                pos = reader.pos + 4 * length
        if buf[pos]:
            reader.pos = pos
            reader.skip_tags()
            pos = reader.pos
        else:
            pos += 1
        partitions.append((error, index, leader))
    reader.pos = pos + 4  # past the topic's authorized operations
    reader.skip_tags()
    return ScannedTopic(error_code, name, topic_id, partitions)


class _Reader:
    def __init__(self, buf: memoryview):
        self.buf = buf
        self.pos = 0

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.buf[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def count(self) -> int:
        """A compact array's length (0 for a null one)."""
        return max(self.uvarint() - 1, 0)

    def int16(self) -> int:
        value = _INT16.unpack_from(self.buf, self.pos)[0]
        self.pos += 2
        return value

    def int32(self) -> int:
        value = _INT32.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return value

    def string(self) -> Optional[str]:
        """A compact (nullable) string."""
        size = self.uvarint() - 1
        if size < 0:
            return None
        end = self.pos + size
        if end > len(self.buf):
            raise IndexError("a string runs past the end")
        value = str(self.buf[self.pos:end], "utf-8")
        self.pos = end
        return value

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # the tag
            size = self.uvarint()  # read before pos is: it moves it
            self.pos += size
        if self.pos > len(self.buf):
            raise IndexError("tagged fields run past the end")
