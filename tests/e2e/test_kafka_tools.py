"""Apache Kafka's own command-line tools (Kafka 4's, from the jars
``scripts/install.sh kafka`` caches) against zkcoord's embedded broker:
kafka-consumer-groups, kafka-topics, kafka-configs and
kafka-console-consumer --group, each run as a user runs it, its printed
tables read back and checked against what zkcoord keeps in ZooKeeper.

One cluster (real ZooKeeper, one zkcoord server with its broker) serves the
module; every JVM costs a second or two, so each test runs few.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.e2e.checks import produce
from tests.e2e.conftest import SERVER_ARGS
from zkcoord import settings
from zkcoord.admin import topics as topic_admin
from zkcoord.admin.groups import group_state
from zkcoord.broker.config import LogConfig
from zkcoord.testing import LocalCluster, fresh_chroot, wait_until
from zkcoord.testing import kafka_tools
from zkcoord.testing.kafka_tools import (
    CONFIGS, CONSOLE_CONSUMER, CONSUMER_GROUPS, TOPICS, parse_fields, parse_table, run_tool, start_tool,
)
from zkcoord.zk import layout
from zkcoord.zk.nodes import read_group_state, read_offsets, read_owners

PARTITIONS = 4
PER_PARTITION = 25  # records produced round robin: partition p holds m-p, m-(p+4), ...


@pytest.fixture(scope="module")
def cluster(zk_ensemble, tmp_path_factory):
    kafka_tools.runtime()  # Java and the jars, or a KafkaNotInstalled saying what to run, before anything starts
    with fresh_chroot(zk_ensemble.connect_string, "tools") as (connect, _zk):
        with LocalCluster(connect, tmp_path_factory.mktemp("kafka-tools"), SERVER_ARGS) as cluster:
            cluster.start_servers(1)
            yield cluster


def tool(cluster: LocalCluster, tool_class: str, *args: str, check: bool = True):
    return run_tool(tool_class, ["--bootstrap-server", cluster.broker_list, *args], check=check)


def rows_of(run) -> list[dict[str, str]]:
    return parse_table(run.stdout)


def records_of(partition: int, start: int) -> set[str]:
    """The values partition ``partition`` holds from offset ``start`` on."""
    return {f"m-{partition + PARTITIONS * k}" for k in range(start, PER_PARTITION)}


def test_consumer_groups_describes_a_live_group_and_refuses_to_move_its_offsets(cluster):
    cluster.create_topic("tools", PARTITIONS)
    produce(cluster, "tools", PARTITIONS * PER_PARTITION, partitions=PARTITIONS)
    thin = cluster.add_consumer("g-tools", topics=["tools"])
    wait_until(lambda: sum(read_offsets(cluster.zk, "g-tools").values()) == PARTITIONS * PER_PARTITION, timeout=30,
               message="the thin consumer's offsets committed")
    state = read_group_state(cluster.zk, "g-tools")
    (member,) = state.assignment
    committed = read_offsets(cluster.zk, "g-tools")

    listed = {row["GROUP"]: row for row in rows_of(tool(cluster, CONSUMER_GROUPS, "--list", "--state"))}
    assert listed["g-tools"]["STATE"] == group_state(cluster.zk, "g-tools")[0] == "Stable"

    offsets = rows_of(tool(cluster, CONSUMER_GROUPS, "--describe", "--group", "g-tools"))
    assert {(row["TOPIC"], int(row["PARTITION"])) for row in offsets} == set(committed)
    for row in offsets:
        current, end = int(row["CURRENT-OFFSET"]), int(row["LOG-END-OFFSET"])
        assert current == committed[(row["TOPIC"], int(row["PARTITION"]))]
        assert end == PER_PARTITION and int(row["LAG"]) == end - current
        assert row["CONSUMER-ID"] == member and row["HOST"] == "/127.0.0.1"

    (members,) = rows_of(tool(cluster, CONSUMER_GROUPS, "--describe", "--group", "g-tools", "--members",
                              "--verbose"))
    assert members["CONSUMER-ID"] == member and int(members["#PARTITIONS"]) == PARTITIONS
    assert members["CURRENT-ASSIGNMENT"] == "tools:" + ",".join(str(p) for p in range(PARTITIONS))

    (described,) = rows_of(tool(cluster, CONSUMER_GROUPS, "--describe", "--group", "g-tools", "--state"))
    assert described["STATE"] == "Stable" and int(described["#MEMBERS"]) == 1
    assert described["ASSIGNMENT-STRATEGY"] == state.strategy
    assert described["COORDINATOR (ID)"].endswith(f"({next(iter(cluster.servers))})")

    # A live group's offsets are not moved: the tool checks the state first,
    # and a commit from outside the group is refused by its coordinator.
    reset = tool(cluster, CONSUMER_GROUPS, "--reset-offsets", "--group", "g-tools", "--topic", "tools",
                 "--to-earliest", "--execute")
    assert "Assignments can only be reset if the group 'g-tools' is inactive, but the current state is Stable." \
        in reset.output
    admin = AdminClient({"bootstrap.servers": cluster.broker_list})
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("g-tools", [
        TopicPartition("tools", 0, 0)])])["g-tools"]
    try:  # librdkafka says a partition's error in the answer, or fails the whole of it
        refusals = [str(tp.error) for tp in altered.result(timeout=30).topic_partitions]
    except KafkaException as exc:
        refusals = [str(exc)]
    assert len(refusals) == 1 and "UNKNOWN_MEMBER_ID" in refusals[0]
    deleted = tool(cluster, CONSUMER_GROUPS, "--delete-offsets", "--group", "g-tools", "--topic", "tools")
    statuses = {int(row["PARTITION"]): row["STATUS"] for row in rows_of(deleted)}
    assert sorted(statuses) == list(range(PARTITIONS))
    assert all("GroupSubscribedToTopicException" in status for status in statuses.values())
    assert read_offsets(cluster.zk, "g-tools") == committed

    # Empty now: reset through the coordinator, and a new member starts from there.
    thin.terminate()
    wait_until(lambda: group_state(cluster.zk, "g-tools")[0] == "Empty", timeout=30, message="the group empty")
    planned = rows_of(tool(cluster, CONSUMER_GROUPS, "--reset-offsets", "--group", "g-tools", "--topic", "tools",
                           "--to-offset", "10", "--execute"))
    assert {(row["TOPIC"], int(row["PARTITION"])): int(row["NEW-OFFSET"]) for row in planned} == \
        {("tools", p): 10 for p in range(PARTITIONS)} == read_offsets(cluster.zk, "g-tools")
    (shifted,) = rows_of(tool(cluster, CONSUMER_GROUPS, "--reset-offsets", "--group", "g-tools", "--topic",
                              "tools:0", "--shift-by", "-3", "--execute"))
    assert int(shifted["NEW-OFFSET"]) == 7 == read_offsets(cluster.zk, "g-tools")[("tools", 0)]
    reset_to = read_offsets(cluster.zk, "g-tools")
    assert reset_to == {**{("tools", p): 10 for p in range(PARTITIONS)}, ("tools", 0): 7}

    # Deleting a committed offset is refused (the coordinator resets offsets, it deletes none).
    deleted = tool(cluster, CONSUMER_GROUPS, "--delete-offsets", "--group", "g-tools", "--topic", "tools")
    assert all("PolicyViolationException" in row["STATUS"] for row in rows_of(deleted))
    assert read_offsets(cluster.zk, "g-tools") == reset_to

    successor = cluster.add_consumer("g-tools", topics=["tools"])
    expected = set().union(*(records_of(p, reset_to[("tools", p)]) for p in range(PARTITIONS)))
    wait_until(lambda: len(successor.records()) >= len(expected), timeout=30, message="the successor's records")
    delivered = Counter(r["value"] for r in successor.records())
    assert set(delivered) == expected and max(delivered.values()) == 1


def test_topics_creates_grows_describes_and_lists_topics(cluster):
    # (CreateTopics' refusals are tests/broker/test_admin_apis.py's; one of CreatePartitions' here.)
    created = tool(cluster, TOPICS, "--create", "--topic", "made", "--partitions", "3", "--replication-factor", "1")
    assert "Created topic made." in created.stdout
    assert len(topic_admin.read_topic(cluster.zk, "made")[0].partitions) == 3

    tool(cluster, TOPICS, "--alter", "--topic", "made", "--partitions", "5")
    assert len(topic_admin.read_topic(cluster.zk, "made")[0].partitions) == 5
    shrink = tool(cluster, TOPICS, "--alter", "--topic", "made", "--partitions", "2", check=False)
    assert shrink.returncode != 0 and "must be larger" in shrink.output
    assignment = topic_admin.read_topic(cluster.zk, "made")[0]
    assert len(assignment.partitions) == 5

    lines = [parse_fields(line) for line in tool(cluster, TOPICS, "--describe", "--topic", "made").stdout.splitlines()
             if line.strip()]
    head, partitions = lines[0], lines[1:]
    assert head["Topic"] == "made" and int(head["PartitionCount"]) == 5 and head["ReplicationFactor"] == "1"
    assert head["TopicId"] == assignment.topic_id
    wait_until(lambda: all(cluster.zk.exists(layout.partition_state_path("made", p)) for p in range(5)), timeout=20,
               message="the new partitions led")
    for row in partitions:
        leader = layout.decode_partition_state(
            cluster.zk.get(layout.partition_state_path("made", int(row["Partition"])))[0]).leader
        assert int(row["Leader"]) == leader and row["Replicas"] == row["Isr"] == str(leader)
    assert sorted(int(row["Partition"]) for row in partitions) == list(range(5))

    listed = set(tool(cluster, TOPICS, "--list").stdout.split())
    assert listed == set(topic_admin.list_topics(cluster.zk)) and "made" in listed


def _configs(run) -> dict[str, tuple[str, str]]:
    """kafka-configs --describe --all: {name: (value, synonyms)}."""
    found = {}
    for line in run.stdout.splitlines():
        match = re.match(r"\s+([\w.]+)=(\S*) sensitive=\w+ synonyms=\{(.*)\}$", line)
        if match:
            found[match[1]] = (match[2], match[3])
    return found


def test_configs_describes_the_brokers_settings_and_refuses_changes(cluster):
    if "made" not in topic_admin.list_topics(cluster.zk):
        cluster.create_topic("made", 1)
    topic = _configs(tool(cluster, CONFIGS, "--describe", "--all", "--entity-type", "topics", "--entity-name",
                          "made"))
    broker = _configs(tool(cluster, CONFIGS, "--describe", "--all", "--entity-type", "brokers", "--entity-name",
                           str(next(iter(cluster.servers)))))
    segment_bytes = str(settings.default(LogConfig, "segment_bytes"))
    # A topic's configs are the broker's settings under their topic names.
    assert topic["segment.bytes"] == (segment_bytes, f"DEFAULT_CONFIG:log.segment.bytes={segment_bytes}")
    assert broker["log.segment.bytes"][0] == segment_bytes
    assert broker["broker.id"][0] == str(next(iter(cluster.servers)))
    assert topic["retention.ms"][0] == broker["log.retention.ms"][0]

    altered = tool(cluster, CONFIGS, "--alter", "--entity-type", "topics", "--entity-name", "made", "--add-config",
                   "retention.ms=1000", check=False)
    assert altered.returncode != 0
    assert "InvalidConfigurationException: retention.ms: configs are the settings this broker was started with" \
        in altered.output


def test_a_console_consumer_in_a_group_beside_a_thin_consumer_delivers_each_record_once(cluster, tmp_path):
    cluster.create_topic("console", PARTITIONS)
    produce(cluster, "console", 200, partitions=PARTITIONS)
    thin = cluster.add_consumer("g-console", topics=["console"])
    wait_until(lambda: sum(read_offsets(cluster.zk, "g-console").values()) == 200, timeout=30,
               message="the thin consumer's first 200 committed")
    console = start_tool("console-consumer", tmp_path, CONSOLE_CONSUMER, [
        "--bootstrap-server", cluster.broker_list, "--topic", "console", "--group", "g-console",
        "--consumer-property", "auto.offset.reset=earliest", "--consumer-property", "session.timeout.ms=6000",
        "--consumer-property", "heartbeat.interval.ms=500"])

    def printed() -> list[str]:
        return [line for line in console.log_path.read_text().splitlines() if re.fullmatch(r"m-\d+", line)]

    def values() -> list[str]:
        return [r["value"] for r in thin.records()] + printed()

    def owners() -> set[str]:
        owned = read_owners(cluster.zk, "g-console")
        return set(owned.values()) if len(owned) == PARTITIONS else set()

    try:
        wait_until(lambda: len(owners()) == 2 and 0 < len(thin.assignment()) < PARTITIONS, timeout=60,
                   message="the console consumer to share the group")
        # kafka-consumer-groups sees both members as the coordinator recorded them.
        members = rows_of(tool(cluster, CONSUMER_GROUPS, "--describe", "--group", "g-console", "--members"))
        assert {row["CONSUMER-ID"] for row in members} == set(read_group_state(cluster.zk, "g-console").assignment)
        assert sum(int(row["#PARTITIONS"]) for row in members) == PARTITIONS
        assert "console-consumer" in {row["CLIENT-ID"] for row in members}
        produce(cluster, "console", 200, start=200, partitions=PARTITIONS)
        wait_until(lambda: len(values()) >= 400, timeout=30, message="400 records delivered")
        assert printed(), "the console consumer delivered none of its partitions' records"
    finally:
        console.terminate()  # Kafka's shutdown hook: it commits what it printed and leaves
    wait_until(lambda: len(thin.assignment()) == PARTITIONS and len(owners()) == 1, timeout=30,
               message="the thin consumer to hold every partition again")
    produce(cluster, "console", 200, start=400, partitions=PARTITIONS)
    wait_until(lambda: sum(read_offsets(cluster.zk, "g-console").values()) == 600, timeout=30,
               message="all 600 committed")
    delivered = Counter(values())
    assert [value for value, times in delivered.items() if times > 1] == []
    assert set(delivered) == {f"m-{n}" for n in range(600)}
