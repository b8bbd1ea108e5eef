"""What the end-to-end tests check of a running group: the invariants, from outside."""

from __future__ import annotations

import time

from zkcoord.zk.nodes import read_owners
from zkcoord.testing import ConsumerProcess, LocalCluster, group_is_whole  # noqa: F401


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
