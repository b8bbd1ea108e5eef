"""The reference Java client (Kafka 4's ``KafkaConsumer``) as a member of
zkcoord groups, through the embedded broker's group APIs: classic eager
(range), cooperative-sticky, static membership and KIP-848's consumer
protocol, beside thin consumers and a librdkafka member. Real ZooKeeper,
real servers, Kafka's own client (zkcoord.testing.java_members).

Each scenario checks each record's offset was consumed exactly once across
joins and clean leaves, and that the offsets committed end at the log's end;
a member the group refuses sees an exception in its application.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.e2e.checks import consumed, exactly_once, whole
from tests.e2e.conftest import SERVER_ARGS
from zkcoord.testing import LocalCluster, fresh_chroot, wait_until
from zkcoord.testing.java_members import JavaMembers
from zkcoord.zk.nodes import read_owners

PARTITIONS = 4
# KIP-848's heartbeat interval and session timeout are the broker's to set: short, for quick tests.
SERVER = (*SERVER_ARGS, "--group-consumer-heartbeat-interval-ms", "500", "--group-consumer-session-timeout-ms", "6000")
CLASSIC = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}


@pytest.fixture(scope="module")
def cluster(zk_ensemble, tmp_path_factory) -> Iterator[LocalCluster]:
    """One server with its broker for the module; each test its own topic and group."""
    with fresh_chroot(zk_ensemble.connect_string, "java") as (connect, _client), \
            LocalCluster(connect, tmp_path_factory.mktemp("java-client"), SERVER) as zkc:
        zkc.start_servers(1)
        yield zkc


@pytest.fixture
def java(cluster, tmp_path) -> Iterator:
    """Starts Java members in the test's directory; stops them when it ends."""
    started: list[JavaMembers] = []

    def start(topic: str, group: str, members: int = 1, instance_id_prefix=None, wait=True,
              **properties) -> JavaMembers:
        driver = JavaMembers(tmp_path / f"java-{len(started)}", [topic], {
            "bootstrap.servers": cluster.broker_list, "group.id": group, "auto.offset.reset": "earliest",
            **properties}, members=members, instance_id_prefix=instance_id_prefix)
        started.append(driver)
        return driver.start(wait=wait)

    yield start
    for driver in started:
        driver.stop()


def produce(cluster: LocalCluster, topic: str, count: int, start: int = 0) -> None:
    cluster.produce(topic, ((n % PARTITIONS, None, f"m-{n}".encode()) for n in range(start, start + count)))


RANGE = "org.apache.kafka.clients.consumer.RangeAssignor"
COOPERATIVE = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"


KIP848 = {"group.protocol": "consumer"}  # its heartbeat and session are the broker's to set


@pytest.mark.parametrize("java_settings,strategy", [
    ({**CLASSIC, "partition.assignment.strategy": RANGE}, "range"),
    ({**CLASSIC, "partition.assignment.strategy": COOPERATIVE}, "sticky"),
    (KIP848, "sticky"),
], ids=["eager-range", "cooperative-sticky", "kip848"])
def test_java_consumers_share_a_group_with_thin_and_librdkafka_members(cluster, java, java_settings, strategy):
    """Two Java members, then a thin and a librdkafka one join; a Java member
    and the librdkafka one leave cleanly: each record once, all committed."""
    topic = group = f"shared-{strategy}-{java_settings.get('group.protocol', 'classic')}"
    cluster.create_topic(topic, PARTITIONS)
    produce(cluster, topic, 200)
    drivers = [java(topic, group, members=2, **java_settings)]
    processes = []
    wait_until(lambda: whole(cluster, group, PARTITIONS, drivers, processes), timeout=30,
               message="the Java members whole")
    processes.append(cluster.add_consumer(group, topics=[topic], extra=("--strategy", strategy)))
    processes.append(cluster.add_consumer(group, topics=[topic], kafka_brokers=cluster.broker_list,
                                          extra=("--strategy", strategy)))
    wait_until(lambda: whole(cluster, group, PARTITIONS, drivers, processes, every_member=True),
               timeout=40, message="four members, a partition each")
    produce(cluster, topic, 200, start=200)
    wait_until(lambda: sum(consumed(drivers, processes).values()) >= 400, timeout=30)
    drivers[0].close_member(1)
    wait_until(lambda: whole(cluster, group, PARTITIONS, drivers, processes), timeout=30,
               message="whole without Java member 1")
    produce(cluster, topic, 200, start=400)
    wait_until(lambda: sum(consumed(drivers, processes).values()) >= 600, timeout=30)
    processes[1].terminate()
    wait_until(lambda: whole(cluster, group, PARTITIONS, drivers, processes), timeout=30,
               message="whole without librdkafka")
    produce(cluster, topic, 200, start=600)
    exactly_once(cluster, topic, group, PARTITIONS, drivers, processes, 800)
    assert drivers[0].errors() == []


