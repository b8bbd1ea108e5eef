"""Brokers for the data-plane tests: real ``zkcoord broker`` processes on
ports they pick and report, registered in a chroot of the shared ensemble."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from zkcoord.testing import BrokerProcess, LocalCluster, cluster_in_chroot


class BrokerCluster(LocalCluster):
    """A chroot with brokers alone (no coordinator)."""

    def start_broker(self, broker_id: int = 0, *extra: str) -> BrokerProcess:
        return self.add_broker(broker_id, extra)


@pytest.fixture
def cluster(zk_connect, tmp_path: Path) -> Iterator[BrokerCluster]:
    with BrokerCluster(zk_connect, tmp_path) as c:
        yield c


@pytest.fixture(scope="module")
def shared_cluster(zk_ensemble, tmp_path_factory) -> Iterator[BrokerCluster]:
    """One broker for a whole module of read/write tests that do not disturb it."""
    with cluster_in_chroot(zk_ensemble.connect_string, tmp_path_factory.mktemp("broker"), "m", BrokerCluster) as c:
        c.start_broker(0)
        yield c
