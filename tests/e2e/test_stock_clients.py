"""Stock Kafka clients as members of zkcoord groups, through the broker's
group APIs (broker/groups/): real servers, real ZooKeeper, real clients.

Each test checks what a user of that client sees (records, each once;
rebalances; committed offsets) and what the coordinator recorded (owners in
ZooKeeper, offsets in Kafka 0.8's layout).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer as KafkaConsumer, ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient
from kafka import ConsumerRebalanceListener, KafkaConsumer as PythonConsumer

from tests.e2e.checks import produce
from tests.e2e.conftest import SERVER_ARGS
from zkcoord.testing.waiting import wait_until
from zkcoord.zk.nodes import read_group_state, read_offsets, read_owners

TOPIC = "events"
PARTITIONS = 4


class ConfluentMember:
    """A confluent-kafka consumer in a group, polled on its own thread,
    keeping every value it delivered and every (re)assignment it saw."""

    def __init__(self, brokers: str, group: str, **settings):
        config = {"bootstrap.servers": brokers, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": True, "auto.commit.interval.ms": 200,
                  "topic.metadata.refresh.interval.ms": 1000, **settings}
        if config.get("group.protocol") != "consumer":  # KIP-848's are the broker's to set
            config = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500, **config}
        self.consumer = KafkaConsumer(config)
        self.values: list[str] = []
        self.assigned: set = set()
        self.errors: list = []
        self._stop = threading.Event()
        self.consumer.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_assign(self, consumer, partitions):
        self.assigned |= {(p.topic, p.partition) for p in partitions}

    def _on_revoke(self, consumer, partitions):
        self.assigned -= {(p.topic, p.partition) for p in partitions}

    def _run(self):
        while not self._stop.is_set():
            message = self.consumer.poll(0.1)
            if message is None:
                continue
            if message.error():
                self.errors.append(message.error())
                continue
            self.values.append(message.value().decode())

    def close(self):
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


# KIP-848's heartbeat interval and session timeout are the broker's to set: short, for quick tests.
KIP848_ARGS = ("--group-consumer-heartbeat-interval-ms", "500", "--group-consumer-session-timeout-ms", "6000")


@pytest.fixture
def group_cluster(cluster_factory):
    cluster = cluster_factory(1, server_args=SERVER_ARGS + KIP848_ARGS)
    cluster.create_topic(TOPIC, PARTITIONS)
    return cluster


class PythonMember(ConfluentMember):
    """The same with kafka-python's consumer."""

    def __init__(self, brokers: str, group: str, **settings):
        self.consumer = PythonConsumer(
            bootstrap_servers=brokers, group_id=group, auto_offset_reset="earliest", session_timeout_ms=6000,
            heartbeat_interval_ms=500, enable_auto_commit=True, auto_commit_interval_ms=200,
            metadata_max_age_ms=1000, **settings)
        self.values, self.assigned, self.errors = [], set(), []
        self._stop = threading.Event()
        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_assigned(self, partitions):
                member.assigned |= {(p.topic, p.partition) for p in partitions}

            def on_partitions_revoked(self, partitions):
                member.assigned -= {(p.topic, p.partition) for p in partitions}

        self.consumer.subscribe([TOPIC], listener=Listener())
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            for records in self.consumer.poll(timeout_ms=100).values():
                self.values.extend(r.value.decode() for r in records)


def _whole(zk, group, members, thin=(), *others) -> bool:
    """Every partition held by exactly one member, as ZooKeeper's owners say
    (``others``: the partitions of members followed by hand)."""
    owners = read_owners(zk, group)
    held = [tp for m in members for tp in m.assigned] + [tp for c in thin for tp in c.assignment()]
    held += [tp for partitions in others for tp in partitions]
    return len(owners) == PARTITIONS and sorted(held) == sorted(owners) and len(set(held)) == len(held)