# Long enough for a JVM to start again on a busy machine.
STATIC_SESSION_S = 20


def test_static_java_members_come_back_to_their_partitions(cluster, java):
    """Static members (group.instance.id) crash and come back within their
    session: the group is whole again, each record consumed once."""
    topic = group = "static"
    cluster.create_topic(topic, PARTITIONS)
    produce(cluster, topic, 200)
    settings = {**CLASSIC, "session.timeout.ms": STATIC_SESSION_S * 1000, "partition.assignment.strategy": RANGE}
    first = java(topic, group, members=2, instance_id_prefix="pod", **settings)
    thin = cluster.add_consumer(group, topics=[topic])
    wait_until(lambda: thin.assignment() and whole(cluster, group, PARTITIONS, [first], [thin], every_member=True),
               timeout=40, message="two static members and a thin one whole")
    owners = read_owners(cluster.zk, group)
    assert {"pod-0", "pod-1"} <= set(owners.values()), owners
    exactly_once(cluster, topic, group, PARTITIONS, [first], [thin], 200)
    first.kill()
    second = java(topic, group, members=2, instance_id_prefix="pod", **settings)
    # Each instance gets back what it held, and nobody else was given it meanwhile. (Once the
    # old process's lease has ended: the coordinator cannot tell it from a live one.)
    wait_until(lambda: whole(cluster, group, PARTITIONS, [second], [thin], every_member=True),
               timeout=STATIC_SESSION_S + 20, message="whole again")
    assert read_owners(cluster.zk, group) == owners
    assert thin.assignment() == {tp for tp, owner in owners.items() if owner not in ("pod-0", "pod-1")}
    produce(cluster, topic, 200, start=200)
    exactly_once(cluster, topic, group, PARTITIONS, [first, second], [thin], 400)
    assert second.errors() == []


def test_java_consumers_the_group_refuses_see_why_in_their_application(cluster, java):
    """A group id the coordinator cannot take, under either protocol, a
    session timeout out of its bounds, a server assignor it does not have:
    KafkaConsumer.poll throws the error Kafka's own coordinator would give,
    instead of waiting in silence (or being assigned some other way)."""
    cluster.create_topic("refused", PARTITIONS)
    refused = {
        "org.apache.kafka.common.errors.InvalidGroupIdException": [
            java("refused", "coordinator", wait=False, **CLASSIC), java("refused", "coordinator", wait=False, **KIP848)],
        "org.apache.kafka.common.errors.InvalidSessionTimeoutException": [
            java("refused", "too-long", wait=False, **{**CLASSIC, "session.timeout.ms": 120000})],
        "org.apache.kafka.common.errors.UnsupportedAssignorException": [
            java("refused", "fancy", wait=False, **KIP848, **{"group.remote.assignor": "fancy"})],
    }  # started together: a JVM takes a while to start on a busy machine
    for expected, drivers in refused.items():
        for driver in drivers:
            errors = driver.wait_for(lambda: driver.errors(0), 60, "an error")
            assert errors[0]["phase"] == "poll" and errors[0]["class"] == expected, errors
            assert driver.assignment(0) == frozenset()
