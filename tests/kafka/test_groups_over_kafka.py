"""zkcoord groups over a replicated Kafka 3.9 cluster in ZooKeeper mode: the
brokers and zkcoord's servers (``--no-broker``) share one chroot, topics are
created and grown with Kafka's own admin API, and thin consumers fetch from
Kafka's leaders while those move: killed, shut down, elected again, and
elected uncleanly (a truncated log). One Kafka cluster and one zkcoord
cluster serve the whole module."""

from __future__ import annotations

import json
import subprocess
from typing import Iterator

import pytest
from confluent_kafka import Producer

from tests.e2e.checks import delivered_values, produce
from tests.e2e.conftest import SERVER_ARGS
from tests.e2e.test_rebalancing import Production, delivered_exactly_once, more_deliveries
from zkcoord.testing import LocalCluster, wait_until, zkcoord_command
from zkcoord.fetch.connection import BrokerConnection
from zkcoord.testing.cluster import ServerProcess, send_acknowledged
from zkcoord.testing.kafka import KafkaCluster
from zkcoord.zk.nodes import read_offsets

pytestmark = pytest.mark.kafka

SETTLE_S = 60  # a leader's failover waits out its ZooKeeper session (4 s) on two busy cores


@pytest.fixture(scope="module")
def kafka(zookeeper_kafka) -> KafkaCluster:
    return zookeeper_kafka


@pytest.fixture(scope="module")
def cluster(kafka, kafka_chroot, tmp_path_factory) -> Iterator[LocalCluster]:
    """Two zkcoord servers without brokers in Kafka's chroot; the cluster's
    producer writes to Kafka (idempotent, acks=all: a retry across a
    failover writes nothing twice)."""
    with LocalCluster(kafka_chroot[0], tmp_path_factory.mktemp("zkcoord"), ("--no-broker", *SERVER_ARGS)) as zkc:
        zkc.client_settings = {"bootstrap.servers": kafka.bootstrap, "enable.idempotence": "true"}
        zkc.start_servers(2)
        yield zkc


@pytest.fixture
def members(cluster) -> Iterator[list]:
    """The consumers a test adds; killed when it ends."""
    before = len(cluster.consumers)
    added: list = []
    yield added
    for consumer in cluster.consumers[before:]:
        consumer.kill()


def assigned(consumers) -> set:
    return set().union(*(c.assignment() for c in consumers))


def settled(consumers, topic: str, partitions: int) -> None:
    wanted = {(topic, p) for p in range(partitions)}
    wait_until(lambda: assigned(consumers) == wanted and all(c.assignment() for c in consumers),
               timeout=SETTLE_S, message=f"{topic}'s {partitions} partitions assigned")


def without_its_leader(kafka, members, topic: str, partition: int, partitions: int, how: str, take_out) -> None:
    """Take the leader of ``topic``-``partition`` out (``take_out(broker)``),
    see the group deliver on, restart it and wait until it is in sync again."""
    leader = kafka.leader_of(topic, partition)
    take_out(kafka.brokers[leader])
    try:
        kafka.wait_for_leader(topic, partition, not_on={leader}, timeout=SETTLE_S)
        more_deliveries(members, 200, SETTLE_S, f"deliveries with broker {leader} {how}")
    finally:
        kafka.restart(leader)
    for p in range(partitions):
        kafka.wait_for_isr(topic, p, set(kafka.brokers))


def test_servers_without_brokers_share_kafkas_chroot(kafka, cluster):
    # Kafka's brokers are the only ones registered: the servers hold no partitions.
    assert kafka.live_brokers() == set(kafka.brokers)
    assert cluster.wait_for_coordinator() in cluster.servers


