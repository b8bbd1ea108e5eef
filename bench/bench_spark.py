"""Rows per second of the zkcoord Spark source, batch and streaming, in
local[2], against Spark's own Kafka source (``format("kafka")``) reading the
same records from the same broker, and against Spark's JSON file source
reading them from a file, as ratios measured in one run.

The broker is a parameter: by default the bench sets up a one-node ZooKeeper
and one ``zkcoord server`` (with its embedded broker) in a temporary
directory through zkcoord.testing; ``--bootstrap`` and ``--zookeeper`` name
an existing cluster instead (Kafka's bootstrap servers, and the ZooKeeper
where zkcoord sees its brokers and topics). It creates a topic of
``--partitions`` partitions (Kafka's CreateTopics), produces ``--records``
records of 90-byte values into it, writes the same records as JSON lines,
then times each read into Spark's ``noop`` sink, every read selecting the
same seven columns (a warm-up read of each first, then the best of
``--rounds``, each round reading every source in turn).

Ours: a batch read, a streaming query with Trigger.AvailableNow, the same
query as a member of a consumer group (the exactly-once path), and the same
batch and streaming reads through the Python data source. Spark's Kafka
source (from the install step's cache, zkcoord.testing.spark_kafka, on
``spark.jars``): a batch read from the earliest to the latest offsets and an
AvailableNow query from the earliest, each with its defaults and fetching as
ours does (:func:`kafka_fetches_like_ours`). Spark's JSON file source.

A streaming query's rate is over its micro-batches' own time (Spark's
triggerExecution), for ours and Spark's alike: the query's start and stop,
about a second in Spark itself whatever the source, are printed apart. The
last line gives our batch rate and the slower of our two streaming rates,
each as a multiple of the JSON source's and of Spark's Kafka source's in the
same mode (the faster of its two settings).

    python bench/bench_spark.py [--records 200000] [--partitions 2] [--rounds 2]
                                [--bootstrap HOST:PORT --zookeeper CONNECT] [--only READ,...]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

VALUE_BYTES = 90  # with a 7- or 8-byte key: records of about 100 bytes
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")  # every read selects these
KAFKA_LIKE_OURS = "kafka-8m"  # Spark's Kafka source, fetching as our reader does
KAFKA = ("kafka", KAFKA_LIKE_OURS)


def kafka_fetches_like_ours() -> dict[str, str]:
    """Options that make Spark's Kafka source fetch as our reader does.

    By default it fetches up to 1 MiB per partition and hands its reader 500
    records per poll, asking the broker for the partition's log start and end
    (two ListOffsets) after every poll. These: zkcoord.spark.reader.FETCH_BYTES
    a request, one poll handing over all a fetch brought (records here take
    more than 64 bytes each), the socket's buffer left to the kernel."""
    from zkcoord.spark.reader import FETCH_BYTES

    return {"kafka.max.partition.fetch.bytes": str(FETCH_BYTES), "kafka.max.poll.records": str(FETCH_BYTES // 64),
            "kafka.receive.buffer.bytes": "-1"}


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Kafka's CreateTopics, which our broker and Kafka's both serve; waits
    until every partition has a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from zkcoord.testing import wait_until

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)

    def led() -> bool:
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        return (found is not None and found.error is None and len(found.partitions) == partitions
                and all(p.leader >= 0 for p in found.partitions.values()))

    wait_until(led, 30, message=f"{topic}'s partitions to get leaders")


@contextmanager
def broker(args) -> Iterator[tuple[Path, str, str, str]]:
    """(scratch directory, bootstrap servers, ZooKeeper connect string, what
    the broker is): the cluster named by the arguments, else one of ours."""
    if args.bootstrap:
        with tempfile.TemporaryDirectory(prefix="zkcoord-bench-spark-") as base:
            yield Path(base), args.bootstrap, args.zookeeper, f"the cluster at {args.bootstrap}"
        return
    from zkcoord.testing import LocalCluster, scratch_ensemble

    with scratch_ensemble("zkcoord-bench-spark-") as (base, ensemble):
        cluster = LocalCluster(ensemble.connect_string, base / "cluster")
        try:
            cluster.start_servers(1, timeout=30)  # waits until its broker is registered too
            yield base, cluster.broker_list, ensemble.connect_string, "zkcoord's embedded broker (one zkcoord server)"
        finally:
            cluster.close()


