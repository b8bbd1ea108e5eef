"""Records of transactional producers, read through zkcoord from a real Kafka
cluster: thin consumers in a zkcoord group and the Spark source (both paths),
read_committed and read_uncommitted.

Here the cluster is Kafka 3.9 in ZooKeeper mode, three brokers, replication
factor 3, sharing its chroot with zkcoord servers that run without an
embedded broker: the coordinator reads Kafka's own /brokers/topics there.
``test_transactions_kraft.py`` runs the same test on Kafka 4 in KRaft mode,
with its own ``kafka``, ``zkcoord_servers`` and ``spark_options`` fixtures.

The log each partition gets, in order: records outside any transaction;
two producers' transactions interleaved, one committed and one aborted; the
same two again the other way round; a transaction left open while more plain
records follow it (above the last stable offset), so that read_committed
must hold back everything from it on; then that transaction committed, and
a last one aborted, so that the partition ends in an abort marker.
"""

from __future__ import annotations

import uuid
from typing import Iterator

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer, TopicPartition

from tests.spark.conftest import spark  # noqa: F401 - the session-wide SparkSession fixture
from zkcoord.consumer.consumer import Consumer
from zkcoord.fetch.isolation import READ_COMMITTED, READ_UNCOMMITTED
from zkcoord.spark import PYTHON_SOURCE_NAME
from zkcoord.testing import LocalCluster, wait_until
from zkcoord.testing.cluster import send_acknowledged
from zkcoord.zk.layout import decode_offset, offset_path

pytestmark = pytest.mark.kafka

TOPIC = "transactions"
PARTITIONS = (0, 1)
TRANSACTION_TIMEOUT_MS = 600_000  # Kafka's transaction.max.timeout.ms is 900000 by default


@pytest.fixture(scope="module")
def kafka(zookeeper_kafka):
    return zookeeper_kafka


@pytest.fixture(scope="module")
def spark_options() -> dict[str, str]:
    """What the Spark source needs beside ``zookeeper`` to find the brokers: nothing, they are registered there."""
    return {}


@pytest.fixture(scope="module")
def zkcoord_servers(zookeeper_kafka, kafka_chroot, tmp_path_factory) -> Iterator[LocalCluster]:
    """Two coordinator candidates without brokers, in Kafka's chroot."""
    with LocalCluster(kafka_chroot[0], tmp_path_factory.mktemp("zkcoord")) as cluster:
        for server_id in (1, 2):
            cluster.add_server(server_id, extra=("--no-broker",))
        cluster.wait_for_coordinator()
        yield cluster


class Log:
    """What was written, by value: the data records (never markers) of
    committed transactions and outside any, and of aborted ones."""

    def __init__(self) -> None:
        self.committed: list[bytes] = []
        self.aborted: list[bytes] = []


def values(label: str, n: int = 3) -> dict[int, list[bytes]]:
    return {p: [f"{label}-p{p}-{i}".encode() for i in range(n)] for p in PARTITIONS}


