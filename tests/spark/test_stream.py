"""Streaming reads without a group: offsets in the checkpoint, admission
control, Trigger.AvailableNow, restart exactly once, new partitions."""

from __future__ import annotations

import threading
import uuid

from tests.spark.sinks import read_sink, stream_to_parquet
from tests.spark.test_batch import records
from zkcoord.testing import wait_until


def _topic() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


def test_available_now_with_admission_control(spark, shared_cluster, tmp_path):
    topic = _topic()
    shared_cluster.create_topic(topic, 2)
    sent = records(2, 300)
    shared_cluster.produce(topic, sent)
    query = stream_to_parquet(spark, shared_cluster, topic, tmp_path, trigger={"availableNow": True},
                              startingOffsets="earliest", maxOffsetsPerTrigger="250")
    assert query.awaitTermination(120)
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert [p["numInputRows"] for p in batches] == [250, 250, 100]
    rows = read_sink(spark, tmp_path)
    assert sorted((p, k, v) for _, p, _, k, v in rows) == sorted(sent)


def test_restart_from_checkpoint_while_production_continues(spark, shared_cluster, tmp_path):
    topic = _topic()
    shared_cluster.create_topic(topic, 3)
    total = 3 * 600
    produced = threading.Event()

    def produce():
        for i in range(0, 600, 50):
            shared_cluster.produce(topic, [(p, f"k{p}-{j}".encode(), f"v{p}-{j}".encode())
                                           for p in range(3) for j in range(i, i + 50)])
        produced.set()

    producer = threading.Thread(target=produce, daemon=True)
    first = stream_to_parquet(spark, shared_cluster, topic, tmp_path, startingOffsets="earliest",
                              maxOffsetsPerTrigger="200")
    producer.start()
    try:
        wait_until(lambda: first.lastProgress and first.lastProgress["batchId"] >= 2, timeout=60,
                   message="the first query to commit a few batches")
    finally:
        first.stop()
    part = len(read_sink(spark, tmp_path))
    second = stream_to_parquet(spark, shared_cluster, topic, tmp_path, startingOffsets="earliest",
                               maxOffsetsPerTrigger="200")
    try:
        wait_until(produced.is_set, timeout=60, message="production to finish")
        wait_until(lambda: len(read_sink(spark, tmp_path)) >= total, timeout=90, interval=0.5,
                   message="every record in the sink")
    finally:
        second.stop()
    producer.join(5)
    rows = read_sink(spark, tmp_path)
    assert 0 < part < total
    keys = [(p, o) for _, p, o, _, _ in rows]
    assert len(keys) == len(set(keys)) == total  # exactly once
    assert sorted(keys) == sorted((p, o) for p in range(3) for o in range(600))
    assert all(v == f"v{p}-{o}".encode() for _, p, o, _, v in rows)


def test_partitions_added_to_a_topic_are_picked_up(spark, shared_cluster, tmp_path):
    topic = _topic()
    shared_cluster.create_topic(topic, 1)
    shared_cluster.produce(topic, records(1, 20))
    query = stream_to_parquet(spark, shared_cluster, topic, tmp_path, startingOffsets="earliest")
    try:
        wait_until(lambda: len(read_sink(spark, tmp_path)) >= 20, timeout=60, interval=0.5,
                   message="the first partition's records")
        shared_cluster.add_partitions(topic, 3)
        shared_cluster.produce(topic, records(3, 20)[20:])
        wait_until(lambda: len(read_sink(spark, tmp_path)) >= 60, timeout=60, interval=0.5,
                   message="the new partitions' records")
    finally:
        query.stop()
    rows = read_sink(spark, tmp_path)
    assert sorted((p, o) for _, p, o, _, _ in rows) == [(p, o) for p in range(3) for o in range(20)]


def test_a_failing_task_is_replayed_exactly(spark, shared_cluster, tmp_path):
    """A task that fails once mid-batch is retried by Spark; the retry reads
    the very same range again, so the sink holds every record exactly once."""
    from pyspark.sql import functions as F

    topic = _topic()
    shared_cluster.create_topic(topic, 2)
    sent = records(2, 200)
    shared_cluster.produce(topic, sent)
    marker = str(tmp_path / "failed-once")

    def fail_once(offset):
        import os

        if offset == 150:
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return offset
            raise RuntimeError("injected task failure")
        return offset

    df = (spark.readStream.format("zkcoord").option("zookeeper", shared_cluster.zookeeper)
          .option("subscribe", topic).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "300").load()
          .withColumn("offset", F.udf(fail_once, "bigint", useArrow=False)("offset")))
    query = (df.writeStream.format("parquet").option("path", str(tmp_path / "q-out"))
             .option("checkpointLocation", str(tmp_path / "q-checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert query.exception() is None
    import os

    assert os.path.exists(marker), "the injected failure did not happen"
    rows = read_sink(spark, tmp_path)
    keys = sorted((p, o) for _, p, o, _, _ in rows)
    assert keys == [(p, o) for p in range(2) for o in range(200)]
    assert sorted((p, k, v) for _, p, _, k, v in rows) == sorted(sent)