def produce(bootstrap: str, topic: str, partitions: int, count: int, path: Path) -> None:
    """The records go to the topic and, identically, to a JSON lines file."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                         "log_level": 3})
    value = b"x" * VALUE_BYTES
    with open(path, "w") as out:
        for i in range(count):
            key = f"key-{i % 1000}".encode()
            partition = i % partitions
            while True:
                try:
                    producer.produce(topic, key=key, value=value, partition=partition)
                    break
                except BufferError:
                    producer.poll(0.05)
            out.write(json.dumps({"key": base64.b64encode(key).decode(), "value": base64.b64encode(value).decode(),
                                  "topic": topic, "partition": partition, "offset": i // partitions,
                                  "timestamp": "2026-01-01T00:00:00Z", "timestampType": 0}) + "\n")
    if producer.flush(120):
        raise SystemExit("records left unsent")


def ceiling_source(zookeeper: str, topic: str, partitions: int):
    """A data source whose tasks yield each partition's records as Arrow
    batches decoded once and kept in the Python worker: what is left is
    Spark's own cost of taking Arrow batches from a Python data source."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from zkcoord.spark.reader import SCHEMA_DDL

    class CeilingReader(DataSourceReader):
        def partitions(self):
            return [InputPartition(p) for p in range(partitions)]

        def read(self, partition):
            cache = CEILING_CACHE.get(partition.value)
            if cache is None:
                from zkcoord.spark.metadata import ClusterView
                from zkcoord.spark.offsets import OffsetRange
                from zkcoord.spark.reader import ReadTask, read_task

                view = ClusterView(zookeeper)
                try:
                    tp = (topic, partition.value)
                    low, high = view.bounds([tp])[tp]
                    task = ReadTask(OffsetRange(topic, partition.value, low, high), view.leaders([tp])[tp])
                finally:
                    view.close()
                cache = CEILING_CACHE[partition.value] = list(read_task(task))
            yield from cache

    class CeilingSource(DataSource):
        @classmethod
        def name(cls):
            return "arrow-ceiling"

        def schema(self):
            return SCHEMA_DDL

        def reader(self, schema):
            return CeilingReader()

    return CeilingSource


CEILING_CACHE: dict = {}  # in each Python worker: partition -> its record batches


def timed_read(run) -> tuple[float, float]:
    """(wall seconds, reading seconds): ``run`` returns the part of the
    wall time that was reading, or 0 when it all was."""
    began = time.perf_counter()
    reading = run()
    wall = time.perf_counter() - began
    return wall, reading or wall


