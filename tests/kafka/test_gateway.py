"""The group gateway over Kafka 4 in KRaft mode: a zkcoord server whose broker
holds no partitions (``--gateway``) names Kafka's leaders in Metadata, at
relays that pass what clients send on to Kafka, and itself for
FindCoordinator, so stock clients bootstrapped at it read Kafka's records
while they are members of a zkcoord group beside thin consumers.

One Kafka cluster (three combined KRaft nodes, replication factor 3,
acks=all) and two zkcoord servers (the gateway, and one without a broker)
serve the module."""

from __future__ import annotations

import socket
import subprocess
from collections import Counter
from typing import Callable, Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from zkcoord.fetch.connection import BrokerConnection, PartitionError
from zkcoord.testing import LocalCluster, cluster_in_chroot, fresh_chroot, wait_until
from zkcoord.testing.cluster import ConsumerProcess, send_acknowledged
from zkcoord.testing.java_members import JavaMember
from zkcoord.testing.kafka import KafkaCluster
from zkcoord.testing.process import zkcoord_command
from zkcoord.zk.layout.kafka import parse_kafka_uuid
from zkcoord.zk.nodes import read_offsets

pytestmark = pytest.mark.kafka

GATEWAY_ID, SERVER_ID = 11, 12  # apart from Kafka's node ids, 1 to 3
SETTLE_S = 60
NOT_LEADER_OR_FOLLOWER = 6
FETCH = FetchRequest.API_KEY
OFFSET_FOR_LEADER_EPOCH = 23


@pytest.fixture(scope="module")
def kafka(kraft_kafka) -> KafkaCluster:
    return kraft_kafka


@pytest.fixture(scope="module")
def servers(kafka: KafkaCluster, zk_ensemble, tmp_path_factory) -> Iterator[LocalCluster]:
    with cluster_in_chroot(zk_ensemble.connect_string, tmp_path_factory.mktemp("gateway-zkcoord"),
                           "gateway") as cluster:
        beside_kafka = ("--kafka-bootstrap", kafka.bootstrap, "--kafka-metadata-interval-ms", "1000",
                        "--initial-rebalance-delay-ms", "0")
        cluster.add_server(GATEWAY_ID, extra=("--gateway", *beside_kafka))
        cluster.add_server(SERVER_ID, extra=("--no-broker", *beside_kafka))
        cluster.wait_for_coordinator()
        yield cluster


def gateway(servers: LocalCluster) -> str:
    return servers.servers[GATEWAY_ID].broker


def servers_view(servers: LocalCluster, topic: str):
    """The cluster as the gateway's Metadata names it."""
    with BrokerConnection(gateway(servers), timeout_s=10) as at_gateway:
        return at_gateway.cluster([topic])


# Stock members bootstrapped at the gateway, by client library. Each starts a
# member of ``group`` reading ``topic`` and returns it as a ConsumerProcess
# (records(): dicts with partition and offset; assignment(); stock True;
# terminate() leaves the group cleanly): the group test below takes in every
# entry, so a Java KafkaConsumer is one more entry here.
StockMember = Callable[[LocalCluster, str, str], ConsumerProcess]
JAVA_STARTED: list[JavaMember] = []  # stopped when the module ends


def java_member(servers: LocalCluster, group: str, topic: str) -> JavaMember:
    """Kafka's own KafkaConsumer (classic protocol), with the session the other members have."""
    member = JavaMember(servers.directory / f"java-{len(JAVA_STARTED)}", [topic], {
        "bootstrap.servers": gateway(servers), "group.id": group, "auto.offset.reset": "earliest",
        "session.timeout.ms": 4000, "heartbeat.interval.ms": 500}, name=f"java member {len(JAVA_STARTED)}")
    JAVA_STARTED.append(member)
    return member.start()


STOCK_MEMBERS: dict[str, StockMember] = {
    "librdkafka": lambda servers, group, topic: servers.add_consumer(
        group, topics=[topic], kafka_brokers=gateway(servers)),
    "kafka-python": lambda servers, group, topic: servers.add_consumer(
        group, topics=[topic], kafka_brokers=gateway(servers), extra=("--kafka-client", "kafka-python")),
    "java": java_member,
}


@pytest.fixture(scope="module", autouse=True)
def java_members_stopped() -> Iterator[None]:
    yield
    for member in JAVA_STARTED:
        member.kill()


def values(prefix: str, partitions: int, per_partition: int) -> list[tuple]:
    return [(p, b"k", f"{prefix}-{p}-{i}".encode()) for p in range(partitions) for i in range(per_partition)]


def whole(members, topic: str, partitions: int) -> Callable[[], bool]:
    """Every member assigned something, and the partitions covered without overlap."""
    def check() -> bool:
        held = [m.assignment() for m in members]
        return all(held) and sum(map(len, held)) == partitions and set().union(*held) == {
            (topic, p) for p in range(partitions)}
    return check


def deliveries(members) -> Counter:
    """How often each (partition, offset) was delivered, across every member."""
    return Counter((r["partition"], r["offset"]) for m in members for r in m.records())


