"""Rows per second of the zkcoord Spark source, batch and streaming, in
local[2], against Spark's own JSON file source reading the same records, as
ratios measured in one run.

Sets up a one-node ZooKeeper and one ``zkcoord server`` (with its broker) in
a temporary directory through zkcoord.testing, produces ``--records``
records into a topic of ``--partitions`` partitions, writes the same records
as JSON lines, then times each read into Spark's ``noop`` sink (a warm-up
read first, then the best of ``--rounds``): a batch read, a streaming query
with Trigger.AvailableNow, the same query as a member of a consumer group
(the exactly-once path), and Spark's JSON file source. A streaming query's
rate is over its micro-batches' own time (Spark's triggerExecution): the
query's start and stop, about a second in Spark itself whatever the source,
are printed apart. The last line gives the batch rate and the slower of the
two streaming rates, each as a multiple of the JSON source's.

    python bench/bench_spark.py [--records 200000] [--partitions 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from pathlib import Path
from typing import Optional


def produce(bootstrap: str, topic: str, partitions: int, count: int, path: Path) -> None:
    """The records go to the topic and, identically, to a JSON lines file."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                         "log_level": 3})
    value = b"x" * 90
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if not 1 <= args.records <= 5_000_000 or not 1 <= args.rounds <= 10:
        parser.error("--records must be 1..5000000 and --rounds 1..10")

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from zkcoord.testing import LocalCluster, scratch_ensemble

    with scratch_ensemble("zkcoord-bench-spark-") as (base, ensemble):
        cluster = LocalCluster(ensemble.connect_string, base / "cluster")
        try:
            cluster.start_servers(1, timeout=30)  # waits until its broker is registered too
            topic = "bench"
            cluster.create_topic(topic, args.partitions)
            json_path = base / "records.json"
            produce(cluster.broker_list, topic, args.partitions, args.records, json_path)

            from pyspark.sql import SparkSession

            from zkcoord.spark import PYTHON_SOURCE_NAME, jar, register
            from zkcoord.spark.reader import SCHEMA_DDL

            spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                     .config("spark.ui.showConsoleProgress", "false").config("spark.driver.host", "127.0.0.1")
                     .config("spark.jars", jar()).getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            register(spark, jvm=True)

            def batch(source: str = "zkcoord") -> float:
                (spark.read.format(source).option("zookeeper", ensemble.connect_string)
                 .option("subscribe", topic).load().write.format("noop").mode("overwrite").save())
                return 0.0  # no start-up apart from the read itself

            checkpoints = iter(range(1000))

            def streaming(group: Optional[str] = None, source: str = "zkcoord") -> float:
                """Runs one AvailableNow query over every record; returns the time
                its micro-batches took (their triggerExecution)."""
                reader = (spark.readStream.format(source).option("zookeeper", ensemble.connect_string)
                          .option("subscribe", topic).option("startingOffsets", "earliest"))
                if group is not None:
                    reader = reader.option("group", f"{group}-{next(checkpoints)}")
                query = (reader.load().writeStream.format("noop")
                         .option("checkpointLocation", str(base / f"checkpoint-{next(checkpoints)}"))
                         .trigger(availableNow=True).start())
                query.awaitTermination()
                progress = [p for p in query.recentProgress if p["numInputRows"]]
                rows = sum(p["numInputRows"] for p in progress)
                if rows != args.records:
                    raise SystemExit(f"the streaming query read {rows} rows, not {args.records}")
                return sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000.0

            def ceiling() -> float:
                """The most any Python data source can give here: the same rows,
                already in memory as Arrow batches, handed to Spark."""
                spark.read.format("arrow-ceiling").load().write.format("noop").mode("overwrite").save()
                return 0.0

            def json_source() -> float:
                (spark.read.schema(SCHEMA_DDL.replace("BINARY", "STRING")).json(str(json_path))
                 .write.format("noop").mode("overwrite").save())
                return 0.0

            count = (spark.read.format("zkcoord").option("zookeeper", ensemble.connect_string)
                     .option("subscribe", topic).load().count())
            if count != args.records:
                raise SystemExit(f"the batch source sees {count} rows, not {args.records}")
            spark.dataSource.register(ceiling_source(ensemble.connect_string, topic, args.partitions))
            runs = {"batch": batch, "streaming": streaming, "group": lambda: streaming("bench-group"),
                    "py-batch": lambda: batch(PYTHON_SOURCE_NAME),
                    "py-stream": lambda: streaming(source=PYTHON_SOURCE_NAME),
                    "ceiling": ceiling, "json": json_source}
            wall, read = {}, {}
            for name, run in runs.items():
                run()  # warm-up: Python workers, JIT, file cache
                best = min((timed_read(run) for _ in range(args.rounds)), key=lambda t: t[1])
                wall[name], read[name] = best
            rate = {name: args.records / seconds for name, seconds in read.items()}
            print(f"records: {args.records:,} in {args.partitions} partitions, local[2], best of {args.rounds}")
            print(f"{'read':>10} {'wall s':>8} {'reading s':>10} {'rows/s':>12} {'vs json':>8}")
            for name in runs:
                print(f"{name:>10} {wall[name]:8.2f} {read[name]:10.2f} {rate[name]:12,.0f} "
                      f"{rate[name] / rate['json']:8.2f}")
            print("(batch, streaming, group: the JVM reader; py-: the Python data source; streaming and group: "
                  "'reading' is the micro-batches' own time, without the query's start and stop; group is a "
                  "member of a consumer group, exactly once; ceiling: a Python data source handing Spark the "
                  "same rows from memory)")
            slower = min(rate["streaming"], rate["group"])
            print(f"batch {rate['batch']:,.0f} rows/s ({rate['batch'] / rate['json']:.2f}× json); "
                  f"streaming {slower:,.0f} rows/s ({slower / rate['json']:.2f}× json)")
            spark.stop()
        finally:
            cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
