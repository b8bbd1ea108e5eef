"""A Consumer on the real data path: records decoded a batch at a time by its
fetcher, handed out by poll() and poll_batch(), from every codec."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from zkcoord.admin.topics import create_topic
from zkcoord.consumer.consumer import Consumer
from zkcoord.testing import wait_until

CODECS = ("gzip", "snappy", "lz4", "zstd")


def produce_compressed(bootstrap: str, topic: str, per_partition: int) -> dict[int, list[tuple]]:
    """Partition p gets ``per_partition`` records compressed with CODECS[p];
    every third has no key and some have headers."""
    sent: dict[int, list[tuple]] = {}
    for partition, codec in enumerate(CODECS):
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": codec})
        rows = sent[partition] = []
        for i in range(per_partition):
            key = None if i % 3 == 0 else f"k{i}".encode()
            value = f"{codec}-{i}".encode() * (1 + i % 5)
            producer.produce(topic, key=key, value=value, partition=partition,
                             headers=[("n", str(i).encode())] if i % 7 == 0 else None)
            rows.append((key, value))
        assert producer.flush(30) == 0
    return sent


def test_poll_batch_and_poll_read_every_codec_exactly_once(cluster_factory, zk):
    pytest.importorskip("pyarrow")
    cluster = cluster_factory(1)
    create_topic(zk, "codecs", len(CODECS))
    sent = produce_compressed(cluster.broker_list, "codecs", 2000)
    got: dict[int, list[tuple]] = {p: [] for p in range(len(CODECS))}
    offsets: dict[int, list[int]] = {p: [] for p in range(len(CODECS))}
    with Consumer(cluster.bootstrap, group="batches", topics=["codecs"], max_poll_records=700,
                  auto_offset_reset="smallest") as consumer:
        calls = iter(range(10**9))

        def read() -> bool:
            # Alternate the two APIs: they share one buffer and one position per partition.
            if next(calls) % 2:
                for r in consumer.poll(200):
                    got[r.partition].append((r.key, r.value))
                    offsets[r.partition].append(r.offset)
            else:
                batch = consumer.poll_batch(200)
                assert batch.num_rows <= 700
                for r in batch.to_pylist():
                    got[r["partition"]].append((r["key"], r["value"]))
                    offsets[r["partition"]].append(r["offset"])
            return sum(map(len, got.values())) >= 2000 * len(CODECS)

        wait_until(read, timeout=60, interval=0, message="every record")
        assert consumer.poll(0) == []  # done with the last batch: what is reported counts it
        assert consumer.offsets() == {("codecs", p): 2000 for p in range(len(CODECS))}
    assert got == sent
    assert offsets == {p: list(range(2000)) for p in range(len(CODECS))}
