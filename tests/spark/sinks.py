"""Streaming queries into a parquet sink, and reading back what they committed."""

from __future__ import annotations

from pathlib import Path


def stream_to_parquet(spark, cluster, topic: str, base: Path, *, name: str = "q",
                      trigger: dict | None = None, source: str = "zkcoord", **options):
    """A streaming query from ``source`` (the JVM path, or the Python data
    source by its name) into parquet under ``base``."""
    reader = (spark.readStream.format(source).option("zookeeper", cluster.zookeeper)
              .option("subscribe", topic))
    for key, value in options.items():
        reader = reader.option(key, value)
    writer = (reader.load().writeStream.format("parquet")
              .option("path", str(base / f"{name}-out"))
              .option("checkpointLocation", str(base / f"{name}-checkpoint")))
    writer = writer.trigger(**(trigger or {"processingTime": "200 milliseconds"}))
    return writer.start()


def read_sink(spark, base: Path, name: str = "q") -> list[tuple]:
    """(topic, partition, offset, key, value) of every row the sink committed."""
    path = base / f"{name}-out"
    if not (path / "_spark_metadata").exists():
        return []
    df = spark.read.parquet(str(path))
    return [(r.topic, r.partition, r.offset, bytes(r.key), bytes(r.value))
            for r in df.select("topic", "partition", "offset", "key", "value").collect()]
