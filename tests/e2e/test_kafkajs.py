"""KafkaJS (npm ``kafkajs``, as node/kafkajs-driver pins it) as a member of
zkcoord groups through the embedded broker's group APIs, beside thin
consumers, and as an admin client: real ZooKeeper, a real server, KafkaJS
itself in Node (zkcoord.testing.kafkajs).

KafkaJS offers its one assignor as RoundRobinAssigner, a name Kafka does
not use: zkcoord serves it as roundrobin (broker/groups/protocols.py); a
KafkaJS consumer with an assignor zkcoord does not know at all is served
too, and one sharing no protocol with the group's other stock members is
refused as Kafka refuses it, the error reaching its application.

Without Node.js or the pinned KafkaJS (``scripts/install.sh test``) every
test here fails, saying what to run.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterator

import pytest

from tests.e2e.checks import consumed, exactly_once, produce, whole
from tests.e2e.conftest import SERVER_ARGS
from zkcoord.testing import LocalCluster, cluster_in_chroot, kafkajs, wait_until
from zkcoord.testing.kafkajs import KafkaJsMembers, admin_call
from zkcoord.zk.nodes import read_group_state, read_offsets, read_owners

PARTITIONS = 4
SETTLE_S = 40


@pytest.fixture(scope="module")
def cluster(zk_ensemble, tmp_path_factory) -> Iterator[LocalCluster]:
    """One server with its broker for the module; each test its own topic and group."""
    # Node.js and the pinned KafkaJS, or a KafkaJsUnavailable saying what to run, before anything starts.
    kafkajs.node()
    kafkajs.modules()
    with cluster_in_chroot(zk_ensemble.connect_string, tmp_path_factory.mktemp("kafkajs"), "kafkajs",
                           server_args=SERVER_ARGS) as zkc:
        zkc.start_servers(1)
        yield zkc


@pytest.fixture
def kafkajs_members(cluster, tmp_path) -> Iterator:
    """Starts KafkaJS consumers in the test's directory; stops them when it ends."""
    started: list[KafkaJsMembers] = []

    def start(topic: str, group: str, members: int = 1, **settings) -> KafkaJsMembers:
        driver = KafkaJsMembers(tmp_path / f"kafkajs-{len(started)}", cluster.broker_list, group, [topic],
                                members=members, name=f"kafkajs {len(started)}", **settings)
        started.append(driver)
        return driver.start()

    yield start
    for driver in started:
        driver.stop()


def served_protocols(drivers) -> set[str]:
    """The protocol names KafkaJS's members were answered with at their joins."""
    return {e["protocol"] for d in drivers for e in d.events("assigned")}


def test_kafkajs_consumers_share_a_group_with_a_thin_consumer_exactly_once(cluster, kafkajs_members):
    """Two KafkaJS members, then a thin one (round robin, as KafkaJS
    assigns); a KafkaJS member leaves cleanly, another KafkaJS consumer
    joins: each record once, all committed, no error in KafkaJS."""
    topic = group = "kafkajs-shared"
    cluster.create_topic(topic, PARTITIONS)
    produce(cluster, topic, 200, partitions=PARTITIONS)
    drivers = [kafkajs_members(topic, group, members=2)]
    processes = []
    wait_until(lambda: whole(cluster, group, PARTITIONS, drivers, processes, every_member=True), timeout=SETTLE_S,
               message="the KafkaJS members whole")
    # The thin one prefers sticky: the group is on roundrobin only because KafkaJS is served as round robin.
    processes.append(cluster.add_consumer(group, topics=[topic], extra=("--strategy", "sticky",
                                                                         "--strategy", "roundrobin")))
    wait_until(lambda: whole(cluster, group, PARTITIONS, drivers, processes, every_member=True), timeout=SETTLE_S,
               message="two KafkaJS members and a thin one whole")
    assert read_group_state(cluster.zk, group).strategy == "roundrobin"
    produce(cluster, topic, 200, start=200, partitions=PARTITIONS)
    wait_until(lambda: sum(consumed(drivers, processes).values()) >= 400, timeout=30, message="400 consumed")
    drivers[0].close_member(1)
    wait_until(lambda: whole(cluster, group, PARTITIONS, drivers, processes), timeout=SETTLE_S,
               message="whole without KafkaJS member 1")
    produce(cluster, topic, 200, start=400, partitions=PARTITIONS)
    wait_until(lambda: sum(consumed(drivers, processes).values()) >= 600, timeout=30, message="600 consumed")
    drivers.append(kafkajs_members(topic, group))
    wait_until(lambda: whole(cluster, group, PARTITIONS, drivers, processes, every_member=True), timeout=SETTLE_S,
               message="whole with the new KafkaJS member")
    produce(cluster, topic, 200, start=600, partitions=PARTITIONS)
    exactly_once(cluster, topic, group, PARTITIONS, drivers, processes, 800)
    assert [e for d in drivers for e in d.errors()] == []
    assert served_protocols(drivers) == {"RoundRobinAssigner"}  # the name it offered, which it looks its assignor up by


