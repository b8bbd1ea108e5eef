"""Standard Kafka clients against a real broker process: kcat,
confluent-kafka and kafka-python each produce (plain, compressed,
idempotent) and read back by partition and offset, byte for byte."""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka.structs import TopicPartition as KpTopicPartition

from zkcoord.testing import wait_until
from zkcoord import batch_format

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def stored_codecs(cluster, topic: str, partition: int) -> set[int]:
    """Compression codecs of the batches as stored in the broker's segment files."""
    directory = cluster.brokers[0].data_dir / f"{topic}-{partition}"
    codecs = set()
    for segment in sorted(directory.glob("*.log")):
        data = segment.read_bytes()
        pos = 0
        while pos < len(data):
            header = batch_format.parse_header(data, pos)
            codecs.add(header.attributes & batch_format.COMPRESSION_MASK)
            pos += header.size
    return codecs


def assert_compressed(codecs: set[int], name: str) -> None:
    """The producer compressed with ``name`` (it may leave a batch that would
    not shrink, such as a lone small message, uncompressed)."""
    assert CODECS[name] in codecs and codecs <= {0, CODECS[name]}, (name, codecs)


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def payloads(n: int, seed: int) -> list[bytes]:
    rnd = [os.urandom(40) for _ in range(7)]
    # binary values, an empty value, varied sizes
    # (compressible enough that every codec actually compresses)
    return [b"" if i == 3 else (b"%d-%d:" % (seed, i)) + rnd[i % 7] * (1 + i % 5) + b"." * 64
            for i in range(n)]


def confluent_read(bootstrap: str, topic: str, partition: int, offset: int, count: int,
                   timeout: float = 20.0) -> list[tuple[int, bytes, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.queue.backoff.ms": 10})
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        out = []

        def more():
            for msg in consumer.consume(num_messages=1000, timeout=0.2):
                assert msg.error() is None, msg.error()
                out.append((msg.offset(), msg.key(), msg.value()))
            return len(out) >= count
        wait_until(more, timeout=timeout, interval=0, message=f"{count} messages from {topic}")
        return out[:count] if len(out) >= count else out
    finally:
        consumer.close()


def confluent_produce(bootstrap: str, topic: str, partition: int, values, **conf) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    errors = []
    for i, value in enumerate(values):
        producer.produce(topic, value=value, key=b"k%d" % i, partition=partition,
                         on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(20) == 0
    assert errors == []


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_round_trip(shared_cluster, compression):
    topic = unique_topic("cf")
    shared_cluster.create_topic(topic, 3)
    bootstrap = shared_cluster.brokers[0].bootstrap
    values = payloads(500, 1)
    confluent_produce(bootstrap, topic, 2, values, **{"compression.type": compression})
    got = confluent_read(bootstrap, topic, 2, 0, len(values))
    assert [o for o, _, _ in got] == list(range(len(values)))
    assert [v if v is not None else b"" for _, _, v in got] == values
    assert [k for _, k, _ in got] == [b"k%d" % i for i in range(len(values))]
    assert_compressed(stored_codecs(shared_cluster, topic, 2), compression)
    # a read from the middle by explicit offset
    tail = confluent_read(bootstrap, topic, 2, 123, len(values) - 123)
    assert [v or b"" for _, _, v in tail] == values[123:]


def test_confluent_idempotent_producer(shared_cluster):
    topic = unique_topic("idem")
    shared_cluster.create_topic(topic, 2)
    bootstrap = shared_cluster.brokers[0].bootstrap
    values = payloads(2000, 2)
    confluent_produce(bootstrap, topic, 1, values, **{"enable.idempotence": True, "acks": "all",
                                                      "batch.num.messages": 100})
    got = confluent_read(bootstrap, topic, 1, 0, len(values))
    assert [v or b"" for _, _, v in got] == values


def test_kafka_python_round_trip(shared_cluster):
    topic = unique_topic("kp")
    shared_cluster.create_topic(topic, 2)
    bootstrap = shared_cluster.brokers[0].bootstrap
    values = payloads(300, 3)
    for compression in (None, "gzip"):
        producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=compression,
                                 enable_idempotence=True, acks="all")
        futures = [producer.send(topic, value=v, key=b"k", partition=0) for v in values]
        producer.flush(20)
        offsets = [f.get(timeout=10).offset for f in futures]
        producer.close()
        assert offsets == sorted(offsets) and len(set(offsets)) == len(values)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=10_000)
    tp = KpTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got = []
    for msg in consumer:
        got.append((msg.offset, msg.value))
        if len(got) == 2 * len(values):
            break
    consumer.close()
    assert [o for o, _ in got] == list(range(2 * len(values)))
    assert [v for _, v in got] == values + values
    # and the confluent client reads the same bytes
    assert [v or b"" for _, _, v in confluent_read(bootstrap, topic, 0, 0, 600)] == values + values


def test_kafka_python_offsets_lookup(shared_cluster):
    topic = unique_topic("lo")
    shared_cluster.create_topic(topic, 1)
    bootstrap = shared_cluster.brokers[0].bootstrap
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(10):
        producer.send(topic, value=b"%d" % i, partition=0, timestamp_ms=1_000_000 + 1000 * i)
    producer.flush(10)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = KpTopicPartition(topic, 0)
    assert consumer.beginning_offsets([tp]) == {tp: 0}
    assert consumer.end_offsets([tp]) == {tp: 10}
    found = consumer.offsets_for_times({tp: 1_004_500})[tp]
    assert (found.offset, found.timestamp) == (5, 1_005_000)
    assert consumer.offsets_for_times({tp: 9_999_999})[tp] is None
    consumer.close()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_round_trip(shared_cluster, tmp_path, codec):
    topic = unique_topic("kcat")
    shared_cluster.create_topic(topic, 2)
    bootstrap = shared_cluster.brokers[0].bootstrap
    lines = [b"line-%d-%s" % (i, os.urandom(8).hex().encode()) for i in range(400)]
    source = tmp_path / "in.txt"
    source.write_bytes(b"\n".join(lines) + b"\n")
    subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", topic, "-p", "1", "-z", codec,
                    "-l", str(source)], check=True, timeout=30)
    out = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", "1", "-o", "0",
                          "-c", str(len(lines)), "-e", "-f", "%o %s\n"],
                         check=True, timeout=30, capture_output=True).stdout
    rows = [line.split(b" ", 1) for line in out.splitlines()]
    assert [int(o) for o, _ in rows] == list(range(len(lines)))
    assert [v for _, v in rows] == lines
    # from an explicit offset
    out = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", "1", "-o", "350",
                          "-e", "-f", "%s\n"], check=True, timeout=30, capture_output=True).stdout
    assert out.splitlines() == lines[350:]
    assert_compressed(stored_codecs(shared_cluster, topic, 1), codec)


def test_kcat_reads_what_confluent_wrote(shared_cluster):
    topic = unique_topic("mix")
    shared_cluster.create_topic(topic, 1)
    bootstrap = shared_cluster.brokers[0].bootstrap
    values = [b"v%04d" % i for i in range(100)]
    confluent_produce(bootstrap, topic, 0, values, **{"compression.type": "lz4"})
    out = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "0",
                          "-e", "-f", "%s\n"], check=True, timeout=30, capture_output=True).stdout
    assert out.splitlines() == values
    metadata = subprocess.run(["kcat", "-b", bootstrap, "-L", "-t", topic, "-J"], check=True,
                              timeout=30, capture_output=True).stdout
    assert b'"partition":0' in metadata.replace(b" ", b"") and topic.encode() in metadata
