"""Fixtures for the Spark source: one local SparkSession for the whole run,
and real ``zkcoord server`` processes (coordinator plus embedded broker) in a
chroot of the shared ZooKeeper ensemble."""

from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest

from zkcoord.testing import LocalCluster, cluster_in_chroot


def configure_spark_env() -> None:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


def kafka_source_jars() -> list[str]:
    """Spark's own Kafka source, if the install step fetched it: only
    test_kafka_source.py reads with it, and fails there saying why when it
    is missing, rather than every Spark test failing here."""
    from zkcoord.testing import spark_kafka
    from zkcoord.testing.maven import JarCacheError

    try:
        return spark_kafka.jars()
    except JarCacheError:
        return []


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark", reason="needs pyspark (scripts/install.sh spark)")
    configure_spark_env()
    from pyspark.sql import SparkSession

    from zkcoord.spark import jar, register

    session = (
        SparkSession.builder.master("local[2,3]")  # 2 cores, a failed task tried up to 3 times
        .appName("zkcoord-tests")
        # format("zkcoord") on the JVM path ("zkcoord-python" next to it), and Spark's own format("kafka")
        .config("spark.jars", ",".join([jar(), *kafka_source_jars()]))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.pollingDelay", "100ms")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    assert register(session), "the JVM source did not load"
    yield session
    session.stop()


class SparkCluster(LocalCluster):
    """Servers (coordinator candidates with embedded brokers) in one chroot."""

    def start(self, count: int = 1, *extra: str) -> "SparkCluster":
        first = len(self.servers)
        for server_id in range(first, first + count):
            self.add_server(server_id, extra=extra)
        self.wait_for_brokers()
        self.wait_for_coordinator()
        return self


@pytest.fixture
def cluster(zk_connect, tmp_path) -> Iterator[SparkCluster]:
    with SparkCluster(zk_connect, tmp_path) as c:
        yield c


@pytest.fixture(scope="module")
def shared_cluster(zk_ensemble, tmp_path_factory) -> Iterator[SparkCluster]:
    """One server for a module of tests that each use their own topics."""
    with cluster_in_chroot(zk_ensemble.connect_string, tmp_path_factory.mktemp("spark-cluster"), "s",
                           SparkCluster) as c:
        c.start(1)
        yield c