def _exactly_once(values, count: int) -> None:
    delivered = Counter(values)
    assert [v for v, n in delivered.items() if n > 1] == []
    assert sorted(delivered) == sorted(f"m-{n}" for n in range(count))


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_confluent_consumers_share_a_group_and_deliver_each_record_once(group_cluster, strategy):
    cluster = group_cluster
    produce(cluster, TOPIC, 400, partitions=PARTITIONS)
    first = ConfluentMember(cluster.broker_list, "g", **{"partition.assignment.strategy": strategy})
    members = [first]
    try:
        wait_until(lambda: len(first.values) == 400 and _whole(cluster.zk, "g", members), timeout=30)
        second = ConfluentMember(cluster.broker_list, "g", **{"partition.assignment.strategy": strategy})
        members.append(second)
        wait_until(lambda: second.assigned and _whole(cluster.zk, "g", members), timeout=30)
        produce(cluster, TOPIC, 400, start=400, partitions=PARTITIONS)
        wait_until(lambda: len(first.values) + len(second.values) >= 800, timeout=30)
        time.sleep(0.5)  # any duplicate would arrive right behind
        _exactly_once(first.values + second.values, 800)
        assert not first.errors and not second.errors
        # The second leaves cleanly: the first takes everything over, from its commits.
        second.close()
        members.remove(second)
        wait_until(lambda: _whole(cluster.zk, "g", members) and len(first.assigned) == PARTITIONS, timeout=30)
        produce(cluster, TOPIC, 200, start=800, partitions=PARTITIONS)
        wait_until(lambda: len(first.values) + len(second.values) >= 1000, timeout=30)
        time.sleep(0.5)
        _exactly_once(first.values + second.values, 1000)
        wait_until(lambda: sum(read_offsets(cluster.zk, "g").values()) == 1000, timeout=15)
    finally:
        for member in members:
            member.close()


def test_a_kafka_python_consumer_joins_consumes_and_commits(group_cluster):
    cluster = group_cluster
    produce(cluster, TOPIC, 300, partitions=PARTITIONS)
    member = PythonMember(cluster.broker_list, "py")
    try:
        wait_until(lambda: len(member.values) >= 300 and _whole(cluster.zk, "py", [member]), timeout=30)
        wait_until(lambda: sum(read_offsets(cluster.zk, "py").values()) == 300, timeout=15)
        _exactly_once(member.values, 300)
    finally:
        member.close()


def test_a_mixed_group_of_thin_and_stock_members_rebalances_without_duplicates(group_cluster):
    cluster = group_cluster
    produce(cluster, TOPIC, 200, partitions=PARTITIONS)
    thin = cluster.add_consumer("mixed", topics=[TOPIC])
    wait_until(lambda: len(thin.records()) == 200, timeout=30)
    stock = ConfluentMember(cluster.broker_list, "mixed")
    python = PythonMember(cluster.broker_list, "mixed")
    members = [stock, python]
    try:
        wait_until(lambda: stock.assigned and python.assigned and _whole(cluster.zk, "mixed", members, [thin]),
                   timeout=30)
        produce(cluster, TOPIC, 200, start=200, partitions=PARTITIONS)

        def values():
            return [r["value"] for r in thin.records()] + stock.values + python.values

        wait_until(lambda: len(values()) >= 400, timeout=30)
        # The stock members leave one after the other; the thin one ends with everything.
        stock.close()
        members.remove(stock)
        wait_until(lambda: _whole(cluster.zk, "mixed", members, [thin]), timeout=30)
        produce(cluster, TOPIC, 200, start=400, partitions=PARTITIONS)
        wait_until(lambda: len(values()) >= 600, timeout=30)
        python.close()
        members.remove(python)
        wait_until(lambda: _whole(cluster.zk, "mixed", [], [thin]), timeout=30)
        produce(cluster, TOPIC, 200, start=600, partitions=PARTITIONS)
        wait_until(lambda: len(values()) >= 800, timeout=30)
        time.sleep(0.5)  # any duplicate would arrive right behind
        _exactly_once(values(), 800)
    finally:
        for member in members:
            member.close()


def test_an_admin_client_lists_and_describes_groups_and_their_offsets(group_cluster):
    cluster = group_cluster
    produce(cluster, TOPIC, 100, partitions=PARTITIONS)
    member = ConfluentMember(cluster.broker_list, "described", **{"client.id": "described-client"})
    admin = AdminClient({"bootstrap.servers": cluster.broker_list})
    try:
        wait_until(lambda: len(member.values) == 100 and _whole(cluster.zk, "described", [member]), timeout=30)
        wait_until(lambda: sum(read_offsets(cluster.zk, "described").values()) == 100, timeout=15)
        listed = admin.list_consumer_groups().result(timeout=10)
        assert "described" in {g.group_id for g in listed.valid}
        description = admin.describe_consumer_groups(["described"])["described"].result(timeout=10)
        assert str(description.state).endswith("STABLE")
        (described,) = description.members
        assert described.client_id == "described-client"
        assert {(p.topic, p.partition) for p in described.assignment.topic_partitions} == \
            {(TOPIC, p) for p in range(PARTITIONS)}
        request = ConsumerGroupTopicPartitions("described")
        offsets = admin.list_consumer_group_offsets([request])["described"].result(timeout=10)
        assert {(p.topic, p.partition): p.offset for p in offsets.topic_partitions} == \
            {tp: o for tp, o in read_offsets(cluster.zk, "described").items()}
        member.close()
        wait_until(lambda: str(admin.describe_consumer_groups(["described"])["described"].result(timeout=10)
                               .state).endswith("EMPTY"), timeout=20)
        missing = admin.describe_consumer_groups(["never-seen"])["never-seen"].result(timeout=10)
        assert str(missing.state).endswith("DEAD")
    finally:
        member.close()


