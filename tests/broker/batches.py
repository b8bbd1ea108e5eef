"""Record batches for broker tests, built with kafka-python's batch builder."""

from __future__ import annotations

import time

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder


def make_batch(values, timestamp=None, key=None, producer_id=-1, producer_epoch=-1,
               base_sequence=-1, compression=0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=False,
        producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=base_sequence, batch_size=1 << 30)
    if timestamp is None:
        # now: a broker's time-based retention would delete anything ancient
        timestamp = int(time.time() * 1000)
    for i, value in enumerate(values):
        builder.append(i, timestamp=timestamp + i, key=key, value=value, headers=[])
    return bytes(builder.build())


def read_values(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, value) of every record in a run of batches."""
    out = []
    pos = 0
    while pos < len(data):
        batch = DefaultRecordBatch(data[pos:])
        size = batch.size_in_bytes
        batch = DefaultRecordBatch(data[pos:pos + size])
        assert batch.validate_crc()
        out.extend((record.offset, record.value) for record in batch)
        pos += size
    return out
