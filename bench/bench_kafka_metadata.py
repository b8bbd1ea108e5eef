"""What a server's poll of Kafka's Metadata costs (`--kafka-bootstrap`, KafkaClusterWatch).

Starts a KRaft Kafka of its own (3 brokers, topics replicated 3 times, as
bench_vs_kafka's) holding bench_vs_kafka's topics (10,000, 1,000 and twice
100 partitions: 11,200), waits until its Metadata stops changing (the same
answer three times in a row: new partitions' followers join their ISRs a
while after the topics are created), then polls it --polls times as the
watch does (a new connection to one broker, the last answer passed along)
and prints the CPU of this process:

- per poll whose answer is the same as the last, byte for byte: not read;
- per poll whose answer differs (a leader moved, an ISR changed): read; how
  many did on this machine;
- for such an answer, read as the watch reads it (scanned, metadata_scan.py)
  and decoded whole with kafka-python (what every poll paid before), each
  timed on the last answer's bytes;

and the share of a core each way at bench_vs_kafka's 2 s interval.

    python bench/bench_kafka_metadata.py [--polls 30]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import run_in_scratch  # noqa: E402
from kafka.protocol.metadata import MetadataResponse  # noqa: E402
from zkcoord.coordinator.kafka_cluster import topic_changes  # noqa: E402
from zkcoord.fetch.cluster import ClusterMetadata, ask_any  # noqa: E402
from zkcoord.fetch.connection import METADATA_VERSIONS, BrokerConnection  # noqa: E402
from zkcoord.testing import wait_until  # noqa: E402
from zkcoord.testing.kafka import KRAFT_MODE, KafkaCluster, KafkaSettings  # noqa: E402

TOPICS = {"big": 10_000, "mid": 1_000, "small-a": 100, "small-b": 100}
INTERVAL_S = 2.0  # bench_vs_kafka's --kafka-metadata-interval-ms
SAME_IN_A_ROW = 3


def settled(addresses: list[str], timeout: float = 600.0) -> ClusterMetadata:
    """The cluster's Metadata once every topic is known and SAME_IN_A_ROW
    answers in a row are the same, byte for byte: new partitions' followers
    join their ISRs a while after the topics are created."""
    connect = partial(BrokerConnection, client_id="bench-metadata", timeout_s=30.0)
    answers: list[ClusterMetadata] = []

    def quiet() -> bool:
        answers[:] = [*answers[-(SAME_IN_A_ROW - 1):], ask_any(addresses, connect)]
        return set(answers[-1].topics) >= set(TOPICS) and len(answers) == SAME_IN_A_ROW \
            and len({a.raw for a in answers}) == 1

    wait_until(quiet, timeout, interval=1.0, message="the cluster's Metadata to stop changing")
    return answers[-1]


def polled(addresses: list[str], polls: int, first: ClusterMetadata) -> tuple[list[float], list[float]]:
    """CPU seconds of each poll, as (answers the same as the last, answers that differed)."""
    connect = partial(BrokerConnection, client_id="bench-metadata", timeout_s=30.0)
    known = {topic: (data.partition_count, data.topic_id) for topic, data in first.topics.items()}
    same, differed = [], []
    last = first
    for _ in range(polls):
        began = time.process_time()
        seen = ask_any(addresses, connect, previous=last)
        known.update(topic_changes(known, seen.topics))
        (same if seen is last else differed).append(time.process_time() - began)
        last = seen
    return same, differed


def cpu_per_read(read, times: int = 10) -> float:
    began = time.process_time()
    for _ in range(times):
        read()
    return (time.process_time() - began) / times


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def run(args, work: Path) -> str:
    print(f"load before the run: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min) on "
          f"{os.cpu_count()} cores", flush=True)
    with KafkaCluster(work / "kafka", KafkaSettings(KRAFT_MODE, heap_mb=1024)) as kafka:
        kafka.start(timeout=180)
        for topic, partitions in TOPICS.items():
            kafka.create_topic(topic, partitions, timeout=300)
        addresses = kafka.bootstrap.split(",")[:1]
        first = settled(addresses)
        partitions = sum(t.partition_count for t in first.topics.values())
        print(f"kafka {kafka.version}, KRaft, {len(first.brokers)} brokers; Metadata of {len(first.topics)} "
              f"topics, {partitions} partitions: {len(first.raw)} bytes", flush=True)
        same, differed = polled(addresses, args.polls, first)
    version = METADATA_VERSIONS[1]  # Kafka 4 answers the highest version we ask for
    raw = first.raw
    scanned = cpu_per_read(lambda: ClusterMetadata.read(raw, version, lambda: None))
    whole = cpu_per_read(lambda: ClusterMetadata.of(MetadataResponse.decode(raw, version=version), raw))
    network = mean(same)
    print(f"{len(same)} of {args.polls} polls answered the same as the last: {network * 1000:.1f} ms CPU each; "
          f"{len(differed)} differed: {mean(differed) * 1000:.1f} ms CPU each", flush=True)
    print(f"an answer read: scanned {scanned * 1000:.1f} ms CPU, decoded whole with kafka-python (before) "
          f"{whole * 1000:.1f} ms", flush=True)
    before = network + whole
    after = network + scanned * len(differed) / args.polls
    print(f"per poll, every {INTERVAL_S:.0f} s: before {before * 1000:.1f} ms ({before / INTERVAL_S:.2%} of a core), "
          f"now {after * 1000:.1f} ms ({after / INTERVAL_S:.2%}) with {len(differed)} of {args.polls} answers "
          f"differing, {network * 1000:.1f} ms ({network / INTERVAL_S:.2%}) on a quiet cluster", flush=True)
    print(f"load after the run: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    return (f"metadata poll of {partitions} partitions: {before * 1000:.1f} ms CPU before, {after * 1000:.1f} ms now "
            f"({network * 1000:.1f} ms when the answer is the same as the last)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=30, help="Metadata reads (default 30)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args(argv)
    if not 5 <= args.polls <= 10_000:
        parser.error("--polls must be in [5, 10000]")
    return run_in_scratch("bench-kafka-metadata-", run, args)


if __name__ == "__main__":
    sys.exit(main())
