"""The executor's side: read one offset range straight from its partition's
broker over the Kafka protocol, as Arrow record batches in the columns of
Spark's Kafka source.

Each call opens its own Kafka client in assign mode and closes it when the
range is done: nothing is shared between tasks, nothing is pickled.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator

from zkcoord.spark.errors import DataLossError, ReadTimeoutError
from zkcoord.spark.offsets import OffsetRange

SCHEMA_DDL = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
              "timestamp TIMESTAMP, timestampType INT")
ROWS_PER_BATCH = 8192
CONSUME_CHUNK = 1000

# confluent-kafka's timestamp type -> Kafka's TimestampType id, which is what
# Spark's Kafka source shows (-1 none, 0 CreateTime, 1 LogAppendTime).
_TIMESTAMP_TYPES = {0: -1, 1: 0, 2: 1}


@dataclass(frozen=True)
class ReadTask:
    """A planned range and where to read it; plain values only."""

    range: OffsetRange
    broker: str
    poll_timeout_ms: int = 120_000
    fail_on_data_loss: bool = True


def arrow_schema():
    import pyarrow as pa

    return pa.schema([
        ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
        ("partition", pa.int32()), ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
    ])


def read_task(task: ReadTask) -> Iterator:
    """Record batches holding exactly the offsets ``[start, end)`` that exist
    (transaction markers and compacted-away offsets leave gaps)."""
    import pyarrow as pa
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    r = task.range
    if r.start >= r.end:
        return
    schema = arrow_schema()
    consumer = Consumer({
        "bootstrap.servers": task.broker, "group.id": "zkcoord-spark-reader",
        "enable.auto.commit": False, "enable.partition.eof": True,
        "auto.offset.reset": "error", "log_level": 3, "fetch.wait.max.ms": 20,
        "max.partition.fetch.bytes": 8 * 1024 * 1024,
    })
    columns = _empty_columns()
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
        position = r.start
        deadline = time.monotonic() + task.poll_timeout_ms / 1000.0
        while position < r.end:
            # Never ask for more than the range holds: consume() waits for
            # the whole count until its timeout.
            messages = consumer.consume(min(CONSUME_CHUNK, r.end - position), timeout=0.5)
            progressed = False
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    if error.code() == KafkaError._AUTO_OFFSET_RESET:
                        position = _on_data_loss(consumer, task, position)
                        progressed = True
                        break
                    if not error.retriable():
                        raise ReadTimeoutError(f"{r.topic}-{r.partition}: {error.str()}")
                    continue
                offset = message.offset()
                if offset >= r.end:
                    position = r.end
                    break
                if offset < position:
                    continue
                kind, ts = message.timestamp()
                columns[0].append(message.key())
                columns[1].append(message.value())
                columns[4].append(offset)
                columns[5].append(ts * 1000 if kind else None)
                columns[6].append(_TIMESTAMP_TYPES.get(kind, -1))
                position = offset + 1
                progressed = True
                if len(columns[0]) >= ROWS_PER_BATCH:
                    yield _batch(pa, schema, columns, r)
                    columns = _empty_columns()
            if position < r.end and not progressed:
                # Only gaps left (markers, compaction): the fetch position tells.
                fetched = consumer.position([TopicPartition(r.topic, r.partition)])[0].offset
                if fetched >= r.end:
                    break
            if progressed:
                deadline = time.monotonic() + task.poll_timeout_ms / 1000.0
            elif time.monotonic() > deadline:
                raise ReadTimeoutError(
                    f"{r.topic}-{r.partition}: no record at offset {position} from {task.broker} "
                    f"within {task.poll_timeout_ms} ms (range {r.start}..{r.end})")
        if columns[0]:
            yield _batch(pa, schema, columns, r)
    finally:
        consumer.close()


def _on_data_loss(consumer, task: ReadTask, position: int) -> int:
    from confluent_kafka import TopicPartition

    r = task.range
    low, _ = consumer.get_watermark_offsets(TopicPartition(r.topic, r.partition), timeout=10, cached=False)
    if task.fail_on_data_loss or low <= position:
        raise DataLossError(
            f"{r.topic}-{r.partition}: offset {position} is gone (the log starts at {low}); "
            "set failOnDataLoss=false to skip lost records")
    consumer.assign([TopicPartition(r.topic, r.partition, low)])
    return low


def _empty_columns() -> list[list]:
    return [[], [], None, None, [], [], []]


def _batch(pa, schema, columns, r: OffsetRange):
    n = len(columns[0])
    arrays = [
        pa.array(columns[0], pa.binary()), pa.array(columns[1], pa.binary()),
        pa.array([r.topic] * n, pa.string()), pa.array([r.partition] * n, pa.int32()),
        pa.array(columns[4], pa.int64()), pa.array(columns[5], pa.timestamp("us", tz="UTC")),
        pa.array(columns[6], pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
