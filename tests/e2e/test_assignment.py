"""Seed 001 end to end: assignment, membership changes and topic changes, on real processes."""

from __future__ import annotations

from zkcoord.admin.topics import add_partitions, create_topic
from tests.e2e.checks import delivered_values, group_is_whole, produce, wait_whole
from zkcoord.testing import partitions_of, wait_until

# A rebalance settles within this bound after the change is detected; the
# session timeout (4 s in these tests) adds to it for a crash.
SETTLE_S = 20


def test_ten_consumers_two_topics_every_partition_owned_once(cluster, zk):
    create_topic(zk, "a", 12)
    create_topic(zk, "b", 12)
    consumers = [cluster.add_consumer("g", topics=["a", "b"]) for _ in range(10)]
    partitions = partitions_of(zk, ["a", "b"])
    # Range over 10 members sorted by id, per topic: the first two get 2 of
    # each topic, the other eight 1 of each.
    wait_until(lambda: group_is_whole(zk, "g", consumers, partitions)
               and sorted(len(c.assignment()) for c in consumers) == [2] * 8 + [4] * 2,
               timeout=SETTLE_S, message="every member holding its range")


def test_join_clean_leave_and_crash_each_settle(cluster, zk):
    create_topic(zk, "t", 6)
    partitions = partitions_of(zk, ["t"])
    consumers = [cluster.add_consumer("g", topics=["t"]) for _ in range(2)]
    wait_whole(zk, "g", consumers, partitions, timeout=SETTLE_S)

    consumers.append(cluster.add_consumer("g", topics=["t"]))  # join
    wait_until(lambda: consumers[-1].assignment(), timeout=SETTLE_S, message="the newcomer gets partitions")
    wait_whole(zk, "g", consumers, partitions, timeout=SETTLE_S)

    consumers[0].terminate()  # clean leave
    wait_whole(zk, "g", consumers, partitions, timeout=SETTLE_S)
    assert len(zk.get_children("/consumers/g/owners/t")) == 6

    consumers[1].kill()  # crash: the connection closes with the process
    wait_whole(zk, "g", consumers, partitions, timeout=SETTLE_S)
    assert consumers[2].assignment() == partitions


def test_a_new_topic_matching_a_wildcard_is_picked_up(cluster, zk):
    create_topic(zk, "w-1", 2)
    consumers = [cluster.add_consumer("wild", pattern=r"w-.*") for _ in range(2)]
    wait_whole(zk, "wild", consumers, partitions_of(zk, ["w-1"]), timeout=SETTLE_S)
    create_topic(zk, "w-2", 4)
    create_topic(zk, "other", 3)  # does not match: nobody takes it
    wait_whole(zk, "wild", consumers, partitions_of(zk, ["w-1", "w-2"]), timeout=SETTLE_S)


def test_partitions_added_to_a_topic_are_assigned(cluster, zk):
    create_topic(zk, "grow", 2)
    consumers = [cluster.add_consumer("g", topics=["grow"]) for _ in range(3)]
    wait_whole(zk, "g", consumers, partitions_of(zk, ["grow"]), timeout=SETTLE_S)
    add_partitions(zk, "grow", 5)
    wait_whole(zk, "g", consumers, {("grow", p) for p in range(5)}, timeout=SETTLE_S)


def test_every_produced_message_is_delivered_once_through_the_group(cluster, zk):
    create_topic(zk, "data", 4)
    consumers = [cluster.add_consumer("g", topics=["data"]) for _ in range(3)]
    wait_whole(zk, "g", consumers, partitions_of(zk, ["data"]), timeout=SETTLE_S)
    produce(cluster, "data", 2000)
    wait_until(lambda: len(delivered_values(consumers)) >= 2000, timeout=30, message="2000 deliveries")
    values = delivered_values(consumers)
    assert sorted(values) == sorted(f"m-{n}" for n in range(2000))


def test_groups_describe_shows_members_offsets_and_lag(cluster, zk, zk_connect):
    import subprocess
    import sys

    create_topic(zk, "lagged", 2)
    consumers = [cluster.add_consumer("g", topics=["lagged"])]
    wait_whole(zk, "g", consumers, partitions_of(zk, ["lagged"]), timeout=SETTLE_S)
    produce(cluster, "lagged", 100, partitions=2)
    wait_until(lambda: len(delivered_values(consumers)) >= 100, timeout=30, message="100 deliveries")

    def describe(*extra):
        return subprocess.run([sys.executable, "-m", "zkcoord.cli", "groups", "describe", "--zookeeper",
                               zk_connect, *extra], capture_output=True, text=True, timeout=60)

    last = {}

    def caught_up() -> bool:
        last["out"] = out = describe("--group", "g").stdout
        # Kafka's columns: GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
        rows = [line.split() for line in out.splitlines() if line.split()[1:2] == ["lagged"]]
        return len(rows) == 2 and all(row[5] == "0" and int(row[3]) > 0 for row in rows)

    try:
        wait_until(caught_up, timeout=30, message="lag 0 on both partitions")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last description:\n{last.get('out')}") from None
    described = describe("--group", "g").stdout
    assert consumers[0].status()["consumer_id"] in described
    assert f"server {cluster.coordinator_id()} at 127.0.0.1:" in described and "(slot 0 of 1, epoch " in described
    unknown = describe("--group", "nope")
    assert unknown.returncode == 2 and "no group" in unknown.stderr
    bad = describe("--group", "a/b")
    assert bad.returncode == 2
