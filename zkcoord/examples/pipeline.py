"""An example pipeline on Spark: a stream from a zkcoord topic, an aggregation
per micro-batch (records, bytes and offset span per key), written exactly
once to parquet, with progress printed after every batch.

Exactly once: each micro-batch's result is written to its own directory
``batch=<id>`` with overwrite, so a batch Spark replays after a failure
replaces its own earlier output instead of adding to it; the source replays
exactly the same records (the offsets of each batch are in the checkpoint).

    python -m zkcoord.examples.pipeline --zookeeper 127.0.0.1:2181 --topic events --out /tmp/events-agg \\
        [--group pipeline] [--available-now] [--produce 10000]

With ``--group`` the query is a member of that consumer group: run it twice
and the two queries share the topic's partitions. The ``--zk-*`` options
(docs/ZOOKEEPER.md, "Securing ZooKeeper") reach a secured ZooKeeper; they are
passed on as the source's ``zookeeper.*`` options. Beside a Kafka cluster in
KRaft mode (nothing of Kafka's in ZooKeeper), ``--kafka-bootstrap`` names its
brokers: the demo records are produced there and the source reads them there.

The session runs on ``SPARK_MASTER`` if set (``spark://host:7077``), else on
the master given to spark-submit, else ``local[2]``; it reads on the source's
JVM path when its jar is built (``python -m zkcoord.spark.jvm``). On a
cluster (docs/SPARK.md, "On a Spark cluster", says more)::

    spark-submit --master spark://master:7077 --jars "$(python -m zkcoord.spark.jvm)" \\
        zkcoord/examples/pipeline.py --zookeeper zk1:2181 --topic events \\
        --out hdfs:///pipelines/events-agg --group pipeline

The executors need nothing but the jar, which Spark ships them; the driver's
machine needs zkcoord installed. ``--out`` (and the checkpoint in it) must be
storage the driver and every executor see.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Optional

from zkcoord import settings
from zkcoord.errors import ConfigError
from zkcoord.zk.security import ZkSecurity


def build_spark(app: str = "zkcoord-pipeline"):
    """The session: on ``SPARK_MASTER`` if set, else on the master spark-submit
    was given, else ``local[2]``. A local session keeps to 127.0.0.1 and runs
    its Python workers with this interpreter; on a cluster the driver's
    address and the workers' interpreter are the deployment's to set (its
    Spark configuration, ``PYSPARK_PYTHON``): the driver must be reachable
    from the workers, and the interpreter must exist there."""
    from pyspark.sql import SparkSession

    from zkcoord.spark import register
    from zkcoord.spark.jvm import built_jar

    master = os.environ.get("SPARK_MASTER")
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:  # not started by spark-submit
        master = "local[2]"
    builder = (SparkSession.builder.appName(app)
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2"))
    if master is not None:
        builder = builder.master(master)
    if built_jar() is not None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        # The JVM reader (spark-submit is given it with --jars).
        builder = builder.config("spark.jars", str(built_jar()))
    if master is not None and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = builder.config("spark.driver.host", "127.0.0.1")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def produce(zookeeper: str, topic: str, count: int, security=None, kafka_bootstrap: Optional[str] = None) -> None:
    """Demo records: keys user-0 .. user-9, one per message, spread over the
    partitions; to the brokers registered in ZooKeeper, or to ``kafka_bootstrap``'s."""
    from confluent_kafka import Producer

    from zkcoord.spark.metadata import ClusterView

    bootstrap = kafka_bootstrap
    if bootstrap is None:
        view = ClusterView(zookeeper, security=security)
        try:
            bootstrap = ",".join(sorted(view.brokers().values()))
        finally:
            view.close()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3, "acks": "all"})
    for i in range(count):
        while True:
            try:
                producer.produce(topic, key=f"user-{i % 10}".encode(), value=f"event {i}".encode())
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)


def aggregate(batch_df, batch_id: int, out: str) -> None:
    from pyspark.sql import functions as F

    result = (batch_df.groupBy(F.col("key").cast("string").alias("key"))
              .agg(F.count("*").alias("records"), F.sum(F.length("value")).alias("bytes"),
                   F.min("offset").alias("first_offset"), F.max("offset").alias("last_offset")))
    result.write.mode("overwrite").parquet(os.path.join(out, f"batch={batch_id}"))


def start(spark, args, security):
    from zkcoord.spark.options import zookeeper_options

    reader = (spark.readStream.format("zkcoord").option("zookeeper", args.zookeeper)
              .option("subscribe", args.topic).option("startingOffsets", "earliest"))
    for key, value in zookeeper_options(security).items():
        reader = reader.option(key, value)
    if args.group:
        reader = reader.option("group", args.group)
    if args.kafka_bootstrap:
        reader = reader.option("kafka.bootstrap.servers", args.kafka_bootstrap)
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    writer = (reader.load().writeStream
              .foreachBatch(lambda df, batch_id: aggregate(df, batch_id, args.out))
              .option("checkpointLocation", args.checkpoint or os.path.join(args.out, "_checkpoint")))
    writer = writer.trigger(availableNow=True) if args.available_now else writer.trigger(processingTime="1 second")
    return writer.start()


def print_progress(query, seen: set) -> None:
    for progress in query.recentProgress:
        if progress["batchId"] in seen:
            continue
        seen.add(progress["batchId"])
        rate = progress.get("processedRowsPerSecond") or 0.0
        print(f"batch {progress['batchId']}: {progress['numInputRows']} records, {rate:.0f} records/s",
              flush=True)


def totals(spark, out: str) -> dict[str, int]:
    from pyspark.sql import functions as F

    df = spark.read.parquet(out)
    return {r.key: r.records for r in df.groupBy("key").agg(F.sum("records").alias("records")).collect()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zookeeper", required=True)
    settings.add_options(parser, ZkSecurity)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True, help="parquet output directory")
    parser.add_argument("--checkpoint", help="default: <out>/_checkpoint")
    parser.add_argument("--group", help="join this consumer group")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=5000)
    parser.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    parser.add_argument("--produce", type=int, default=0, help="first produce this many demo records")
    parser.add_argument("--kafka-bootstrap", metavar="HOST:PORT,...",
                        help="the brokers of a Kafka cluster in KRaft mode, which keeps nothing in ZooKeeper")
    parser.add_argument("--timeout", type=float, default=0, help="stop after this many seconds (0: run on)")
    args = parser.parse_args(argv)
    try:
        security = settings.from_args(ZkSecurity, args)
    except ConfigError as exc:
        parser.error(str(exc))
    if args.produce:
        produce(args.zookeeper, args.topic, args.produce, security, args.kafka_bootstrap)
    spark = build_spark()
    context = spark.sparkContext
    print(f"application {context.applicationId} on {context.master}", flush=True)
    query = start(spark, args, security)
    seen: set = set()
    began = time.monotonic()
    try:
        while query.isActive:
            query.awaitTermination(1)
            print_progress(query, seen)
            if args.timeout and time.monotonic() - began > args.timeout:
                break
    except KeyboardInterrupt:
        pass
    finally:
        query.stop()
    print_progress(query, seen)
    if query.exception() is not None:
        print(f"query failed: {query.exception()}", file=sys.stderr)
        return 1
    for key, count in sorted(totals(spark, args.out).items()):
        print(f"{key}: {count} records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
