"""A partition's log: append-only segment files of Kafka record batches.

Each segment is ``<base offset, 20 digits>.log`` plus a sparse ``.index`` whose
entries map an offset to a byte position and carry the largest timestamp seen
before that position (so one index serves lookups by offset and by time).
Offsets are assigned by rewriting each batch's base offset. On open, the last
segment (and any segment whose index is missing or unusable) is scanned batch by
batch, CRCs checked, and a torn tail truncated. Retention deletes whole sealed
segments by size and by age. The log knows nothing of sockets or gevent; it is
single-writer and callers serialise access.
"""

from __future__ import annotations

import bisect
import logging
import os
from typing import Callable, NamedTuple, Optional

from kafka.record.default_records import DefaultRecordBatch

from zkcoord import batch_format
from zkcoord.batch_format import CorruptBatchError
from zkcoord.broker.config import LogConfig
from zkcoord.errors import OffsetOutOfRangeError, ZkcoordError

log = logging.getLogger(__name__)

_LOG_SUFFIX = ".log"
_INDEX_SUFFIX = ".index"
_SEQ_MAX = 2**31 - 1


class LogError(ZkcoordError):
    """Base of partition-log errors that map to a Kafka error code."""


class OutOfOrderSequenceError(LogError):
    """An idempotent producer's batch skipped or repeated sequence numbers."""


class InvalidProducerEpochError(LogError):
    """An idempotent producer wrote with an epoch older than one already seen."""


class RecordTooLargeError(LogError):
    """A batch is larger than a whole segment may be."""


class AppendResult(NamedTuple):
    base_offset: int
    last_offset: int
    log_start_offset: int


class ReadSlice(NamedTuple):
    """Whole batches ``[position, position + length)`` of one segment file;
    ``next_offset`` is the offset after the last of them."""

    fd: int
    position: int
    length: int
    next_offset: int

    def read(self) -> bytes:
        return os.pread(self.fd, self.length, self.position)


class _ProducerEntry(NamedTuple):
    epoch: int
    first_seq: int
    last_seq: int
    result: AppendResult


