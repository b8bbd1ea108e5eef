"""What the end-to-end tests check of a running group: the invariants, from outside."""

from __future__ import annotations

import time
from collections import Counter

from zkcoord.zk import client as zk_client
from zkcoord.zk import layout
from zkcoord.zk.nodes import read_offsets, read_owners
from zkcoord.testing import ConsumerProcess, LocalCluster, group_is_whole, wait_until  # noqa: F401

# How long a group on a secured ZooKeeper may take to consume and commit.
SECURED_GROUP_S = 30


def produce(cluster: LocalCluster, topic: str, count: int, start: int = 0, partitions: int | None = None) -> None:
    """Values m-<start> .. m-<start+count-1>, round robin over ``partitions`` if given; all acknowledged."""
    cluster.produce(topic, ((n % partitions if partitions else None, None, f"m-{n}".encode())
                            for n in range(start, start + count)))


def delivered_values(consumers: list[ConsumerProcess]) -> list[str]:
    return [r["value"] for c in consumers for r in c.records()]


def wait_whole(zk, group, consumers, partitions, timeout: float) -> float:
    """Seconds until the group is whole; fails after ``timeout``."""
    started = time.monotonic()
    deadline = started + timeout
    while not group_is_whole(zk, group, consumers, partitions):
        if time.monotonic() > deadline:
            statuses = {c.name: c.status() for c in consumers if c.alive}
            raise AssertionError(f"group {group} not whole after {timeout}s: owners {read_owners(zk, group)}, "
                                 f"members {statuses}")
        time.sleep(0.1)
    return time.monotonic() - started


def run_a_group(cluster: LocalCluster) -> None:
    """One server, and group g consuming the 40 records of topic t (2
    partitions) and committing them: what a cluster writes to ZooKeeper."""
    cluster.start_servers(1)
    cluster.create_topic("t", 2)
    cluster.produce("t", [(p, None, b"%d" % i) for i in range(20) for p in (0, 1)])
    member = cluster.add_consumer("g", topics=["t"])
    wait_until(lambda: len(member.records()) >= 40, timeout=SECURED_GROUP_S, message="40 deliveries")
    wait_until(lambda: sum(read_offsets(cluster.zk, "g").values()) == 40, timeout=SECURED_GROUP_S,
               message="the offsets committed")


def assert_nodes_owned_by(zk, owner, kafka_readers=()) -> None:
    """Every node below / (the group's among them) is ``owner``'s alone,
    and Kafka's nodes (all but zkcoord's state) also carry ``kafka_readers``;
    the root lets anyone list it and only ``owner`` change it."""
    from kazoo.security import ACL, ANYONE_ID_UNSAFE, Permissions

    assert sorted(zk.get_acls("/")[0]) == sorted([owner, ACL(Permissions.READ, ANYONE_ID_UNSAFE)])
    nodes = [path for path in zk_client.walk(zk, "/") if path != "/"]
    assert layout.group_state_path("g") in nodes and layout.offset_path("g", "t", 0) in nodes
    for path in nodes:
        kafka = not path.startswith(layout.ZKCOORD_ROOT)
        assert sorted(zk.get_acls(path)[0]) == sorted([owner, *kafka_readers] if kafka else [owner]), path


# -- members of stock clients' drivers (zkcoord.testing.driven_members) beside consumer processes ----------


def consumed(drivers, processes) -> Counter:
    """How often each (topic, partition, offset) was consumed, by any member."""
    counts = Counter(r for d in drivers for r in d.records())
    counts.update((r["topic"], r["partition"], r["offset"]) for p in processes for r in p.records())
    return counts


def held(drivers, processes) -> list:
    return sorted([tp for d in drivers for partitions in d.assignments().values() for tp in partitions]
                  + [tp for p in processes if p.alive for tp in p.assignment()])


def whole(cluster, group, partitions: int, drivers, processes, every_member: bool = False) -> bool:
    """Every one of the ``partitions`` held by exactly one member, as
    ZooKeeper's owners and each member say (``every_member``: and every
    member holds some)."""
    holding = held(drivers, processes)
    if every_member and not (all(p.assignment() for p in processes if p.alive) and all(
            d.assignment(i) for d in drivers for i in range(d.members) if not d.closed(i))):
        return False
    return len(read_owners(cluster.zk, group)) == partitions and len(holding) == partitions \
        and len(set(holding)) == partitions


def exactly_once(cluster, topic, group, partitions: int, drivers, processes, produced: int) -> None:
    """Every offset below ``produced`` (spread evenly over ``partitions``)
    consumed once, and committed at the end."""
    wait_until(lambda: sum(consumed(drivers, processes).values()) >= produced, timeout=30,
               message=f"{produced} records consumed")
    per_partition = produced // partitions
    wait_until(lambda: read_offsets(cluster.zk, group) == {(topic, p): per_partition for p in range(partitions)},
               timeout=15, message="every partition committed to its end")
    counts = consumed(drivers, processes)
    assert {k: n for k, n in counts.items() if n > 1} == {}
    assert sorted(counts) == sorted((topic, p, o) for p in range(partitions) for o in range(per_partition))