def test_a_client_the_coordinator_refuses_is_told_why(group_cluster):
    cluster = group_cluster
    # The coordinator accepts session timeouts up to a minute.
    member = ConfluentMember(cluster.broker_list, "refused", **{"session.timeout.ms": 120000})
    try:
        wait_until(lambda: member.errors, timeout=30)
        assert "session timeout" in str(member.errors[0]).lower(), member.errors
        assert member.assigned == set()
    finally:
        member.close()


def test_an_aiokafka_consumer_shares_a_group_with_a_confluent_and_a_thin_one(group_cluster):
    from aiokafka import AIOKafkaConsumer

    cluster = group_cluster
    produce(cluster, TOPIC, 300, partitions=PARTITIONS)
    other = ConfluentMember(cluster.broker_list, "aio")
    # aiokafka assigns round robin by default, confluent-kafka range or round robin.
    thin = cluster.add_consumer("aio", topics=[TOPIC], extra=["--strategy", "roundrobin"])
    values: list[str] = []

    def thin_values():
        return [r["value"] for r in thin.records()]

    async def consume():
        consumer = AIOKafkaConsumer(TOPIC, bootstrap_servers=cluster.broker_list, group_id="aio",
                                    auto_offset_reset="earliest", session_timeout_ms=6000,
                                    heartbeat_interval_ms=500, auto_commit_interval_ms=200)
        await consumer.start()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (
                    len(values) + len(other.values) + len(thin_values()) < 300 or not consumer.assignment()
                    or not other.assigned or not thin.assignment() or not _whole(cluster.zk, "aio", [other], [thin], {(t.topic, t.partition)
                                                                       for t in consumer.assignment()})):
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    values.extend(r.value.decode() for r in records)
            return {(tp.topic, tp.partition) for tp in consumer.assignment()}
        finally:
            await consumer.stop()

    try:
        assignment = asyncio.run(consume())
        assert assignment and other.assigned and thin.assignment()
        assert _whole(cluster.zk, "aio", [other], [thin], assignment)
        _exactly_once(values + other.values + thin_values(), 300)
    finally:
        other.close()


def test_kcat_joins_a_group_commits_and_hands_over_to_a_thin_consumer(group_cluster, tmp_path):
    cluster = group_cluster
    produce(cluster, TOPIC, 200, partitions=PARTITIONS)
    output = tmp_path / "kcat.jsonl"
    with output.open("w") as out:
        kcat = subprocess.Popen(["kcat", "-b", cluster.broker_list, "-G", "kcat", "-X", "auto.offset.reset=earliest", "-J", "-u",
                                 "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
                                 "-X", "auto.commit.interval.ms=200", TOPIC],
                                stdout=out, stderr=subprocess.DEVNULL)
        try:
            def delivered():
                complete = output.read_text().split("\n")[:-1]  # the last may be half written
                return [json.loads(line)["payload"] for line in complete]

            wait_until(lambda: len(delivered()) >= 200, timeout=30)
            wait_until(lambda: sum(read_offsets(cluster.zk, "kcat").values()) == 200, timeout=15)
            _exactly_once(delivered(), 200)
            assert len(read_owners(cluster.zk, "kcat")) == PARTITIONS
            # A thin consumer joins: kcat hands it half, from its commits.
            thin = cluster.add_consumer("kcat", topics=[TOPIC])
            wait_until(lambda: len(thin.assignment()) == PARTITIONS // 2
                       and len(set(read_owners(cluster.zk, "kcat").values())) == 2, timeout=30)
            produce(cluster, TOPIC, 200, start=200, partitions=PARTITIONS)

            def values():
                return delivered() + [r["value"] for r in thin.records()]

            wait_until(lambda: len(values()) >= 400, timeout=30)
            time.sleep(0.5)  # any duplicate would arrive right behind
            _exactly_once(values(), 400)
        finally:
            kcat.terminate()
            kcat.wait(10)


