"""Broker throughput: produce and fetch 100-byte messages with confluent-kafka
and with kcat, the broker's CPU per GB served, and one consumer's messages/s
through the consumers' fetcher (zkcoord.fetch.columnar).

Starts its own one-node ZooKeeper and a broker process on 127.0.0.1 through
zkcoord.testing, bounded in message count (--messages) and in time
(--phase-timeout per phase). Broker CPU is read from /proc/<pid>/stat.

    python bench/bench_broker.py --messages 2000000
    python bench/bench_broker.py --messages 2000000 --tls   # the same over TLS

With ``--tls`` the broker's listener speaks TLS with certificates made for
the run, and every client verifies it (security.protocol=SSL).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from zkcoord.fetch.columnar import ColumnarFetcher  # noqa: E402
from zkcoord.security import certs  # noqa: E402
from zkcoord.security.config import TlsConfig, librdkafka_settings  # noqa: E402
from zkcoord.security.tls import client_context  # noqa: E402
from zkcoord.testing import (BrokerProcess, cluster_in_chroot, cpu_seconds,  # noqa: E402
                             scratch_ensemble)

VALUE_SIZE = 100
# The clients' TLS settings (plaintext unless --tls).
TLS = TlsConfig()


class Phase:
    """Wall time and broker CPU over one phase."""

    def __init__(self, name: str, broker_pid: int):
        self.name, self.pid = name, broker_pid

    def __enter__(self):
        self.cpu0, self.t0 = cpu_seconds(self.pid), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t0
        self.cpu = cpu_seconds(self.pid) - self.cpu0

    def report(self, messages: int, extra: str = "") -> None:
        mb = messages * VALUE_SIZE / 1e6
        print(f"{self.name:<34} {messages:>10,} msgs {self.wall:7.2f} s "
              f"{messages / self.wall:>12,.0f} msg/s {mb / self.wall:8.1f} MB/s "
              f"broker cpu {self.cpu:6.2f} s ({self.cpu / self.wall * 100:5.1f}%){extra}")


def produce_confluent(bootstrap, topic, partition, count, deadline):
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000, "acks": 1,
                         "compression.type": "none", **librdkafka_settings(TLS)})
    value = b"x" * VALUE_SIZE
    sent = 0
    while sent < count and time.monotonic() < deadline:
        try:
            producer.produce(topic, value=value, partition=partition)
            sent += 1
        except BufferError:
            producer.poll(0.01)
    producer.flush(60)
    return sent


def consume_raw(bootstrap, topic, partition, count, deadline):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "fetch.queue.backoff.ms": 1, "queued.min.messages": 500_000,
                         "max.partition.fetch.bytes": 8 << 20, **librdkafka_settings(TLS)})
    consumer.assign([TopicPartition(topic, partition, 0)])
    got = 0
    while got < count and time.monotonic() < deadline:
        got += sum(1 for m in consumer.consume(10_000, 0.5) if m.error() is None)
    consumer.close()
    return got


def consume_fetcher(bootstrap, topic, partition, count, deadline):
    fetcher = ColumnarFetcher(bootstrap, client_id="bench", tls=client_context(TLS))
    fetcher.assign({(topic, partition): 0})
    got = 0
    while got < count and time.monotonic() < deadline:
        got += len(fetcher.fetch(10_000, 0.5))
    fetcher.close()
    return got


def run(args, work: Path, broker: BrokerProcess) -> int:
    """The phases, against a running broker with topic "bench" of 2 partitions."""
    bootstrap = broker.bootstrap
    n = args.messages
    print(f"{n:,} messages of {VALUE_SIZE} bytes; broker pid {broker.pid}; "
          f"{os.cpu_count()} cpus{'; over TLS' if TLS.speaks else ''}")
    kcat_tls = [arg for key, value in librdkafka_settings(TLS).items() for arg in ("-X", f"{key}={value}")]

    with Phase("produce confluent-kafka (p0)", broker.pid) as phase:
        sent = produce_confluent(bootstrap, "bench", 0, n, time.monotonic() + args.phase_timeout)
    phase.report(sent)

    lines = work / "lines.txt"
    with open(lines, "wb") as f:
        line = b"y" * (VALUE_SIZE - 1) + b"\n"
        f.write(line * n)
    with Phase("produce kcat (p1)", broker.pid) as phase:
        subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", "bench", "-p", "1", "-l", str(lines),
                        "-X", "linger.ms=20", "-X", "batch.size=1000000", *kcat_tls],
                       check=True, timeout=args.phase_timeout)
    phase.report(n)

    with Phase("fetch kcat (p1)", broker.pid) as phase:
        out = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", "bench", "-p", "1", "-o", "beginning",
                              "-e", "-q", "-c", str(n), *kcat_tls],
                             check=True, timeout=args.phase_timeout, stdout=subprocess.PIPE).stdout
    got = out.count(b"\n")
    phase.report(got)

    with Phase("fetch confluent-kafka raw (p0)", broker.pid) as phase:
        got = consume_raw(bootstrap, "bench", 0, n, time.monotonic() + args.phase_timeout)
    gb = got * VALUE_SIZE / 1e9
    phase.report(got, f"  cpu/GB {phase.cpu / gb:.2f} s")

    with Phase("fetch ColumnarFetcher -> Records (p0)", broker.pid) as phase:
        got = consume_fetcher(bootstrap, "bench", 0, n, time.monotonic() + args.phase_timeout)
    phase.report(got, f"  cpu/GB {phase.cpu / gb:.2f} s")
    size = sum(f.stat().st_size for f in broker.data_dir.rglob("*.log"))
    print(f"log bytes on disk: {size / 1e6:.1f} MB for {2 * n:,} messages")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--phase-timeout", type=float, default=120.0)
    parser.add_argument("--tls", action="store_true", help="the broker's listener and every client over TLS")
    args = parser.parse_args()
    if not 1_000 <= args.messages <= 20_000_000:
        parser.error("--messages must be in [1000, 20000000]")

    with scratch_ensemble("bench-broker-") as (work, ensemble):
        with cluster_in_chroot(ensemble.connect_string, work / "cluster", "bench") as cluster:
            tls_args = []
            if args.tls:
                global TLS
                ca = certs.make_ca(work / "pki")
                server = certs.issue(ca, work / "pki", "broker")
                TLS = TlsConfig(ca=str(ca.cert))
                tls_args = ["--tls-cert", str(server.cert), "--tls-key", str(server.key)]
            broker = cluster.add_broker(0, extra=tls_args)
            cluster.create_topic("bench", 2)
            return run(args, work, broker)


if __name__ == "__main__":
    sys.exit(main())
