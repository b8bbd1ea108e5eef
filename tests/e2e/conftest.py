"""Real multi-process clusters: zkcoord servers and consumers as processes, on real ZooKeeper."""

from __future__ import annotations

from typing import Iterator

import pytest

from zkcoord.testing import LocalCluster

# Short timeouts keep failover drills quick; the ensemble's tick (250 ms) allows them.
SERVER_ARGS = (
    "--zk-session-timeout-ms", "2000",
    "--min-session-timeout-ms", "1000",
    "--rebalance-timeout-ms", "5000",
    "--rebalance-backoff-ms", "200",
    "--offset-flush-interval-ms", "200",
)


@pytest.fixture
def cluster_factory(zk_connect, tmp_path) -> Iterator:
    clusters: list[LocalCluster] = []

    def make(servers: int = 3, zookeeper: str | None = None, server_args=SERVER_ARGS) -> LocalCluster:
        cluster = LocalCluster(zookeeper or zk_connect, tmp_path / f"cluster-{len(clusters)}", server_args)
        clusters.append(cluster)
        if servers:
            cluster.start_servers(servers)
        return cluster

    yield make
    for cluster in clusters:
        cluster.close()


@pytest.fixture
def cluster(cluster_factory) -> LocalCluster:
    return cluster_factory(3)