def test_kip848_consumers_share_a_group_with_classic_and_thin_members(group_cluster):
    cluster = group_cluster
    produce(cluster, TOPIC, 200, partitions=PARTITIONS)
    first = ConfluentMember(cluster.broker_list, "next", **{"group.protocol": "consumer"})
    members = [first]
    thin = None
    try:
        wait_until(lambda: len(first.values) == 200 and _whole(cluster.zk, "next", members), timeout=30)
        second = ConfluentMember(cluster.broker_list, "next", **{"group.protocol": "consumer"})
        classic = ConfluentMember(cluster.broker_list, "next")
        members += [second, classic]
        thin = cluster.add_consumer("next", topics=[TOPIC])
        wait_until(lambda: all(m.assigned for m in members) and thin.assignment()
                   and _whole(cluster.zk, "next", members, [thin]), timeout=40)
        # Each registration said what its client is: the bridge, which group protocol each speaks.
        assert sorted(c.kind for c in read_group_state(cluster.zk, "next").clients.values()) == [
            "classic-eager", "consumer", "consumer", "thin"]
        produce(cluster, TOPIC, 200, start=200, partitions=PARTITIONS)

        def values():
            return [r["value"] for r in thin.records()] + [v for m in members for v in m.values]

        wait_until(lambda: len(values()) >= 400, timeout=30)
        first.close()
        members.remove(first)
        wait_until(lambda: _whole(cluster.zk, "next", members, [thin]), timeout=30)
        produce(cluster, TOPIC, 200, start=400, partitions=PARTITIONS)
        wait_until(lambda: len(values() + first.values) >= 600, timeout=30)
        time.sleep(0.5)  # any duplicate would arrive right behind
        _exactly_once(values() + first.values, 600)
        assert not any(m.errors for m in members + [first])
    finally:
        for member in members:
            member.close()


def test_a_stock_member_that_keeps_polling_outlives_its_max_poll_interval(group_cluster):
    """Its registration reports the client's requests as its polls: a client
    polling all along is never evicted for not polling."""
    from zkcoord.zk import layout

    cluster = group_cluster
    member = ConfluentMember(cluster.broker_list, "lasting", **{
        "session.timeout.ms": 2000, "heartbeat.interval.ms": 300, "max.poll.interval.ms": 3000})
    try:
        wait_until(lambda: _whole(cluster.zk, "lasting", [member]), timeout=30)

        def generation():
            return layout.decode_group_state(cluster.zk.get(layout.group_state_path("lasting"))[0]).generation

        first = generation()
        deadline = time.monotonic() + 9  # three max poll intervals
        while time.monotonic() < deadline:
            assert _whole(cluster.zk, "lasting", [member]) and generation() == first
            time.sleep(0.2)
    finally:
        member.close()


def test_a_stock_member_with_a_bad_broker_list_is_refused_at_once(tmp_path):
    result = subprocess.run([sys.executable, "-m", "zkcoord.cli", "consume", "--kafka-brokers", "nonsense",
                             "--group", "g", "--topic", "t", "--output", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert result.returncode == 2 and "'nonsense' is not host:port" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_zkcoord_consume_members_of_every_client_share_a_group_preferring_sticky(group_cluster):
    """`zkcoord consume` preferring sticky then range, as the drill runs it:
    the thin member, a confluent-kafka one (given cooperative-sticky) and a
    kafka-python one (eager only, given sticky) share a protocol, so each is
    served partitions; none is refused for want of a common strategy."""
    strategies = ("--strategy", "sticky", "--strategy", "range")
    members = [group_cluster.add_consumer("mixed", topics=[TOPIC], extra=strategies)]
    for client in ("confluent-kafka", "kafka-python"):
        members.append(group_cluster.add_consumer("mixed", topics=[TOPIC], kafka_brokers=group_cluster.broker_list,
                                                  extra=(*strategies, "--kafka-client", client)))
    wait_until(lambda: all(m.assignment() for m in members)
               and sorted(tp for m in members for tp in m.assignment()) == sorted(read_owners(group_cluster.zk,
                                                                                               "mixed")),
               timeout=60, message="every member holding partitions")
