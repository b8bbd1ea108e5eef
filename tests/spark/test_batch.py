"""Batch reads (spark.read.format("zkcoord")) against a real server."""

from __future__ import annotations

import uuid

import pytest


def _topic() -> str:
    return f"b-{uuid.uuid4().hex[:8]}"


def records(partitions: int, per_partition: int) -> list[tuple[int, bytes, bytes]]:
    return [(p, f"k{p}-{i}".encode(), f"v{p}-{i}".encode())
            for p in range(partitions) for i in range(per_partition)]


def load(spark, cluster, topic, **options):
    reader = spark.read.format("zkcoord").option("zookeeper", cluster.zookeeper).option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_batch_read_returns_exactly_the_produced_records(spark, shared_cluster):
    topic = _topic()
    shared_cluster.create_topic(topic, 3)
    sent = records(3, 500)
    shared_cluster.produce(topic, sent)
    df = load(spark, shared_cluster, topic)
    rows = df.collect()
    assert len(rows) == len(sent)
    got = sorted((r.partition, bytes(r.key), bytes(r.value)) for r in rows)
    assert got == sorted(sent)
    by_partition = {}
    for r in rows:
        by_partition.setdefault(r.partition, []).append(r.offset)
    assert {p: sorted(o) for p, o in by_partition.items()} == {p: list(range(500)) for p in range(3)}
    assert {r.topic for r in rows} == {topic}
    assert {r.timestampType for r in rows} == {0}
    assert all(r.timestamp is not None for r in rows)


def test_offsets_json_pattern_and_min_partitions(spark, shared_cluster):
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    shared_cluster.create_topic(f"{prefix}-a", 2)
    shared_cluster.create_topic(f"{prefix}-b", 1)
    shared_cluster.produce(f"{prefix}-a", records(2, 100))
    shared_cluster.produce(f"{prefix}-b", records(1, 100))
    reader = (spark.read.format("zkcoord").option("zookeeper", shared_cluster.zookeeper)
              .option("subscribePattern", f"{prefix}-.*")
              .option("startingOffsets", f'{{"{prefix}-a": {{"0": 10, "1": -2}}}}')
              .option("endingOffsets", f'{{"{prefix}-a": {{"0": 60}}, "{prefix}-b": {{"0": 5}}}}')
              .option("minPartitions", "7"))
    df = reader.load()
    assert df.rdd.getNumPartitions() >= 7
    got = sorted((r.topic, r.partition, r.offset) for r in df.select("topic", "partition", "offset").collect())
    expected = ([(f"{prefix}-a", 0, o) for o in range(10, 60)] + [(f"{prefix}-a", 1, o) for o in range(100)]
                + [(f"{prefix}-b", 0, o) for o in range(5)])
    assert got == sorted(expected)


def test_committed_offsets_of_a_group(spark, shared_cluster):
    from zkcoord.zk import layout

    topic = _topic()
    shared_cluster.create_topic(topic, 2)
    shared_cluster.produce(topic, records(2, 50))
    zk = shared_cluster.zk
    zk.create(layout.offset_path("readers", topic, 0), layout.encode_offset(30), makepath=True)
    df = load(spark, shared_cluster, topic, group="readers", startingOffsets="committed")
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    # partition 1 has no committed offset: it starts at its earliest
    assert got == [(0, o) for o in range(30, 50)] + [(1, o) for o in range(50)]


def test_empty_topic_reads_nothing(spark, shared_cluster):
    topic = _topic()
    shared_cluster.create_topic(topic, 2)
    assert load(spark, shared_cluster, topic).count() == 0


@pytest.mark.parametrize("options, error", [
    ({}, "SourceOptionError"),  # neither subscribe nor pattern given below
    ({"subscribe": "x", "startingOffsets": "latest"}, "SourceOptionError"),
    ({"subscribe": "x", "startingOffsets": "{not json"}, "SourceOptionError"),
    ({"subscribe": "x", "maxOffsetsPerTrigger": "10"}, "SourceOptionError"),
    ({"subscribe": "x", "minPartitions": "0"}, "SourceOptionError"),
    ({"subscribe": "x", "kafka.bootstrap.servers": "no-port"}, "SourceOptionError"),
    # Kafka's brokers named, none answering: said before any task runs.
    ({"subscribe": "x", "kafka.bootstrap.servers": "127.0.0.1:1"}, "no Kafka broker answers Metadata"),
])
def test_bad_options_are_refused_with_a_typed_error(spark, shared_cluster, options, error):
    reader = spark.read.format("zkcoord").option("zookeeper", shared_cluster.zookeeper)
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception, match=error):
        reader.load().collect()


def test_offsets_outside_the_log_are_refused(spark, shared_cluster):
    topic = _topic()
    shared_cluster.create_topic(topic, 1)
    shared_cluster.produce(topic, records(1, 10))
    with pytest.raises(Exception, match="OffsetFormatError"):
        load(spark, shared_cluster, topic, endingOffsets=f'{{"{topic}": {{"0": 11}}}}').collect()
    with pytest.raises(Exception, match="UnknownPartitionError"):
        load(spark, shared_cluster, topic, startingOffsets=f'{{"{topic}": {{"3": 0}}}}').collect()
