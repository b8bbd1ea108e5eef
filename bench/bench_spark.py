"""Rows per second of the zkcoord Spark source, batch and streaming, in
local[2], against Spark's own JSON file source reading the same records, as
ratios measured in one run.

Sets up a one-node ZooKeeper and one ``zkcoord server`` (with its broker) in
a temporary directory through zkcoord.testing, produces ``--records``
records into a topic of ``--partitions`` partitions, writes the same records
as JSON lines, then times each read into Spark's ``noop`` sink (a warm-up
read first, then the best of ``--rounds``).

    python bench/bench_spark.py [--records 200000] [--partitions 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path


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


def timed(run) -> float:
    began = time.perf_counter()
    run()
    return time.perf_counter() - began


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
    from zkcoord.testing import LocalCluster, exit_on_signal, start_ensemble

    signal.signal(signal.SIGTERM, exit_on_signal)
    base = Path(tempfile.mkdtemp(prefix="zkcoord-bench-spark-"))
    # The 500 ms tick the published figures ran with; no fault drill here needs a faster one.
    ensemble = start_ensemble(base / "zk", nodes=1, tick_ms=500)
    cluster = LocalCluster(ensemble.connect_string, base / "cluster")
    try:
        cluster.start_servers(1, timeout=30)  # waits until its broker is registered too
        topic = "bench"
        cluster.create_topic(topic, args.partitions)
        json_path = base / "records.json"
        produce(cluster.broker_list, topic, args.partitions, args.records, json_path)

        from pyspark.sql import SparkSession

        from zkcoord.spark import register
        from zkcoord.spark.reader import SCHEMA_DDL

        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.driver.host", "127.0.0.1").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)

        def batch():
            (spark.read.format("zkcoord").option("zookeeper", ensemble.connect_string)
             .option("subscribe", topic).load().write.format("noop").mode("overwrite").save())

        checkpoints = iter(range(1000))

        def streaming():
            query = (spark.readStream.format("zkcoord").option("zookeeper", ensemble.connect_string)
                     .option("subscribe", topic).option("startingOffsets", "earliest").load()
                     .writeStream.format("noop")
                     .option("checkpointLocation", str(base / f"checkpoint-{next(checkpoints)}"))
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            rows = sum(p["numInputRows"] for p in query.recentProgress)
            if rows != args.records:
                raise SystemExit(f"the streaming query read {rows} rows, not {args.records}")

        def json_source():
            (spark.read.schema(SCHEMA_DDL.replace("BINARY", "STRING")).json(str(json_path))
             .write.format("noop").mode("overwrite").save())

        count = (spark.read.format("zkcoord").option("zookeeper", ensemble.connect_string)
                 .option("subscribe", topic).load().count())
        if count != args.records:
            raise SystemExit(f"the batch source sees {count} rows, not {args.records}")
        results = {}
        for name, run in (("batch", batch), ("streaming", streaming), ("json", json_source)):
            run()  # warm-up: Python workers, JIT, file cache
            results[name] = min(timed(run) for _ in range(args.rounds))
        print(f"records: {args.records} in {args.partitions} partitions, local[2], best of {args.rounds}")
        for name, seconds in results.items():
            print(f"{name:>10}: {seconds:7.2f} s  {args.records / seconds:12,.0f} rows/s  "
                  f"ratio to json {results['json'] / seconds:5.2f}")
        rate = {name: args.records / seconds for name, seconds in results.items()}
        print(f"batch {rate['batch']:,.0f} rows/s ({rate['batch'] / rate['json']:.2f}× json); "
              f"streaming {rate['streaming']:,.0f} rows/s ({rate['streaming'] / rate['json']:.2f}× json)")
        spark.stop()
    finally:
        cluster.close()
        ensemble.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
