"""The transactions test of ``test_transactions.py`` on Kafka 4 in KRaft mode
(three combined nodes, replication factor 3): the zkcoord servers learn the
topic from Kafka's Metadata (``--kafka-bootstrap``), the Spark source is
given Kafka's brokers; the writes and what each reader must see are the same."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.kafka.test_transactions import written  # noqa: F401 - the shared log, written once per module
from tests.kafka.test_transactions import test_consumers_and_spark_read_committed_and_uncommitted  # noqa: F401
from tests.spark.conftest import spark  # noqa: F401 - the session-wide SparkSession fixture
from zkcoord.testing import LocalCluster, cluster_in_chroot

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def kafka(kraft_kafka):
    return kraft_kafka


@pytest.fixture(scope="module")
def spark_options(kraft_kafka) -> dict[str, str]:
    return {"kafka.bootstrap.servers": kraft_kafka.bootstrap}


@pytest.fixture(scope="module")
def zkcoord_servers(kraft_kafka, zk_ensemble, tmp_path_factory) -> Iterator[LocalCluster]:
    """Two coordinator candidates without brokers, beside the KRaft cluster."""
    with cluster_in_chroot(zk_ensemble.connect_string, tmp_path_factory.mktemp("zkcoord"), "kraft-txn") as cluster:
        for server_id in (1, 2):
            cluster.add_server(server_id, extra=("--no-broker", "--kafka-bootstrap", kraft_kafka.bootstrap,
                                                 "--kafka-metadata-interval-ms", "2000"))
        cluster.wait_for_coordinator()
        yield cluster
