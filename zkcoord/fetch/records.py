"""Kafka record batches (magic 2) decoded into columns, once per batch.

A Fetch response carries each partition's records as a run of record batches.
:func:`decode_batches` turns such a run into :class:`RecordColumns`: the
records' offsets, timestamps, keys, values and headers in Arrow's memory
layout (validity bitmaps, int32 offsets, one data buffer per column), so that
an Arrow record batch is built from them without touching a record in Python
(:meth:`RecordColumns.to_arrow`), and :class:`~zkcoord.records.Record` tuples
only when an application asks for them (:meth:`RecordColumns.records`).

Two decoders do this work: the compiled one (``_recordbatch.c``, built by the
project's install step) and :func:`decode_python`, the pure-Python fallback
used when the extension is not built. They take the same arguments and return
the same bytes; ``tests/unit/test_record_decoder.py`` holds them to it, and both
to kafka-python's reader, over every codec, control batches, compacted gaps,
headers and null keys and values. Decompression (kafka-python's codecs) and
the CRC (crc32c) are shared by both.

What a decode returns, for records with ``start <= offset < end``:

- control batches (transaction markers) yield no records, but their offsets
  count as read;
- with ``aborted_transactions`` (a read_committed fetch: the Fetch
  response's (producer id, first offset) pairs), the batches of aborted
  transactions yield no records either, and count as read. The rule is the
  Java consumer's: walking the batches in order, a producer's aborted
  transaction begins to count once a batch of that producer reaches its
  first offset, and ends at that producer's abort marker; a transactional
  batch of a producer whose aborted transaction counts is skipped. Records
  at or above the last stable offset are the caller's to keep out (``end``);
- offsets a compaction removed are simply absent;
- ``next_offset`` is the offset after the last batch read (every offset
  below it was either returned or does not exist), ``end`` once the run
  reached ``end``; ``consumed`` is how many bytes of ``data`` that took. A
  partial batch at the end of the data (a fetch cut at its byte limit) is
  left unread, without error.
"""

from __future__ import annotations

import struct
from array import array
from typing import Iterable, NamedTuple, Optional

from crc32c import crc32c