class Writer:
    """The producers: one plain, and transactional ones by transactional id."""

    def __init__(self, kafka, log: Log):
        self.kafka = kafka
        self.log = log
        self.plain = Producer({**kafka.client_config(), "acks": "all"})
        self.transactional: dict[str, Producer] = {}
        self.ended = 0  # transactions ended: each wrote a marker to every partition

    def producer(self, name: str) -> Producer:
        if name not in self.transactional:
            # Long enough that the open transaction outlives the slowest reads
            # of a loaded machine: one that times out is aborted by Kafka, and
            # the records behind it become stable before the test says so.
            producer = Producer({**self.kafka.client_config(), "transactional.id": f"{name}-{uuid.uuid4().hex[:6]}",
                                 "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS})
            producer.init_transactions(30)
            self.transactional[name] = producer
        return self.transactional[name]

    def plain_records(self, label: str) -> None:
        written = values(label)
        send_acknowledged(self.plain, TOPIC, [(p, None, v) for p in PARTITIONS for v in written[p]])
        self.log.committed += [v for p in PARTITIONS for v in written[p]]

    def begin(self, name: str) -> None:
        self.producer(name).begin_transaction()

    def send(self, name: str, label: str) -> list[bytes]:
        producer = self.producer(name)
        written = values(label)
        for p in PARTITIONS:
            for value in written[p]:
                producer.produce(TOPIC, value=value, partition=p)
        producer.flush(30)
        return [v for p in PARTITIONS for v in written[p]]

    def end(self, name: str, sent: list[bytes], commit: bool) -> None:
        producer = self.producer(name)
        self.ended += 1
        if commit:
            producer.commit_transaction(30)
            self.log.committed += sent
        else:
            producer.abort_transaction(30)
            self.log.aborted += sent


@pytest.fixture(scope="module")
def written(kafka, zkcoord_servers):
    """The log up to the open transaction: (writer, log, what the open
    transaction sent, the plain records behind it)."""
    kafka.create_topic(TOPIC, partitions=len(PARTITIONS), replication_factor=3)
    for p in PARTITIONS:
        kafka.wait_for_isr(TOPIC, p, {1, 2, 3})
    log = Log()
    writer = Writer(kafka, log)
    writer.plain_records("plain")
    writer.begin("a")
    writer.begin("b")
    a = writer.send("a", "a1")
    b = writer.send("b", "b1")
    a += writer.send("a", "a2")
    writer.end("b", b, commit=False)
    writer.end("a", a, commit=True)
    writer.begin("a")
    writer.begin("b")
    b = writer.send("b", "b2")
    a = writer.send("a", "a3")
    writer.end("a", a, commit=False)
    writer.end("b", b, commit=True)
    writer.begin("open")
    still_open = writer.send("open", "open")
    behind = values("behind")
    send_acknowledged(writer.plain, TOPIC, [(p, None, v) for p in PARTITIONS for v in behind[p]])
    return writer, log, still_open, [v for p in PARTITIONS for v in behind[p]]


def high_watermarks(kafka) -> dict[int, int]:
    consumer = KafkaConsumer({**kafka.client_config(), "group.id": f"hw-{uuid.uuid4().hex[:6]}"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in PARTITIONS}
    finally:
        consumer.close()


def group_offsets(zk, group: str) -> dict[int, int]:
    found = {}
    for p in PARTITIONS:
        if zk.exists(offset_path(group, TOPIC, p)):
            found[p] = decode_offset(zk.get(offset_path(group, TOPIC, p))[0])
    return found


class Members:
    """Thin consumers of one group, polled in turn by the test."""

    def __init__(self, servers: LocalCluster, group: str, isolation_level: str, count: int = 2):
        self.members = [Consumer(servers.bootstrap, group=group, topics=[TOPIC], isolation_level=isolation_level,
                                 session_timeout_ms=3000) for _ in range(count)]
        self.delivered: list[bytes] = []

    def poll(self) -> None:
        for member in self.members:
            self.delivered += [r.value for r in member.poll(100)]

    def poll_until(self, wanted, timeout: float = 60.0, message: str = "") -> None:
        def done() -> bool:
            self.poll()
            return wanted()
        wait_until(done, timeout, interval=0, message=message)

    def close(self) -> None:
        for member in self.members:
            member.close()


def test_consumers_and_spark_read_committed_and_uncommitted(kafka, zkcoord_servers, written, spark_options,
                                                            spark):  # noqa: F811
    writer, log, still_open, behind = written
    committed = Members(zkcoord_servers, "txn-committed", READ_COMMITTED)
    uncommitted = Members(zkcoord_servers, "txn-uncommitted", READ_UNCOMMITTED, count=1)
    try:
        # An open transaction: read_committed stops at its first offset, the
        # last stable offset, so neither its records nor the plain ones
        # written after it arrive; read_uncommitted reads them all.
        everything_so_far = sorted(log.committed + log.aborted + still_open + behind)
        uncommitted.poll_until(lambda: len(uncommitted.delivered) >= len(everything_so_far), message="uncommitted")
        committed.poll_until(lambda: len(committed.delivered) >= len(log.committed), message="committed so far")
        for _ in range(10):  # polls that would bring anything past the stable offset
            committed.poll()
        assert sorted(committed.delivered) == sorted(log.committed)
        assert sorted(uncommitted.delivered) == everything_so_far

        # The Spark source plans up to the last stable offset read_committed.
        for source in ("zkcoord", PYTHON_SOURCE_NAME):
            assert spark_values(spark, source, zkcoord_servers.zookeeper, READ_COMMITTED, spark_options) == \
                sorted(log.committed), source
        assert spark_values(spark, "zkcoord", zkcoord_servers.zookeeper, READ_UNCOMMITTED, spark_options) == \
            everything_so_far

        # The open transaction commits, a last one aborts: each partition
        # ends in an abort marker, which must not look like a record pending.
        writer.end("open", still_open, commit=True)
        log.committed += behind
        writer.begin("a")
        writer.end("a", writer.send("a", "a4"), commit=False)
        committed.poll_until(lambda: len(committed.delivered) >= len(log.committed), message="committed at the end")
        uncommitted.poll_until(lambda: len(uncommitted.delivered) >= len(log.committed) + len(log.aborted),
                               message="everything at the end")
        # The coordinator writes the markers after the producer's commit or
        # abort returns: wait for the last ones, then for the groups' offsets.
        records_each = (len(log.committed) + len(log.aborted)) // len(PARTITIONS)
        ends = {p: records_each + writer.ended for p in PARTITIONS}
        wait_until(lambda: high_watermarks(kafka) == ends, 30, message=f"the log ends at {ends}")
        for group, members in (("txn-committed", committed), ("txn-uncommitted", uncommitted)):
            members.poll_until(lambda: group_offsets(zkcoord_servers.zk, group) == ends, 30,
                               message=f"{group}'s offsets at the log ends {ends} (past the last markers)")
        assert sorted(committed.delivered) == sorted(log.committed), "the committed records, once each"
        assert sorted(uncommitted.delivered) == sorted(log.committed + log.aborted), "every data record, once each"

        for source in ("zkcoord", PYTHON_SOURCE_NAME):
            assert spark_values(spark, source, zkcoord_servers.zookeeper, READ_COMMITTED, spark_options) == \
                sorted(log.committed), source
    finally:
        committed.close()
        uncommitted.close()


def spark_values(spark, source: str, zookeeper: str, isolation_level: str,  # noqa: F811
                 options: dict[str, str]) -> list[bytes]:
    rows = (spark.read.format(source).option("zookeeper", zookeeper).option("subscribe", TOPIC)
            .option("isolationLevel", isolation_level).options(**options).load().select("value").collect())
    return sorted(bytes(r.value) for r in rows)
