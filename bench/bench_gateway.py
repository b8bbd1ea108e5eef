"""What a group gateway's relays cost a stock client: librdkafka's records/s
read from Kafka directly against the same read through a gateway's relay
(docs/KAFKA.md, "Gateway"), and the gateway's CPU while it relays.

Starts its own one-node ZooKeeper, a one-node Kafka 4 in KRaft mode
(zkcoord.testing.kafka) and one `zkcoord server --gateway` on 127.0.0.1,
produces --messages 100-byte messages once over --partitions partitions,
then reads all of them back with a confluent_kafka Consumer assigned every
partition at offset 0, bootstrapped at Kafka or at the gateway, the two
alternating within each of --rounds rounds (so that load from elsewhere on
the machine falls on both). It prints each read's time to the first record
and rate from the first record to the last, and the medians.

The last line is `direct X records/s; through the gateway Y records/s (Z%);
gateway CPU W% of a core`. Bounded in count (--messages) and in time
(--phase-timeout per read); everything started is stopped on exit, on error too.

    python bench/bench_gateway.py [--messages 300000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from zkcoord.testing import LocalCluster, scratch_ensemble  # noqa: E402
from zkcoord.testing.kafka import KRAFT_MODE, KafkaCluster, KafkaSettings  # noqa: E402

TOPIC = "bench-gateway"
VALUE = b"v" * 100
GATEWAY_ID = 11


def produce(bootstrap: str, messages: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                         "acks": "all", "log_level": 3})
    for n in range(messages):
        while True:
            try:
                producer.produce(TOPIC, VALUE, partition=n % partitions)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120) != 0:
        raise RuntimeError("messages left unacknowledged")


def read(bootstrap: str, messages: int, partitions: int, timeout_s: float) -> tuple[float, float]:
    """(seconds to the first record, records/s from the first to the last)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "log_level": 3, "fetch.max.bytes": 50 << 20})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    started = time.monotonic()
    first = None
    got = 0
    try:
        while got < messages:
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"read {got} of {messages} from {bootstrap} in {timeout_s} s")
            batch = consumer.consume(10000, 0.5)
            got += sum(1 for m in batch if m.error() is None)
            if got and first is None:
                first = time.monotonic()
        end = time.monotonic()
    finally:
        consumer.close()
    return first - started, messages / max(end - first, 1e-9)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--phase-timeout", type=float, default=180.0)
    args = parser.parse_args()

    with scratch_ensemble("bench-gateway-") as (work, ensemble), \
            KafkaCluster(work / "kafka", KafkaSettings(KRAFT_MODE, brokers=1, min_insync_replicas=1, full_jit=True)) as kafka, \
            LocalCluster(ensemble.connect_string, work / "zkcoord") as cluster:
        kafka.start()
        server = cluster.add_server(GATEWAY_ID, extra=("--gateway", "--kafka-bootstrap", kafka.bootstrap))
        kafka.create_topic(TOPIC, partitions=args.partitions, replication_factor=1)
        produce(kafka.bootstrap, args.messages, args.partitions)
        paths = {"direct": kafka.bootstrap, "gateway": server.broker}
        rates: dict[str, list[float]] = {name: [] for name in paths}
        gateway_cpu = []
        for round_ in range(args.rounds):
            for name, bootstrap in paths.items():
                before = server.cpu_seconds()
                began = time.monotonic()
                to_first, rate = read(bootstrap, args.messages, args.partitions, args.phase_timeout)
                if name == "gateway":
                    gateway_cpu.append((server.cpu_seconds() - before) / (time.monotonic() - began) * 100)
                rates[name].append(rate)
                print(f"round {round_ + 1} {name:8s} first record after {to_first:5.2f} s; {rate:10,.0f} records/s",
                      flush=True)
        direct, relayed = statistics.median(rates["direct"]), statistics.median(rates["gateway"])
        print(f"direct {direct:,.0f} records/s; through the gateway {relayed:,.0f} records/s "
              f"({relayed / direct * 100:.0f}%); gateway CPU {statistics.median(gateway_cpu):.0f}% of a core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
