"""zkcoord beside Kafka 4 in KRaft mode: servers without their embedded broker
learn brokers, topics and partitions from Kafka's Metadata (--kafka-bootstrap)
while ZooKeeper keeps the groups; thin consumers, the admin commands and the
Spark source read from Kafka's replicated partitions."""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from typing import Iterator

import pytest

from tests.spark.conftest import spark  # noqa: F401 - the run's one SparkSession
from zkcoord.fetch.connection import SPOKEN, BrokerConnection
from zkcoord.testing import LocalCluster, cluster_in_chroot, wait_until
from zkcoord.testing.kafka import KafkaCluster
from zkcoord.testing.process import zkcoord_command
from zkcoord.zk import layout
from zkcoord.zk.nodes import read_offsets

pytestmark = pytest.mark.kafka

INTERVAL_MS = 2000  # the servers' --kafka-metadata-interval-ms


@pytest.fixture(scope="module")
def zkcoord_servers(kraft_kafka: KafkaCluster, zk_ensemble, tmp_path_factory) -> Iterator[LocalCluster]:
    """Two zkcoord servers on our ZooKeeper, beside the KRaft cluster, with no broker of their own."""
    with cluster_in_chroot(zk_ensemble.connect_string, tmp_path_factory.mktemp("kraft-zkcoord"), "kraft") as cluster:
        for server_id in (1, 2):
            cluster.add_server(server_id, extra=("--no-broker", "--kafka-bootstrap", kraft_kafka.bootstrap,
                                                 "--kafka-metadata-interval-ms", str(INTERVAL_MS),
                                                 "--initial-rebalance-delay-ms", "0"))
        cluster.wait_for_coordinator()
        yield cluster


def values(prefix: str, partitions: int, per_partition: int) -> list[tuple]:
    return [(p, b"k", f"{prefix}-{p}-{i}".encode()) for p in range(partitions) for i in range(per_partition)]


def delivered(consumers) -> Counter:
    return Counter(record["value"] for consumer in consumers for record in consumer.records())


def assignment(consumers) -> set:
    return {tuple(tp) for consumer in consumers for tp in (consumer.status() or {}).get("assignment", [])}


def zkcoord_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(zkcoord_command(*args), capture_output=True, text=True, timeout=60)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def test_every_request_we_send_kafka_4_is_in_a_version_it_accepts(kraft_kafka):
    with BrokerConnection(kraft_kafka.bootstrap.split(",")[0], timeout_s=10) as connection:
        sent = connection.versions()
        assert sent["Metadata"] == SPOKEN["Metadata"][1]  # negotiated: topic ids included
        assert connection.cluster().brokers.keys() == {1, 2, 3}


def test_thin_consumers_deliver_every_acknowledged_record_once_across_a_leader_kill(kraft_kafka, zkcoord_servers):
    topic, group = "kraft-orders", "kraft-readers"
    kraft_kafka.create_topic(topic, partitions=4, replication_factor=3)
    before = values("before", 4, 50)
    kraft_kafka.produce(topic, before)
    consumers = [zkcoord_servers.add_consumer(group, topics=[topic]) for _ in range(2)]
    wait_until(lambda: assignment(consumers) == {(topic, p) for p in range(4)} and
               all(c.status()["assignment"] for c in consumers), 60, message="both members assigned")
    wait_until(lambda: sum(delivered(consumers).values()) >= len(before), 60, message="the first records read")

    killed = kraft_kafka.leader_of(topic, 0)
    kraft_kafka.brokers[killed].kill()
    try:
        kraft_kafka.wait_for_leader(topic, 0, not_on={killed})
        after = values("after", 4, 50)
        kraft_kafka.produce(topic, after)  # acks=all, two in-sync replicas left
        everything = {value.decode() for _, _, value in before + after}
        wait_until(lambda: set(delivered(consumers)) >= everything, 90, message="every record read")
    finally:
        kraft_kafka.restart(killed)
    counts = delivered(consumers)
    assert set(counts) == everything
    assert [value for value, count in counts.items() if count != 1] == []


def test_a_topic_created_and_grown_with_kafkas_admin_api_is_learnt_from_metadata(kraft_kafka, zkcoord_servers):
    topic, group = "kraft-grown", "kraft-growers"
    # Subscribed before the topic exists: nothing in ZooKeeper will ever say it does.
    consumer = zkcoord_servers.add_consumer(group, topics=[topic])
    kraft_kafka.create_topic(topic, partitions=2, replication_factor=3)
    created = time.monotonic()
    wait_until(lambda: assignment([consumer]) == {(topic, 0), (topic, 1)}, 30, message="the new topic assigned")
    learnt_s = time.monotonic() - created
    kraft_kafka.add_partitions(topic, 5)
    grown = time.monotonic()
    wait_until(lambda: assignment([consumer]) == {(topic, p) for p in range(5)}, 30,
               message="the partitions added assigned")
    print(f"topic assigned {learnt_s:.1f} s after its creation, its new partitions {time.monotonic() - grown:.1f} s "
          f"after they were added (metadata interval {INTERVAL_MS / 1000:.1f} s)")