from zkcoord.batch_format import (
    COMPRESSION_MASK, CONTROL_FLAG, CRC_START, HEADER_SIZE, LOG_APPEND_TIME_FLAG, LOG_OVERHEAD, MAGIC,
    TRANSACTIONAL_FLAG, CorruptBatchError, parse_header_only,
)
from zkcoord.errors import ZkcoordError
from zkcoord.records import Record

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
CODEC_NAMES = {0: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CREATE_TIME, LOG_APPEND_TIME = 0, 1
ABORT_MARKER, COMMIT_MARKER = 0, 1  # a control record's type, in its key

_INT32_MAX = 2**31 - 1
_INT64_MIN, _INT64_MAX = -2**63, 2**63 - 1


class CorruptRecordsError(ZkcoordError):
    """Bytes that should hold record batches do not: a bad CRC, lengths that
    run past their batch, an unknown codec or undecompressable payload, or a
    message format older than magic 2."""


def decompress(codec: int, payload) -> bytes:
    """The records of a compressed batch, with kafka-python's codecs."""
    from kafka import codec as codecs

    decoders = {GZIP: codecs.gzip_decode, SNAPPY: codecs.snappy_decode, LZ4: codecs.lz4_decode,
                ZSTD: codecs.zstd_decode}
    decoder = decoders.get(codec)
    if decoder is None:
        raise CorruptRecordsError(f"unknown compression codec {codec}")
    try:
        return decoder(bytes(payload))
    except Exception as exc:  # each library raises its own types on bad input
        raise CorruptRecordsError(f"cannot decompress {CODEC_NAMES[codec]} records: {exc}") from None


class RecordColumns(NamedTuple):
    """Decoded records of one partition, as column buffers in Arrow's layout.

    Binary columns are (validity bitmap or None when nothing is null, null
    count, int32 offsets of rows + 1 entries, data). Headers are a list per
    record: ``header_offsets`` (int32, rows + 1) index the header keys
    (never null) and values (nullable)."""

    rows: int
    offsets: bytes  # int64 per record
    timestamps: bytes  # int64 milliseconds per record
    timestamp_types: bytes  # int32 per record: CREATE_TIME or LOG_APPEND_TIME
    key_validity: Optional[bytes]
    key_nulls: int
    key_offsets: bytes
    key_data: bytes
    value_validity: Optional[bytes]
    value_nulls: int
    value_offsets: bytes
    value_data: bytes
    header_offsets: bytes
    header_key_offsets: bytes
    header_key_data: bytes
    header_value_validity: Optional[bytes]
    header_value_nulls: int
    header_value_offsets: bytes
    header_value_data: bytes
    next_offset: int
    consumed: int

    def offset_list(self) -> list[int]:
        return array("q", self.offsets).tolist()

    def records(self, topic: str, partition: int, begin: int = 0, end: Optional[int] = None) -> list[Record]:
        """One :class:`Record` per decoded record, of rows ``[begin, end)``
        (made by the compiled decoder when built, else here, alike)."""
        end = self.rows if end is None else end
        if not 0 <= begin <= end <= self.rows:
            raise ValueError(f"rows {begin}..{end} are outside the {self.rows} decoded")
        if _compiled is not None:
            return _compiled.records(Record, topic, partition, self.offsets, self.timestamps, self.key_validity,
                                     self.key_offsets, self.key_data, self.value_validity, self.value_offsets,
                                     self.value_data, begin, end)
        return self.records_python(topic, partition, begin, end)

    def records_python(self, topic: str, partition: int, begin: int, end: int) -> list[Record]:
        """:meth:`records` without the compiled decoder."""
        keys = _binary_values(begin, end, self.key_validity, self.key_offsets, self.key_data)
        values = _binary_values(begin, end, self.value_validity, self.value_offsets, self.value_data)
        offsets = memoryview(self.offsets).cast("q")[begin:end].tolist()
        timestamps = memoryview(self.timestamps).cast("q")[begin:end].tolist()
        new = tuple.__new__
        return [new(Record, (topic, partition, offset, key, value, timestamp))
                for offset, key, value, timestamp in zip(offsets, keys, values, timestamps)]

    def headers(self) -> list[list[tuple[str, Optional[bytes]]]]:
        """Each record's headers as (key, value) pairs, in order."""
        starts = array("i", self.header_offsets).tolist()
        count = starts[-1]
        keys = [k.decode("utf-8", "replace") for k in _binary_values(0, count, None, self.header_key_offsets,
                                                                     self.header_key_data)]
        values = _binary_values(0, count, self.header_value_validity, self.header_value_offsets,
                                self.header_value_data)
        pairs = list(zip(keys, values))
        return [pairs[a:b] for a, b in zip(starts, starts[1:])]

    def to_arrow(self, topic: str, partition: int, *, include_headers: bool = False):
        """A ``pyarrow.RecordBatch`` in the columns of Spark's Kafka source
        (:func:`arrow_schema`), built on the buffers without copying them."""
        import pyarrow as pa
        import pyarrow.compute as pc

        n = self.rows
        buffer = pa.py_buffer
        millis = pa.Array.from_buffers(pa.int64(), n, [None, buffer(self.timestamps)])
        columns = [
            _arrow_binary(pa.binary(), n, self.key_validity, self.key_nulls, self.key_offsets, self.key_data),
            _arrow_binary(pa.binary(), n, self.value_validity, self.value_nulls, self.value_offsets,
                          self.value_data),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.Array.from_buffers(pa.int64(), n, [None, buffer(self.offsets)]),
            pc.multiply(millis, 1000).view(pa.timestamp("us", tz="UTC")),
            pa.Array.from_buffers(pa.int32(), n, [None, buffer(self.timestamp_types)]),
        ]
        if include_headers:
            count = memoryview(self.header_offsets).cast("i")[-1]
            header_type = _header_type()
            entries = pa.StructArray.from_arrays(
                [_arrow_binary(pa.string(), count, None, 0, self.header_key_offsets, self.header_key_data),
                 _arrow_binary(pa.binary(), count, self.header_value_validity, self.header_value_nulls,
                               self.header_value_offsets, self.header_value_data)],
                fields=list(header_type))
            columns.append(pa.ListArray.from_buffers(pa.list_(header_type), n,
                                                     [None, buffer(self.header_offsets)], children=[entries]))
        return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))