class Segment:
    """One ``.log`` file and its sparse index, loaded into memory."""

    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int):
        self.base_offset = base_offset
        self._interval = index_interval_bytes
        name = os.path.join(directory, f"{base_offset:020d}")
        self.log_path = name + _LOG_SUFFIX
        self.index_path = name + _INDEX_SUFFIX
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self.index_fd = os.open(self.index_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        # Parallel lists so bisect works on either key.
        self.index_offsets: list[int] = []
        self.index_positions: list[int] = []
        self.index_times: list[int] = []
        self._bytes_since_index = 0

    # -- loading -------------------------------------------------------

    def load_index(self) -> bool:
        """Load a sealed segment's index and scan only past its last entry.
        False if the index cannot be trusted (then call ``recover``)."""
        data = os.pread(self.index_fd, os.fstat(self.index_fd).st_size, 0)
        entries = batch_format.unpack_index(data)
        last_pos = -1
        for rel, pos, ts in entries:
            if pos <= last_pos or pos >= self.size or rel < 0:
                return False
            last_pos = pos
            self.index_offsets.append(self.base_offset + rel)
            self.index_positions.append(pos)
            self.index_times.append(ts)
        start = self.index_positions[-1] if entries else 0
        self.max_timestamp = self.index_times[-1] if entries else -1
        self.next_offset = self.index_offsets[-1] if entries else self.base_offset
        try:
            self._scan(start, check_crc=False)
        except CorruptBatchError:
            return False
        return True

    def recover(self) -> int:
        """Scan every batch, check CRCs, truncate a torn or corrupt tail and
        rebuild the index. Returns the number of bytes truncated."""
        self.index_offsets.clear()
        self.index_positions.clear()
        self.index_times.clear()
        os.ftruncate(self.index_fd, 0)
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self._bytes_since_index = 0
        good = self._scan(0, check_crc=True, build_index=True)
        torn = self.size - good
        if torn:
            os.ftruncate(self.fd, good)
            self.size = good
        return torn

    def _scan(self, start: int, check_crc: bool, build_index: bool = False) -> int:
        """Walk batches from ``start``; return the position after the last good
        one. With build_index a bad batch ends the walk (a torn tail); without
        it, a bad batch raises CorruptBatchError."""
        pos = start
        while pos < self.size:
            try:
                head = os.pread(self.fd, batch_format.HEADER_SIZE, pos)
                if len(head) < batch_format.HEADER_SIZE:
                    raise CorruptBatchError("torn batch header")
                _, size, _ = batch_format.peek_extent(head)
                if size < batch_format.HEADER_SIZE or pos + size > self.size:
                    raise CorruptBatchError("batch runs past the end of the segment")
                data = os.pread(self.fd, size, pos) if check_crc else head
                header = batch_format.parse_header(data) if check_crc else batch_format.parse_header_only(head)
                if check_crc:
                    batch_format.check_crc(data, 0, header)
                if header.base_offset != self.next_offset:
                    raise CorruptBatchError(
                        f"batch base offset {header.base_offset} where {self.next_offset} was expected")
            except CorruptBatchError:
                if build_index:
                    return pos
                raise
            if build_index:
                self._note_batch(pos, header)
            else:
                self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
                self.next_offset = header.next_offset
            pos += header.size
        return pos

    # -- writing -------------------------------------------------------

    def _note_batch(self, position: int, header: batch_format.BatchHeader) -> None:
        """Account for a batch now at ``position``; add a sparse index entry
        when enough bytes have gone by since the last one."""
        if not self.index_positions or self._bytes_since_index >= self._interval:
            self.index_offsets.append(header.base_offset)
            self.index_positions.append(position)
            self.index_times.append(self.max_timestamp)
            os.write(self.index_fd, batch_format.pack_index_entry(
                header.base_offset - self.base_offset, position, self.max_timestamp))
            self._bytes_since_index = 0
        self._bytes_since_index += header.size
        self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
        self.next_offset = header.next_offset

    def append(self, data, headers: list[tuple[int, batch_format.BatchHeader]]) -> None:
        position = self.size
        written = os.pwrite(self.fd, data, position)
        if written != len(data):
            raise LogError(f"short write to {self.log_path}: {written} of {len(data)} bytes")
        self.size += written
        for rel_pos, header in headers:
            self._note_batch(position + rel_pos, header)

    def flush(self) -> None:
        os.fsync(self.fd)
        os.fsync(self.index_fd)

    # -- reading -------------------------------------------------------

    def find_position(self, offset: int) -> int:
        """Position of the batch holding ``offset`` (which must be in range)."""
        i = bisect.bisect_right(self.index_offsets, offset) - 1
        pos = self.index_positions[i] if i >= 0 else 0
        while pos < self.size:
            base, size, delta = batch_format.peek_extent(os.pread(self.fd, batch_format.PEEK_SIZE, pos))
            if base + delta >= offset:
                return pos
            pos += size
        return self.size

    def extent_from(self, start: int, max_bytes: int) -> tuple[int, int]:
        """Length of the whole batches from ``start`` that fit in max_bytes,
        but never less than one whole batch, and the offset after the last
        of them (from the headers peeked anyway: no read of its own)."""
        base, first, delta = batch_format.peek_extent(os.pread(self.fd, batch_format.PEEK_SIZE, start))
        end = start + first
        limit = start + max_bytes
        if limit <= end:
            return first, base + delta + 1
        i = bisect.bisect_right(self.index_positions, limit) - 1
        if i >= 0 and self.index_positions[i] > end:
            end = self.index_positions[i]
        while end < self.size:
            base, size, _ = batch_format.peek_extent(os.pread(self.fd, batch_format.PEEK_SIZE, end))
            if end + size > limit:
                return end - start, base  # the batch left out starts where the slice ends
            end += size
        return end - start, self.next_offset

    def last_modified_ms(self) -> int:
        return int(os.fstat(self.fd).st_mtime * 1000)

    def newest_timestamp(self) -> int:
        """The largest record timestamp, or, when no record has one (magic-0
        messages have none), when the file was last written, as Kafka dates
        a segment; -1 for an empty segment."""
        if self.max_timestamp >= 0 or self.size == 0:
            return self.max_timestamp
        return self.last_modified_ms()

    def close(self) -> None:
        os.close(self.fd)
        os.close(self.index_fd)

    def delete(self) -> None:
        self.close()
        for path in (self.log_path, self.index_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


class PartitionLog:
    """The log of one partition: a list of segments, the last one active."""

    def __init__(self, directory: str, config: LogConfig, clock: Callable[[], float],
                 leader_epoch: int = 0):
        self.directory = directory
        self.config = config
        self.leader_epoch = leader_epoch
        self._clock = clock
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self._producers: dict[int, _ProducerEntry] = {}
        self._unflushed = 0
        self._last_flush = clock()
        os.makedirs(directory, exist_ok=True)
        self._open()

    # -- lifecycle -------------------------------------------------------

    def _open(self) -> None:
        bases = sorted(
            int(name[: -len(_LOG_SUFFIX)])
            for name in os.listdir(self.directory)
            if name.endswith(_LOG_SUFFIX) and name[: -len(_LOG_SUFFIX)].isdigit()
        )
        for i, base in enumerate(bases):
            segment = self._new_segment(base)
            last = i == len(bases) - 1
            if last or not segment.load_index():
                torn = segment.recover()
                if torn:
                    log.warning("%s: truncated %d bytes of torn or corrupt data in segment %d",
                                self.directory, torn, base)
            if self.segments and segment.base_offset != self.segments[-1].next_offset:
                log.warning("%s: segment %d does not follow offset %d; dropping it and later ones",
                            self.directory, base, self.segments[-1].next_offset)
                segment.delete()
                for later in bases[i + 1:]:
                    self._new_segment(later).delete()
                break
            self.segments.append(segment)
            self._bases.append(base)
        if not self.segments:
            self._roll(0)
        self._rebuild_producers()

    def _new_segment(self, base: int) -> Segment:
        return Segment(self.directory, base, self.config.index_interval_bytes)

    def _roll(self, base: int) -> Segment:
        segment = self._new_segment(base)
        self.segments.append(segment)
        self._bases.append(base)
        return segment

    def _rebuild_producers(self) -> None:
        """Idempotence state from the active segment's batches: enough to
        recognise a retry of a batch written just before a restart."""
        segment = self.segments[-1]
        pos = 0
        while pos < segment.size:
            header = batch_format.parse_header_only(os.pread(segment.fd, batch_format.HEADER_SIZE, pos))
            if header.producer_id >= 0 and header.base_sequence >= 0:
                self._producers[header.producer_id] = _ProducerEntry(
                    header.producer_epoch, header.base_sequence,
                    _add_seq(header.base_sequence, header.last_offset_delta),
                    AppendResult(header.base_offset, header.last_offset, self.log_start_offset))
            pos += header.size

    def close(self) -> None:
        for segment in self.segments:
            segment.close()
        self.segments.clear()
        self._bases.clear()

    # -- offsets -------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def max_timestamp(self) -> int:
        """The largest timestamp in the log, -1 if it holds no record."""
        return max(segment.max_timestamp for segment in self.segments)

    def segment_times(self) -> list[tuple[int, int]]:
        """(base offset, last modified, ms) of every segment, oldest first."""
        return [(segment.base_offset, segment.last_modified_ms()) for segment in self.segments]

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self.segments)

    # -- append ----------------------------------------------------------

    def append(self, records) -> AppendResult:
        """Validate the batches in ``records``, assign their offsets and write
        them. Raises CorruptBatchError (nothing written) for a malformed batch,
        OutOfOrderSequenceError / InvalidProducerEpochError for a producer out
        of step; a retried idempotent batch returns its original offsets."""
        buf = bytearray(records)
        headers: list[tuple[int, batch_format.BatchHeader]] = []
        pos = 0
        while pos < len(buf):
            header = batch_format.parse_header(buf, pos)
            batch_format.check_crc(buf, pos, header)
            headers.append((pos, header))
            pos += header.size
        if not headers:
            raise CorruptBatchError("produce request carried no record batch")
        if len(buf) > self.config.segment_bytes:
            raise RecordTooLargeError(
                f"{len(buf)} bytes of batches exceed segment_bytes {self.config.segment_bytes}")

        first = headers[0][1]
        duplicate = self._check_producer(first, len(headers))
        if duplicate is not None:
            return duplicate

        next_offset = self.log_end_offset
        base = next_offset
        stamped: list[tuple[int, batch_format.BatchHeader]] = []
        for pos, header in headers:
            batch_format.set_base_offset(buf, pos, next_offset, self.leader_epoch)
            stamped.append((pos, header._replace(base_offset=next_offset)))
            next_offset += header.last_offset_delta + 1
        segment = self.segments[-1]
        if segment.size > 0 and segment.size + len(buf) > self.config.segment_bytes:
            segment = self._roll(base)
        segment.append(buf, stamped)
        result = AppendResult(base, next_offset - 1, self.log_start_offset)
        if first.producer_id >= 0 and first.base_sequence >= 0:
            last = stamped[-1][1]
            self._producers[first.producer_id] = _ProducerEntry(
                first.producer_epoch, first.base_sequence,
                _add_seq(last.base_sequence, last.last_offset_delta), result)
        self._unflushed += next_offset - base
        if self.config.flush_messages is not None and self._unflushed >= self.config.flush_messages:
            self.flush()
        return result

    def _check_producer(self, header: batch_format.BatchHeader, batches: int) -> Optional[AppendResult]:
        if header.producer_id < 0 or header.base_sequence < 0:
            return None
        entry = self._producers.get(header.producer_id)
        if entry is None:
            return None  # unknown producer (new, or its state expired): accept
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {header.producer_epoch} < {entry.epoch}")
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id} new epoch must start at sequence 0")
            return None
        if header.base_sequence == entry.first_seq:
            return entry.result
        if header.base_sequence != _add_seq(entry.last_seq, 1):
            raise OutOfOrderSequenceError(
                f"producer {header.producer_id} sent sequence {header.base_sequence}, "
                f"expected {_add_seq(entry.last_seq, 1)}")
        return None

    def flush(self) -> None:
        self.segments[-1].flush()
        self._unflushed = 0
        self._last_flush = self._clock()

    def maybe_flush(self) -> None:
        """Apply the time-based flush policy; call it periodically."""
        if (self.config.flush_ms is not None and self._unflushed
                and (self._clock() - self._last_flush) * 1000 >= self.config.flush_ms):
            self.flush()

    # -- read ------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> Optional[ReadSlice]:
        """Whole batches starting with the one holding ``offset``: at most
        max_bytes, but at least one batch. None at the log end."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} outside [{self.log_start_offset}, {self.log_end_offset}]")
        if offset == self.log_end_offset:
            return None
        i = bisect.bisect_right(self._bases, offset) - 1
        segment = self.segments[i]
        while offset >= segment.next_offset:
            i += 1
            segment = self.segments[i]
        start = segment.find_position(offset)
        if start >= segment.size:
            return None
        return ReadSlice(segment.fd, start, *segment.extent_from(start, max(max_bytes, 1)))

    def offset_for_timestamp(self, timestamp: int) -> Optional[tuple[int, int]]:
        """(offset, timestamp) of the first record whose timestamp is at least
        ``timestamp``; None if there is none."""
        for segment in self.segments:
            if segment.max_timestamp < timestamp:
                continue
            i = bisect.bisect_left(segment.index_times, timestamp) - 1
            pos = segment.index_positions[i] if i >= 0 else 0
            while pos < segment.size:
                header = batch_format.parse_header_only(os.pread(segment.fd, batch_format.HEADER_SIZE, pos))
                if header.max_timestamp >= timestamp:
                    try:
                        batch = DefaultRecordBatch(os.pread(segment.fd, header.size, pos))
                        for record in batch:
                            if record.timestamp >= timestamp:
                                return record.offset, record.timestamp
                    except Exception as exc:  # a codec this process lacks
                        # The batch's first offset is at or before the answer,
                        # so a consumer starting there misses nothing.
                        log.debug("cannot decode batch at %d for a time lookup: %s",
                                  header.base_offset, exc)
                        return header.base_offset, header.max_timestamp
                pos += header.size
        return None

    # -- retention -------------------------------------------------------

    def _expired(self, segment: Segment, now_ms: int) -> bool:
        newest = segment.newest_timestamp()
        return self.config.retention_ms >= 0 and newest >= 0 and now_ms - newest > self.config.retention_ms

    def apply_retention(self, now_ms: int) -> int:
        """Delete the oldest sealed segments that are past the retention
        limits; returns how many were deleted. When even the active segment
        has expired, a new empty one is started so that it can go too (an
        idle partition's data still expires; its offsets carry on)."""
        active = self.segments[-1]
        if active.size > 0 and self._expired(active, now_ms):
            self._roll(active.next_offset)
        deleted = 0
        total = self.size_bytes
        while len(self.segments) > 1:
            oldest = self.segments[0]
            too_old = self._expired(oldest, now_ms)
            too_big = (self.config.retention_bytes >= 0
                       and total - oldest.size >= self.config.retention_bytes)
            if not (too_old or too_big):
                break
            total -= oldest.size
            self.segments.pop(0)
            self._bases.pop(0)
            oldest.delete()
            deleted += 1
        return deleted


def _add_seq(seq: int, delta: int) -> int:
    """Producer sequence numbers wrap from 2**31-1 to 0."""
    return (seq + delta) % (_SEQ_MAX + 1)