def kafka_groups(kafka: KafkaCluster) -> set:
    admin = kafka.new_admin()
    return {g.group_id for g in admin.list_consumer_groups(request_timeout=30).result(30).valid}


def exchange(address: str, request, version: int) -> bytes:
    """Send ``request`` to a broker; its answer after the size."""
    host, port = address.rsplit(":", 1)
    request.with_header(correlation_id=1, client_id="zkcoord-test")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request.encode(version=version, header=True, framed=True))
        reader = sock.makefile("rb")
        return reader.read(int.from_bytes(reader.read(4), "big"))


def offered_apis(address: str) -> dict:
    """{API key: (min, max)} of a broker's ApiVersions answer (version 3)."""
    request = ApiVersionsRequest(version=3, client_software_name="zkcoord-test", client_software_version="1")
    answer = exchange(address, request, 3)
    response = ApiVersionsResponse.decode(answer[4:], version=3)  # after the correlation id (header v0)
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


def refused_fetch(address: str, topic_id, version: int) -> tuple[int, set]:
    """A Fetch of partition 0 at ``version``: the partition's error code, and
    the endpoints the answer names (KIP-951's NodeEndpoints, from version 16)."""
    Topic = FetchRequest.FetchTopic
    request = FetchRequest(
        replica_id=-1, replica_state=FetchRequest.ReplicaState(replica_id=-1, replica_epoch=-1), max_wait_ms=0,
        min_bytes=1, max_bytes=1024, isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=[],
        rack_id="", topics=[Topic(topic="", topic_id=topic_id, partitions=[Topic.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=1024)])])
    answer = exchange(address, request, version)
    response = FetchResponse.decode(answer[5:], version=version)  # after the correlation id and tags (header v1)
    endpoints = {f"{e.host}:{e.port}" for e in getattr(response, "node_endpoints", None) or ()}
    return response.responses[0].partitions[0].error_code, endpoints


def leader_ids(cluster) -> dict:
    """{(topic, partition): leader's node id} of a Metadata answer."""
    ids = {address: node for node, address in cluster.brokers.items()}
    return {tp: ids[address] for tp, address in cluster.leaders().items()}


def test_the_gateway_names_kafkas_leaders_at_its_relays_and_relays_produce_and_fetch(kafka, servers):
    topic = "gw-metadata"
    kafka.create_topic(topic, partitions=3, replication_factor=3)
    with BrokerConnection(gateway(servers), timeout_s=10) as at_gateway:
        wait_until(lambda: topic in at_gateway.cluster([topic]).topics, 30, message="the gateway to learn the topic")
        seen = at_gateway.cluster([topic])
        with pytest.raises(PartitionError) as refused:
            at_gateway.fetch(topic, 0, 0, max_wait_ms=100, partition_max_bytes=1024)
    with BrokerConnection(kafka.bootstrap.split(",")[0], timeout_s=10) as at_kafka:
        truth = at_kafka.cluster([topic])
    assert set(seen.brokers) == {1, 2, 3, GATEWAY_ID}
    assert seen.brokers[GATEWAY_ID] == gateway(servers)
    host = gateway(servers).rsplit(":", 1)[0]
    assert all(seen.brokers[n].rsplit(":", 1)[0] == host and seen.brokers[n] != truth.brokers[n] for n in (1, 2, 3))
    assert seen.topics[topic].topic_id == truth.topics[topic].topic_id
    assert leader_ids(seen) == leader_ids(truth)  # Kafka's brokers lead, each behind its relay
    assert refused.value.code == NOT_LEADER_OR_FOLLOWER  # the gateway's own listener leads nothing

    # Kafka's versions for what is relayed (OffsetForLeaderEpoch, which the
    # gateway itself does not speak), the gateway's for what it answers.
    kafkas, ours = offered_apis(truth.brokers[1]), offered_apis(gateway(servers))
    for at in (gateway(servers), seen.brokers[1]):
        offered = offered_apis(at)
        assert offered[OFFSET_FOR_LEADER_EPOCH] == kafkas[OFFSET_FOR_LEADER_EPOCH]
        assert offered[ApiVersionsRequest.API_KEY] == ours[ApiVersionsRequest.API_KEY] != kafkas[
            ApiVersionsRequest.API_KEY]

    # A relay lets no client speak a Fetch version whose refusals name Kafka's
    # brokers (KIP-951): a client would take Kafka's address for the node and
    # ask Kafka for its coordinator. Asked of a broker that does not hold the
    # partition, at the newest version the relay offers.
    lone = "gw-one-replica"
    kafka.create_topic(lone, partitions=1, replication_factor=1)
    wait_until(lambda: lone in servers_view(servers, lone).topics, 30, message="the gateway to learn the topic")
    lone_seen = servers_view(servers, lone)
    elsewhere = next(n for n in (1, 2, 3) if n != leader_ids(lone_seen)[(lone, 0)])
    relay, topic_id = seen.brokers[elsewhere], parse_kafka_uuid(lone_seen.topics[lone].topic_id)
    error, named = refused_fetch(relay, topic_id, offered_apis(relay)[FETCH][1])
    assert error == NOT_LEADER_OR_FOLLOWER and named <= set(lone_seen.brokers.values()), named

    # A producer bootstrapped at the gateway writes to Kafka's leaders through the relays, acks=all.
    producer = Producer({"bootstrap.servers": gateway(servers), "acks": "all", "log_level": 3})
    assert send_acknowledged(producer, topic, values("via-gateway", 3, 10)) == 30
    for (_, partition), leader in truth.leaders().items():
        with BrokerConnection(leader, timeout_s=10) as at_leader:
            assert at_leader.list_offset(topic, partition, -1) == 10
        with BrokerConnection(seen.leaders()[(topic, partition)], timeout_s=10) as at_relay:
            fetched = at_relay.fetch(topic, partition, 0, max_wait_ms=100, partition_max_bytes=1 << 20)
            assert fetched.high_watermark == 10


