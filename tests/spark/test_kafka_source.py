"""Spark's own Kafka source (``format("kafka")``, fetched by the install
step) and ours read the same rows from the same topic, batch and streaming:
what bench/bench_spark.py compares is like with like."""

from __future__ import annotations

import uuid

from zkcoord.testing import spark_kafka

COLUMNS = ("topic", "partition", "offset", "key", "value", "timestamp", "timestampType")


def _rows(frame) -> list[tuple]:
    """The rows, by topic, partition and offset (unique, so absent keys are never compared)."""
    return sorted((r.topic, r.partition, r.offset, None if r.key is None else bytes(r.key), bytes(r.value),
                   r.timestamp, r.timestampType) for r in frame.select(*COLUMNS).collect())


def _streamed(spark, reader, base, name: str) -> list[tuple]:
    """Every row of an AvailableNow query over ``reader``, through a memory sink."""
    query = (reader.option("startingOffsets", "earliest").load().writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(base / name)).trigger(availableNow=True).start())
    query.awaitTermination(60)
    assert not query.isActive, f"{name} did not end"
    return _rows(spark.table(name))


def test_spark_kafka_source_reads_the_rows_ours_reads(spark, shared_cluster, tmp_path):
    assert spark_kafka.jars(), "no jars"  # JarCacheError, saying how to fetch them, when the cache is missing
    topic = f"vs-{uuid.uuid4().hex[:8]}"
    shared_cluster.create_topic(topic, 3)
    # Keys absent and present, values empty, binary and long; in two sends, so over several record batches.
    sent = [(i % 3, None if i % 7 == 0 else f"k{i}".encode(), bytes([i % 256]) * (i % 5) + b"\xff\x00" * (i % 2))
            for i in range(150)]
    shared_cluster.produce(topic, sent[:70])
    shared_cluster.produce(topic, sent[70:])

    ours = spark.read.format("zkcoord").option("zookeeper", shared_cluster.zookeeper).option("subscribe", topic)
    theirs = (spark.read.format("kafka").option("kafka.bootstrap.servers", shared_cluster.broker_list)
              .option("subscribe", topic).option("startingOffsets", "earliest").option("endingOffsets", "latest"))
    read = _rows(ours.load())
    assert len(read) == len(sent)
    assert sorted(((p, k, v) for _t, p, _o, k, v, _ts, _tt in read), key=repr) == sorted(sent, key=repr)
    assert _rows(theirs.load()) == read

    ours_stream = (spark.readStream.format("zkcoord").option("zookeeper", shared_cluster.zookeeper)
                   .option("subscribe", topic))
    theirs_stream = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", shared_cluster.broker_list)
                     .option("subscribe", topic))
    assert _streamed(spark, ours_stream, tmp_path, "ours_stream") == read
    assert _streamed(spark, theirs_stream, tmp_path, "theirs_stream") == read