def _arrow_binary(type_, n: int, validity: Optional[bytes], nulls: int, offsets: bytes, data: bytes):
    import pyarrow as pa

    bitmap = pa.py_buffer(validity) if validity is not None else None
    return pa.Array.from_buffers(type_, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls)


def _binary_values(begin: int, end: int, validity: Optional[bytes], offsets: bytes,
                   data: bytes) -> list[Optional[bytes]]:
    """Rows ``[begin, end)`` of a binary column as bytes, None where null."""
    bounds = memoryview(offsets).cast("i")[begin:end + 1].tolist()
    values = [data[a:b] for a, b in zip(bounds, bounds[1:])]
    if validity is not None:
        for i in range(begin, end):
            if not validity[i >> 3] & (1 << (i & 7)):
                values[i - begin] = None
    return values


def _header_type():
    import pyarrow as pa

    return pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])


def arrow_schema(include_headers: bool = False):
    """The columns of Spark's Kafka source; ``headers`` last when asked for."""
    import pyarrow as pa

    fields = [
        ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
        ("partition", pa.int32()), ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(("headers", pa.list_(_header_type())))
    return pa.schema(fields)


# -- decoding --------------------------------------------------------------------------------

def decode_batches(data, *, start: int = 0, end: Optional[int] = None, check_crcs: bool = True,
                   aborted_transactions: Optional[Iterable[tuple[int, int]]] = None,
                   compiled: Optional[bool] = None) -> RecordColumns:
    """The records with ``start <= offset < end`` in a run of record batches.

    ``aborted_transactions``: None reads uncommitted (every data record);
    (producer id, first offset) pairs, as a read_committed Fetch response
    lists them (possibly none), leave out the aborted transactions' records.
    ``compiled`` picks the decoder: True requires the compiled one, False
    takes the pure-Python one, None (the default) the compiled one when it
    is built."""
    decoder = _pick(compiled)
    aborted = None
    if aborted_transactions is not None:
        # By first offset, as both decoders walk them.
        aborted = tuple(sorted(((int(p), int(f)) for p, f in aborted_transactions), key=lambda a: a[1]))
    return RecordColumns._make(decoder(data, start, -1 if end is None else end, decompress,
                                      crc32c if check_crcs else None, aborted))


def last_batch_epoch(data, consumed: int) -> int:
    """The leader epoch of the last whole batch in ``data[:consumed]`` (a
    decode's ``consumed``), -1 if there is none: what a fetcher sends as its
    last fetched epoch. Reads one header per batch, not the records."""
    view = memoryview(data)
    epoch, pos = -1, 0
    while pos < consumed:
        try:
            header = parse_header_only(view[pos:pos + HEADER_SIZE])
        except CorruptBatchError as exc:  # the decode read these bytes already: not expected
            raise CorruptRecordsError(str(exc)) from None
        epoch, pos = header.leader_epoch, pos + header.size
    return epoch


def _pick(compiled: Optional[bool]):
    if compiled is False:
        return decode_python
    if _compiled is None:
        if compiled:
            raise ImportError("the compiled record decoder (zkcoord.fetch._recordbatch) is not built; "
                              "run scripts/install.sh")
        return decode_python
    return _compiled.decode


def compiled_decoder_built() -> bool:
    return _compiled is not None


class _Column:
    """A nullable binary column being built (the pure-Python decoder's)."""

    __slots__ = ("validity", "nulls", "offsets", "data", "rows")

    def __init__(self) -> None:
        self.validity = bytearray()
        self.nulls = 0
        self.offsets = array("i", [0])
        self.data = bytearray()
        self.rows = 0

    def append(self, value) -> None:
        if self.rows % 8 == 0:
            self.validity.append(0)
        if value is None:
            self.nulls += 1
        else:
            self.validity[self.rows >> 3] |= 1 << (self.rows & 7)
            if len(self.data) + len(value) > _INT32_MAX:
                raise CorruptRecordsError("decoded records exceed 2 GiB in one call")
            self.data += value
        self.offsets.append(len(self.data))
        self.rows += 1

    def parts(self, with_validity: bool = True) -> tuple:
        validity = bytes(self.validity) if self.nulls else None
        head = (validity, self.nulls) if with_validity else ()
        return head + (self.offsets.tobytes(), bytes(self.data))


class _Cursor:
    __slots__ = ("data", "pos", "end")

    def __init__(self, data, pos: int, end: int) -> None:
        self.data, self.pos, self.end = data, pos, end

    def varint(self, max_bytes: int) -> Optional[int]:
        value = shift = 0
        for _ in range(max_bytes):
            if self.pos >= self.end:
                return None
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (value >> 1) ^ -(value & 1)
            shift += 7
        return None

    def field(self):
        """(ok, value): a length-prefixed field, None for length -1."""
        n = self.varint(5)
        if n is None:
            return False, None
        if n == -1:
            return True, None
        if n < 0 or n > self.end - self.pos:
            return False, None
        value = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return True, value


def _corrupt(what: str, offset: int) -> CorruptRecordsError:
    return CorruptRecordsError(f"corrupt record batch at offset {offset}: {what}")


class _Columns:
    def __init__(self) -> None:
        self.offsets = array("q")
        self.timestamps = array("q")
        self.types = array("i")
        self.keys = _Column()
        self.values = _Column()
        self.header_offsets = array("i", [0])
        self.header_keys = _Column()
        self.header_values = _Column()


def _decode_records(out: _Columns, data, count: int, base_offset: int, first_timestamp: int,
                    max_timestamp: int, ts_type: int, start: int, end: int) -> bool:
    """Append one batch's records; True once ``end`` is reached."""
    c = _Cursor(data, 0, len(data))
    for _ in range(count):
        length = c.varint(5)
        if length is None or length < 0 or length > c.end - c.pos:
            raise _corrupt("a record's length runs past the batch", base_offset)
        r = _Cursor(data, c.pos, c.pos + length)
        c.pos += length
        if r.pos >= r.end:
            raise _corrupt("an empty record", base_offset)
        r.pos += 1  # attributes: unused
        ts_delta = r.varint(10)
        offset_delta = r.varint(5) if ts_delta is not None else None
        if offset_delta is None:
            raise _corrupt("a record's timestamp or offset delta is malformed", base_offset)
        offset = base_offset + offset_delta
        if not _INT64_MIN <= offset <= _INT64_MAX:
            raise _corrupt("an offset or timestamp overflows", base_offset)
        if end >= 0 and offset >= end:
            return True
        wanted = offset >= start
        ok_key, key = r.field()
        ok_value, value = r.field() if ok_key else (False, None)
        header_count = r.varint(5) if ok_value else None
        if header_count is None or header_count < 0:
            raise _corrupt("a record's key, value or header count is malformed", offset)
        for _ in range(header_count):
            ok, hkey = r.field()
            ok_value, hvalue = r.field() if ok and hkey is not None else (False, None)
            if not ok_value:
                raise _corrupt("a record header is malformed", offset)
            if wanted:
                out.header_keys.append(hkey)
                out.header_values.append(hvalue)
        if r.pos != r.end:
            raise _corrupt("a record has bytes past its last header", offset)
        if not wanted:
            continue
        timestamp = max_timestamp if ts_type == LOG_APPEND_TIME else first_timestamp + ts_delta
        if not _INT64_MIN <= timestamp <= _INT64_MAX:
            raise _corrupt("an offset or timestamp overflows", offset)
        out.offsets.append(offset)
        out.timestamps.append(timestamp)
        out.types.append(ts_type)
        out.keys.append(key)
        out.values.append(value)
        out.header_offsets.append(out.header_keys.rows)
    if c.pos != c.end:
        raise _corrupt("a batch has bytes past its last record", base_offset)
    return False


def _marker_type(records, base_offset: int) -> int:
    """The type of a control batch's marker (ABORT_MARKER, COMMIT_MARKER or
    another): the int16 after the version in its first record's key."""
    c = _Cursor(records, 0, len(records))
    length = c.varint(5)
    if length is None or length < 0 or length > c.end - c.pos:
        raise _corrupt("a transaction marker is malformed", base_offset)
    c.end = c.pos + length
    c.pos += 1  # attributes
    ok = c.varint(10) is not None and c.varint(5) is not None
    ok, key = c.field() if ok else (False, None)
    if not ok or key is None or len(key) < 4:
        raise _corrupt("a transaction marker is malformed", base_offset)
    return struct.unpack_from(">h", key, 2)[0]


class _AbortedTransactions:
    """Which batches of a read_committed fetch are of aborted transactions.

    ``aborted``: (producer id, first offset) pairs by first offset. Fed every
    batch with a producer id in log order (:meth:`skips`)."""

    __slots__ = ("aborted", "next", "open")

    def __init__(self, aborted: tuple) -> None:
        self.aborted = aborted
        self.next = 0  # the first pair not yet reached
        self.open: set[int] = set()  # producers whose aborted transaction is under way

    def skips(self, producer_id: int, last_offset: int, transactional: bool, abort_marker: bool) -> bool:
        aborted = self.aborted
        while self.next < len(aborted) and aborted[self.next][1] <= last_offset:
            self.open.add(aborted[self.next][0])
            self.next += 1
        if abort_marker:
            self.open.discard(producer_id)
            return False
        return transactional and producer_id in self.open


def decode_python(data, start: int, end: int, decompress_, check_crc, aborted) -> tuple:
    """The pure-Python decoder: the compiled one's arguments and result."""
    view = memoryview(data).cast("B")
    out = _Columns()
    transactions = _AbortedTransactions(aborted) if aborted is not None else None
    pos, size = 0, len(view)
    next_offset = start
    while size - pos >= LOG_OVERHEAD + 5:
        base_offset, batch_length = struct.unpack_from(">qi", view, pos)
        magic = struct.unpack_from(">b", view, pos + 16)[0]
        if magic != MAGIC:
            raise CorruptRecordsError(f"record batch at offset {base_offset} has magic {magic}; "
                                      "only magic 2 is read")
        if batch_length < HEADER_SIZE - LOG_OVERHEAD:
            raise _corrupt("its length is shorter than a batch header", base_offset)
        if size - pos < LOG_OVERHEAD + batch_length:
            break  # a partial batch at the end of a fetch: not an error
        header = parse_header_only(view[pos:pos + HEADER_SIZE])
        batch_end = pos + header.size
        if check_crc is not None:
            actual = check_crc(view[pos + CRC_START:batch_end])
            if actual != header.crc:
                raise CorruptRecordsError(f"record batch at offset {base_offset} fails its CRC "
                                          f"(stored {header.crc}, computed {actual})")
        if header.records_count < 0:
            raise _corrupt("a negative record count", base_offset)
        batch_next = header.next_offset
        if batch_next > _INT64_MAX:
            raise _corrupt("an offset or timestamp overflows", base_offset)
        attributes = header.attributes
        ts_type = LOG_APPEND_TIME if attributes & LOG_APPEND_TIME_FLAG else CREATE_TIME
        codec = attributes & COMPRESSION_MASK
        stop = False
        control = attributes & CONTROL_FLAG
        aborted_batch = False
        if transactions is not None and header.producer_id >= 0:
            abort_marker = False
            if control and header.records_count > 0:  # the cleaner leaves empty control batches: no marker
                records = view[pos + HEADER_SIZE:batch_end]
                if codec:
                    records = memoryview(decompress_(codec, records)).cast("B")
                abort_marker = _marker_type(records, base_offset) == ABORT_MARKER
            aborted_batch = transactions.skips(header.producer_id, batch_next - 1,
                                               bool(attributes & TRANSACTIONAL_FLAG), abort_marker)
        # Control batches (transaction markers) hold no application records,
        # and a batch wholly below `start` needs no decompressing.
        if not control and not aborted_batch and batch_next > start:
            records = view[pos + HEADER_SIZE:batch_end]
            if codec:
                records = memoryview(decompress_(codec, records)).cast("B")
            stop = _decode_records(out, records, header.records_count, base_offset, header.first_timestamp,
                                   header.max_timestamp, ts_type, start, end)
        pos = batch_end
        if stop or (end >= 0 and batch_next >= end):
            next_offset = end
            break
        next_offset = max(next_offset, batch_next)
    return ((len(out.offsets), out.offsets.tobytes(), out.timestamps.tobytes(), out.types.tobytes())
            + out.keys.parts() + out.values.parts() + (out.header_offsets.tobytes(),)
            + out.header_keys.parts(with_validity=False) + out.header_values.parts()
            + (next_offset, pos))


try:
    from zkcoord.fetch import _recordbatch as _compiled

    _compiled.configure(CorruptRecordsError)
except ImportError:  # not built: the pure-Python decoder does the work
    _compiled = None