def test_a_group_delivers_exactly_once_while_kafkas_leaders_move(kafka, cluster, members):
    topic, partitions = "moving", 6
    kafka.create_topic(topic, partitions=partitions, replication_factor=3)
    members += [cluster.add_consumer("movers", topics=[topic]) for _ in range(3)]
    settled(members, topic, partitions)
    production = Production(cluster, topic)
    try:
        more_deliveries(members, 200, SETTLE_S, "deliveries before any fault")

        without_its_leader(kafka, members, topic, 0, partitions, "killed", lambda broker: broker.kill())
        # A controlled shutdown: the broker hands its leaderships over first.
        without_its_leader(kafka, members, topic, 1, partitions, "shut down", lambda broker: broker.stop())

        # Leaders back to their preferred replicas: some move (the restarted brokers led none).
        moved = [p for p in range(partitions) if kafka.leader_of(topic, p) != kafka.partition(topic, p).replicas[0]]
        assert moved, "no leader left its preferred replica: the elections below would move nothing"
        for p in moved:
            kafka.elect_preferred_leader(topic, p)
        more_deliveries(members, 200, SETTLE_S, "deliveries after the preferred leaders were elected")
    finally:
        produced = production.stop()
    delivered_exactly_once(members, produced, timeout=SETTLE_S, where=" over Kafka")


def test_partitions_added_with_kafkas_admin_api_join_the_group(kafka, cluster, members):
    topic = "growing"
    kafka.create_topic(topic, partitions=2, replication_factor=3)
    members += [cluster.add_consumer("growers", topics=[topic]) for _ in range(2)]
    settled(members, topic, 2)

    kafka.add_partitions(topic, 5)  # Kafka's CreatePartitions: the coordinator's topic watch sees it
    settled(members, topic, 5)
    produce(cluster, topic, 100, partitions=5)
    delivered_exactly_once(members, 100, timeout=SETTLE_S)


def test_a_log_truncated_by_an_unclean_election_is_detected_and_consumed_on(kafka, cluster, members):
    topic = "unclean"
    kafka.create_topic(topic, partitions=1, replication_factor=2,
                       config={"unclean.leader.election.enable": "true", "min.insync.replicas": "1"})
    leader = kafka.leader_of(topic, 0)
    follower = next(r for r in kafka.partition(topic, 0).replicas if r != leader)
    kafka.wait_for_isr(topic, 0, {leader, follower})
    kafka.produce(topic, [(0, None, f"a-{n}".encode()) for n in range(20)])
    member = cluster.add_consumer("unclean-readers", topics=[topic])
    members.append(member)
    wait_until(lambda: len(member.records()) == 20, timeout=SETTLE_S, message="a-0..19 delivered")

    kafka.brokers[follower].kill()
    try:
        kafka.wait_for_isr(topic, 0, {leader})
        # acks=1: the leader alone holds these; the consumer reads them up to the high watermark.
        sent = send_acknowledged(Producer({**kafka.client_config(), "acks": "1", "enable.idempotence": False}),
                                 topic, [(0, None, f"b-{n}".encode()) for n in range(10)])
        assert sent == 10
        wait_until(lambda: len(member.records()) == 30, timeout=SETTLE_S, message="b-0..9 delivered")

        # The leader dies; the follower, which never had b-*, comes back and
        # is elected although it is not in sync: offsets 20..29 are gone.
        kafka.brokers[leader].kill()
        kafka.restart(follower)
        # Until the dead leader's ZooKeeper session ends, the metadata still names it.
        assert kafka.wait_for_leader(topic, 0, not_on=(leader,), timeout=SETTLE_S) == follower
        kafka.produce(topic, [(0, None, f"c-{n}".encode()) for n in range(10)])

        # The consumer neither skips c-* (offsets 20..29 again) nor hangs, and says so.
        wait_until(lambda: [v for v in delivered_values([member]) if v.startswith("c-")]
                   == [f"c-{n}" for n in range(10)], timeout=SETTLE_S, message="c-0..9 delivered, in order")
    finally:  # the next test gets the whole cluster back, whatever happened
        for broker in (leader, follower):
            if not kafka.brokers[broker].alive:
                kafka.restart(broker)
    offsets = [(r["offset"], r["value"]) for r in member.records()]
    assert offsets == ([(n, f"a-{n}") for n in range(20)] + [(20 + n, f"b-{n}") for n in range(10)]
                       + [(20 + n, f"c-{n}") for n in range(10)])
    assert member.status()["log_truncations"] == 1
    log = member.log_path.read_text()
    assert f"{topic}-0's log was truncated" in log and "diverges at offset 20" in log, member.log_tail()
    kafka.wait_for_isr(topic, 0, {leader, follower})