RUNS = ("batch", "streaming", "group", "py-batch", "py-stream", "ceiling", "kafka-batch", "kafka-batch8m",
        "kafka-stream", "kafka-stream8m", "json")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--bootstrap", help="an existing cluster's bootstrap servers (default: start our own broker)")
    parser.add_argument("--zookeeper", help="with --bootstrap: the ZooKeeper where zkcoord sees that cluster")
    parser.add_argument("--only", help=f"a comma-separated subset of the reads ({','.join(RUNS)}), e.g. to profile "
                                       "one; the last line needs batch, streaming, group, kafka-* and json")
    args = parser.parse_args(argv)
    if not 1 <= args.records <= 5_000_000 or not 1 <= args.rounds <= 10 or not 1 <= args.partitions <= 1000:
        parser.error("--records must be 1..5000000, --rounds 1..10 and --partitions 1..1000")
    if bool(args.bootstrap) != bool(args.zookeeper):
        parser.error("--bootstrap and --zookeeper go together")
    only = RUNS if args.only is None else tuple(args.only.split(","))
    if not set(only) <= set(RUNS):
        parser.error(f"--only takes some of {', '.join(RUNS)}")

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from zkcoord.testing import spark_kafka
    from zkcoord.testing.maven import JarCacheError

    try:
        kafka_jars = spark_kafka.jars()  # before any broker starts: a missing cache is said at once
    except JarCacheError as exc:
        raise SystemExit(f"bench_spark: {exc}") from None
    with broker(args) as (base, bootstrap, zookeeper, broker_name):
        topic = f"bench-spark-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, args.partitions)
        json_path = base / "records.json"
        produce(bootstrap, topic, args.partitions, args.records, json_path)

        import pyspark
        from pyspark.sql import SparkSession

        from zkcoord.spark import PYTHON_SOURCE_NAME, jar, register
        from zkcoord.spark.reader import SCHEMA_DDL

        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").config("spark.driver.host", "127.0.0.1")
                 .config("spark.jars", ",".join([jar(), *kafka_jars])).getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark, jvm=True)

        def ours(reader, source: str):
            return (reader.format(source).option("zookeeper", zookeeper).option("subscribe", topic)
                    .option("startingOffsets", "earliest"))

        def theirs(reader, source: str):
            reader = (reader.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
                      .option("startingOffsets", "earliest"))
            return reader.options(**kafka_fetches_like_ours()) if source == KAFKA_LIKE_OURS else reader

        def batch_frame(source: str = "zkcoord"):
            reader = theirs(spark.read, source) if source in KAFKA else ours(spark.read, source)
            return reader.option("endingOffsets", "latest").load().select(*COLUMNS)

        def batch(source: str = "zkcoord") -> float:
            batch_frame(source).write.format("noop").mode("overwrite").save()
            return 0.0  # no start-up apart from the read itself

        checkpoints = iter(range(1000))

        def streaming(group: Optional[str] = None, source: str = "zkcoord") -> float:
            """Runs one AvailableNow query over every record; returns the time
            its micro-batches took (their triggerExecution)."""
            reader = theirs(spark.readStream, source) if source in KAFKA else ours(spark.readStream, source)
            if group is not None:
                reader = reader.option("group", f"{group}-{next(checkpoints)}")
            query = (reader.load().select(*COLUMNS).writeStream.format("noop")
                     .option("checkpointLocation", str(base / f"checkpoint-{next(checkpoints)}"))
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            progress = [p for p in query.recentProgress if p["numInputRows"]]
            rows = sum(p["numInputRows"] for p in progress)
            if rows != args.records:
                raise SystemExit(f"the {source} streaming query read {rows} rows, not {args.records}")
            return sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000.0

        def ceiling() -> float:
            """The most any Python data source can give here: the same rows,
            already in memory as Arrow batches, handed to Spark."""
            spark.read.format("arrow-ceiling").load().select(*COLUMNS).write.format("noop").mode("overwrite").save()
            return 0.0

        def json_source() -> float:
            (spark.read.schema(SCHEMA_DDL.replace("BINARY", "STRING")).json(str(json_path)).select(*COLUMNS)
             .write.format("noop").mode("overwrite").save())
            return 0.0

        for source in ("zkcoord", "kafka"):
            count = batch_frame(source).count()
            if count != args.records:
                raise SystemExit(f"the {source} batch source sees {count} rows, not {args.records}")
        spark.dataSource.register(ceiling_source(zookeeper, topic, args.partitions))
        runs = {"batch": batch, "streaming": streaming, "group": lambda: streaming("bench-group"),
                "py-batch": lambda: batch(PYTHON_SOURCE_NAME),
                "py-stream": lambda: streaming(source=PYTHON_SOURCE_NAME),
                "ceiling": ceiling, "kafka-batch": lambda: batch("kafka"),
                "kafka-batch8m": lambda: batch(KAFKA_LIKE_OURS), "kafka-stream": lambda: streaming(source="kafka"),
                "kafka-stream8m": lambda: streaming(source=KAFKA_LIKE_OURS), "json": json_source}
        wall, read = {}, {}
        for name in only:
            runs[name]()  # warm-up: Python workers, JIT, file cache
        # Round after round of every read, not each read's rounds in a row: on
        # a machine whose load drifts, every read sees the same stretches of it.
        timings: dict[str, list[tuple[float, float]]] = {name: [] for name in only}
        for _ in range(args.rounds):
            for name in only:
                timings[name].append(timed_read(runs[name]))
        for name in only:
            wall[name], read[name] = min(timings[name], key=lambda t: t[1])
        rate = {name: args.records / seconds for name, seconds in read.items()}
        print(f"records: {args.records:,} ({VALUE_BYTES}-byte values) in {args.partitions} partitions; broker: "
              f"{broker_name}; Spark {pyspark.__version__} local[2]; each read: {len(COLUMNS)} columns into the "
              f"noop sink, a warm-up then best of {args.rounds} rounds of every read in turn")
        print(f"Spark's Kafka source {spark_kafka.source_version()} ({', '.join(Path(j).name for j in kafka_jars)}): "
              f"kafka-batch and kafka-stream with its defaults, kafka-*8m with "
              f"{', '.join(f'{k}={v}' for k, v in kafka_fetches_like_ours().items())}")
        print(f"{'read':>14} {'wall s':>8} {'reading s':>10} {'rows/s':>12} {'vs json':>8}")
        for name in only:
            versus = f"{rate[name] / rate['json']:8.2f}" if "json" in rate else f"{'-':>8}"
            print(f"{name:>14} {wall[name]:8.2f} {read[name]:10.2f} {rate[name]:12,.0f} {versus}")
        print("(batch, streaming, group: the JVM reader; py-: the Python data source; streaming, group and "
              "kafka-stream: 'reading' is the micro-batches' own time, without the query's start and stop; group is "
              "a member of a consumer group, exactly once; ceiling: a Python data source handing Spark the same rows "
              "from memory; kafka-: Spark's own Kafka source, 8m: fetching as ours does)")
        if set(RUNS) - {"py-batch", "py-stream", "ceiling"} <= set(rate):
            slower = min(rate["streaming"], rate["group"])
            kafka_batch = max(rate["kafka-batch"], rate["kafka-batch8m"])
            kafka_stream = max(rate["kafka-stream"], rate["kafka-stream8m"])
            print(f"batch {rate['batch']:,.0f} rows/s ({rate['batch'] / rate['json']:.2f}× json, "
                  f"{rate['batch'] / kafka_batch:.2f}× kafka source); "
                  f"streaming {slower:,.0f} rows/s ({slower / rate['json']:.2f}× json, "
                  f"{slower / kafka_stream:.2f}× kafka source)")
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
