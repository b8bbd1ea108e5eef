"""Kafka 4 in KRaft mode, three combined broker-and-controller nodes: the harness's replication checks."""

from __future__ import annotations

import pytest

from tests.kafka.replication import ReplicationChecks

pytestmark = pytest.mark.kafka


@pytest.fixture
def kafka(kraft_kafka):
    return kraft_kafka


class TestKraftCluster(ReplicationChecks):
    def test_runs_kafka_4_without_zookeeper(self, kafka):
        assert kafka.version.startswith("4.")
        assert kafka.zookeeper is None