def zkcoord(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(zkcoord_command(*args), capture_output=True, text=True, timeout=120)


def test_groups_describe_and_reset_offsets_over_kafka(kafka, cluster, members):
    topic, group = "described", "describers"
    kafka.create_topic(topic, partitions=2, replication_factor=3)
    kafka.produce(topic, [(p, None, f"m-{n}".encode()) for n in range(20) for p in (0, 1)])
    member = cluster.add_consumer(group, topics=[topic])
    members.append(member)
    wait_until(lambda: len(member.records()) == 40, timeout=SETTLE_S, message="40 deliveries")
    member.terminate()  # a clean leave hands its offsets over
    wait_until(lambda: read_offsets(cluster.zk, group) == {(topic, 0): 20, (topic, 1): 20}, timeout=SETTLE_S,
               message="the offsets committed")
    kafka.produce(topic, [(0, None, f"later-{n}".encode()) for n in range(7)])

    def described() -> dict:
        result = zkcoord("groups", "describe", "--zookeeper", cluster.zookeeper, "--group", group, "--json")
        assert result.returncode == 0, result.stderr
        return {p["partition"]: (p["current_offset"], p["log_end_offset"], p["lag"])
                for p in json.loads(result.stdout)["partitions"]}

    assert described() == {0: (20, 27, 7), 1: (20, 20, 0)}  # log ends read from Kafka's leaders

    reset = zkcoord("groups", "reset-offsets", "--zookeeper", cluster.zookeeper, "--group", group,
                    "--topic", topic, "--to-earliest", "--execute")
    assert reset.returncode == 0, reset.stderr
    assert read_offsets(cluster.zk, group) == {(topic, 0): 0, (topic, 1): 0}
    assert described() == {0: (0, 27, 27), 1: (0, 20, 20)}

    reset = zkcoord("groups", "reset-offsets", "--zookeeper", cluster.zookeeper, "--group", group,
                    "--topic", f"{topic}:0", "--to-latest", "--execute")
    assert reset.returncode == 0, reset.stderr
    assert described() == {0: (27, 27, 0), 1: (0, 20, 20)}



# -- a group gateway in Kafka's chroot (docs/KAFKA.md, "Gateway") ------------------------------------------

GATEWAY_ID = 11  # apart from Kafka's broker ids, 1 to 3


@pytest.fixture(scope="module")
def gateway(kafka, kafka_chroot, cluster, tmp_path_factory) -> Iterator[ServerProcess]:
    """A server of the cluster whose broker is a group gateway: it reads
    Kafka's brokers and topics from the shared chroot and relays to them."""
    server = ServerProcess(GATEWAY_ID, kafka_chroot[0], tmp_path_factory.mktemp("gateway"), ("--gateway", *SERVER_ARGS))
    try:
        yield server.start()
    finally:
        server.terminate(timeout=10)


def test_a_stock_member_at_a_gateway_reads_exactly_once_beside_a_thin_one_while_a_leader_is_killed(
        kafka, cluster, gateway, members):
    topic, partitions = "gatewayed", 4
    kafka.create_topic(topic, partitions=partitions, replication_factor=3)
    with BrokerConnection(gateway.broker, timeout_s=10) as at_gateway:
        wait_until(lambda: topic in at_gateway.cluster([topic]).topics, 30, message="the gateway to learn the topic")
        seen = at_gateway.cluster([topic])
    assert set(seen.brokers) == {*kafka.brokers, GATEWAY_ID}
    ids = {address: node for node, address in seen.brokers.items()}
    assert {p: ids[a] for (_, p), a in seen.leaders().items()} == {p: kafka.leader_of(topic, p) for p in range(4)}

    members += [cluster.add_consumer("gatewayed", topics=[topic]),
                cluster.add_consumer("gatewayed", topics=[topic], kafka_brokers=gateway.broker)]
    settled(members, topic, partitions)
    production = Production(cluster, topic)
    try:
        more_deliveries(members, 100, SETTLE_S, "deliveries through the gateway's relays")
        without_its_leader(kafka, members, topic, 0, partitions, "killed", lambda broker: broker.kill())
    finally:
        produced = production.stop()
    delivered_exactly_once(members, produced, timeout=SETTLE_S, where=" through the gateway")
    assert members[1].records(), "the stock member read nothing"