def test_groups_describe_shows_lag_against_kafka_and_reset_offsets_moves_them(kraft_kafka, zkcoord_servers):
    topic, group = "kraft-lag", "kraft-laggards"
    kraft_kafka.create_topic(topic, partitions=2, replication_factor=3)
    kraft_kafka.produce(topic, values("first", 2, 20))
    consumer = zkcoord_servers.add_consumer(group, topics=[topic])
    committed = {(topic, 0): 20, (topic, 1): 20}
    wait_until(lambda: read_offsets(zkcoord_servers.zk, group, committed) == committed, 60,
               message="the group's offsets committed")
    consumer.kill()
    kraft_kafka.produce(topic, values("second", 2, 5))
    where = ("--zookeeper", zkcoord_servers.zookeeper, "--group", group, "--kafka-bootstrap", kraft_kafka.bootstrap)

    def lags() -> dict:
        view = json.loads(zkcoord_cli("groups", "describe", *where, "--json").stdout)
        return {(row["topic"], row["partition"]): (row["current_offset"], row["log_end_offset"], row["lag"])
                for row in view["partitions"]}

    assert lags() == {(topic, 0): (20, 25, 5), (topic, 1): (20, 25, 5)}
    # The group has no members now: its offsets move at once.
    zkcoord_cli("groups", "reset-offsets", *where, "--topic", topic, "--to-earliest", "--execute")
    wait_until(lambda: lags() == {(topic, 0): (0, 25, 25), (topic, 1): (0, 25, 25)}, 30,
               message="the offsets reset to the log start")


def test_a_server_whose_kafka_cannot_be_reached_says_so_and_stops(zkcoord_servers, tmp_path):
    unreachable = "127.0.0.1:1"
    done = subprocess.run(zkcoord_command("server", "--id", "9", "--zookeeper", zkcoord_servers.zookeeper,
                                          "--no-broker", "--kafka-bootstrap", unreachable),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"Kafka at {unreachable}: no Kafka broker answers Metadata: cannot connect to broker {unreachable}" \
        in done.stderr


def test_the_spark_source_reads_kafka_4_on_both_paths_and_as_a_group_member(kraft_kafka, zkcoord_servers,
                                                                              spark, tmp_path):
    from tests.spark.sinks import read_sink, stream_to_parquet
    from zkcoord.spark import PYTHON_SOURCE_NAME

    topic = "kraft-spark"
    kraft_kafka.create_topic(topic, partitions=2, replication_factor=3)
    records = values("spark", 2, 30)
    kraft_kafka.produce(topic, records)
    wanted = sorted(value for _, _, value in records)
    for source in ("zkcoord", PYTHON_SOURCE_NAME):  # the JVM reader, the Python reader
        rows = (spark.read.format(source).option("zookeeper", zkcoord_servers.zookeeper)
                .option("kafka.bootstrap.servers", kraft_kafka.bootstrap).option("subscribe", topic).load()
                .select("value").collect())
        assert sorted(bytes(row.value) for row in rows) == wanted, source

    group = "kraft-spark-group"
    query = stream_to_parquet(spark, zkcoord_servers, topic, tmp_path, group=group,
                              startingOffsets="earliest", **{"kafka.bootstrap.servers": kraft_kafka.bootstrap})

    def read_everything() -> bool:
        assert query.exception() is None, query.exception()
        return sorted(row[4] for row in read_sink(spark, tmp_path)) == wanted

    try:
        # Each look reads the sink with a Spark job: not too often.
        wait_until(read_everything, 90, interval=1.0, fail_on=(AssertionError,),
                   message="the group member's query to read everything")
        owners = layout.owners_path(group, topic)
        assert zkcoord_servers.zk.get_children(owners)  # it held the partitions as a member of the group
    finally:
        query.stop()



def test_the_cluster_hosts_beside_kraft_are_kafkas_brokers_from_its_metadata(kraft_kafka, zk_ensemble):
    """Where logins of the cluster's own come from: beside KRaft nothing of
    Kafka's is in ZooKeeper, so its brokers are those of its metadata, read
    again when they change."""
    from zkcoord.coordinator.kafka_cluster import KafkaClusterWatch
    from zkcoord.testing import fresh_chroot
    from zkcoord.zk.cluster_hosts import ClusterHosts

    watch = KafkaClusterWatch(kraft_kafka.bootstrap.split(","), INTERVAL_MS / 1000,
                              lambda address: BrokerConnection(address, timeout_s=10))
    with fresh_chroot(zk_ensemble.connect_string, prefix="hosts") as (_connect, zk):
        hosts = ClusterHosts(zk, kafka=watch)  # no server registered in this chroot
        assert "127.0.0.1" not in hosts  # and no broker known: the watch has not read Kafka yet
        watch.start()
        try:
            wait_until(lambda: "127.0.0.1" in hosts, 10, message="Kafka's brokers read from its metadata")
            assert set(watch.brokers) == set(kraft_kafka.brokers)
        finally:
            watch.stop()