def test_kafkajs_admin_lists_describes_and_fetches_the_offsets_of_a_group(cluster, kafkajs_members):
    topic = group = "kafkajs-admin"
    cluster.create_topic(topic, PARTITIONS)
    produce(cluster, topic, 100, partitions=PARTITIONS)
    member = kafkajs_members(topic, group, client_id="described")
    thin = cluster.add_consumer(group, topics=[topic], extra=("--strategy", "roundrobin"))
    wait_until(lambda: whole(cluster, group, PARTITIONS, [member], [thin], every_member=True)
               and sum(read_offsets(cluster.zk, group).values()) == 100, timeout=SETTLE_S,
               message="the group whole with everything committed")
    brokers = cluster.broker_list

    listed = {g["groupId"]: g for g in admin_call(brokers, "listGroups")["groups"]}
    assert listed[group]["protocolType"] == "consumer"

    (described,) = admin_call(brokers, "describeGroups", [group])["groups"]
    assert (described["groupId"], described["state"], described["protocolType"], described["errorCode"]) == \
        (group, "Stable", "consumer", 0)
    owners = read_owners(cluster.zk, group)
    assert sorted(m["memberId"] for m in described["members"]) == sorted(set(owners.values()))
    assigned = {(topic, p): m["memberId"] for m in described["members"]
                for t, partitions in m["assignment"]["assignment"].items() for p in partitions if t == topic}
    assert assigned == owners  # every member's assignment as KafkaJS decodes it, as the coordinator recorded it
    (js,) = [m for m in described["members"] if m["clientId"] == "described-0"]
    assert js["subscription"]["topics"] == [topic] and js["clientHost"] == "/127.0.0.1"
    assert member.assignment(0) == {tp for tp, owner in owners.items() if owner == js["memberId"]}

    (fetched,) = admin_call(brokers, "fetchOffsets", {"groupId": group, "topics": [topic]})
    assert fetched["topic"] == topic
    assert {(topic, p["partition"]): int(p["offset"]) for p in fetched["partitions"]} == read_offsets(cluster.zk, group)

    (missing,) = admin_call(brokers, "describeGroups", ["never-seen"])["groups"]
    assert missing["state"] == "Dead" and missing["members"] == []


def test_a_kafkajs_assignor_zkcoord_does_not_know_is_served_and_kafkas_rule_on_shared_protocols_kept(
        cluster, kafkajs_members):
    """A KafkaJS consumer offering only an assignor named as nothing
    zkcoord knows joins beside a thin one (range) and consumes each record
    once; the broker says once how it serves it. Another KafkaJS consumer
    whose assignor shares no name with it is refused with
    INCONSISTENT_GROUP_PROTOCOL, which reaches its application, while the
    group goes on."""
    topic = group = "kafkajs-custom"
    cluster.create_topic(topic, PARTITIONS)
    produce(cluster, topic, 200, partitions=PARTITIONS)
    custom = kafkajs_members(topic, group, assigner="ZkcoordTestAssigner")
    thin = cluster.add_consumer(group, topics=[topic])
    wait_until(lambda: whole(cluster, group, PARTITIONS, [custom], [thin], every_member=True), timeout=SETTLE_S,
               message="the KafkaJS member with its own assignor and a thin one whole")
    assert read_group_state(cluster.zk, group).strategy == "range"  # the thin member's: the group agrees on it
    exactly_once(cluster, topic, group, PARTITIONS, [custom], [thin], 200)
    assert served_protocols([custom]) == {"ZkcoordTestAssigner"}

    other = kafkajs_members(topic, group, assigner="OtherAssigner")
    errors = other.wait_for(lambda: other.errors(0), 30, "the refused member's error")
    assert errors[0]["type"] == "INCONSISTENT_GROUP_PROTOCOL", errors
    assert other.assignment(0) == frozenset() and custom.errors() == []
    produce(cluster, topic, 200, start=200, partitions=PARTITIONS)
    exactly_once(cluster, topic, group, PARTITIONS, [custom, other], [thin], 400)

    server_log = next(iter(cluster.servers.values())).log_path.read_text(errors="replace")
    said = re.findall(r"group kafkajs-custom: member (\S+) \(client 'kafkajs-custom-0'\): none of its assignors is "
                      r"one zkcoord knows; it is served as an eager client under 'ZkcoordTestAssigner'", server_log)
    assert said and set(Counter(said).values()) == {1}, said  # once per member