def test_stock_members_at_the_gateway_and_thin_consumers_read_kafka_exactly_once(kafka, servers):
    topic, group, partitions = "gw-orders", "gw-readers", 6
    kafka.create_topic(topic, partitions=partitions, replication_factor=3)
    produced = kafka.produce(topic, values("first", partitions, 20))
    members = [servers.add_consumer(group, topics=[topic])]
    members += [start(servers, group, topic) for start in STOCK_MEMBERS.values()]
    wait_until(whole(members, topic, partitions), SETTLE_S, message="the thin and the stock members assigned")

    # A partition's leader is killed: the relays' clients follow the leader Kafka elects.
    killed = kafka.leader_of(topic, 0)
    kafka.brokers[killed].kill()
    try:
        kafka.wait_for_leader(topic, 0, not_on={killed}, timeout=SETTLE_S)
        produced += kafka.produce(topic, values("leader-killed", partitions, 20))  # acks=all, two in sync
        wait_until(lambda: sum(deliveries(members).values()) >= produced, SETTLE_S,
                   message="the records produced without the killed leader delivered")
    finally:
        kafka.restart(killed)

    # A thin consumer joins, then each stock member leaves, records produced between.
    produced += kafka.produce(topic, values("second", partitions, 20))
    members.append(servers.add_consumer(group, topics=[topic]))
    wait_until(whole(members, topic, partitions), SETTLE_S, message="the second thin consumer assigned")
    for leaving in [m for m in members if m.stock]:
        produced += kafka.produce(topic, values(f"before-{leaving.name}-left", partitions, 20))
        wait_until(lambda: sum(deliveries(members).values()) >= produced, SETTLE_S,
                   message="the records so far delivered")
        assert leaving.terminate() == 0  # leaves the group cleanly
        left = [m for m in members if m.alive]
        wait_until(whole(left, topic, partitions), SETTLE_S, message=f"the group settled after {leaving.name} left")
    produced += kafka.produce(topic, values("last", partitions, 20))

    wait_until(lambda: sum(deliveries(members).values()) >= produced, SETTLE_S, message="every record delivered")
    counts = deliveries(members)
    per_partition = produced // partitions
    assert set(counts) == {(p, o) for p in range(partitions) for o in range(per_partition)}
    assert [key for key, n in counts.items() if n != 1] == []
    assert all(m.records() for m in members if m.stock)  # each stock member read from Kafka
    ends = {(topic, p): per_partition for p in range(partitions)}
    wait_until(lambda: read_offsets(servers.zk, group, ends) == ends, SETTLE_S,
               message="the group's offsets committed at Kafka's log ends")

    # Kafka never coordinated the group: its members only ever joined at the gateway.
    # (Asked until every broker answers: one may just have been restarted.)
    wait_until(lambda: group not in kafka_groups(kafka), SETTLE_S,
               message="Kafka to list its groups, ours not among them")

    # Kafka's admin API, bootstrapped at the gateway, finds the group there.
    admin = AdminClient({"bootstrap.servers": gateway(servers)})  # referenced until its future is done
    description = admin.describe_consumer_groups([group])[group].result(30)
    assert description.coordinator.id == GATEWAY_ID


def test_a_gateway_with_no_kafka_to_stand_beside_does_not_start(kafka, zk_ensemble):
    with fresh_chroot(zk_ensemble.connect_string, "gateway-alone") as (chroot, _client):
        runs = {  # at once: each is a process start, seconds on two busy cores
            "nothing": ("--id", "21", "--zookeeper", chroot, "--gateway"),
            "same id": ("--id", "2", "--zookeeper", chroot, "--gateway", "--kafka-bootstrap", kafka.bootstrap)}
        started = {name: subprocess.Popen(zkcoord_command("server", "--port", "0", "--broker-port", "0", *args),
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for name, args in runs.items()}
        ended = {name: (process.wait(timeout=60), process.communicate()[1]) for name, process in started.items()}
    assert ended["nothing"][0] == 1 and "no Kafka broker is to be seen" in ended["nothing"][1], ended["nothing"]
    assert ended["same id"][0] == 1 and "Kafka broker 2 has the gateway's node id" in ended["same id"][1], \
        ended["same id"]
