"""The Spark source over TLS: its options, and a batch read from a server
whose coordinator protocol and broker speak only TLS."""

from __future__ import annotations

import pytest

from tests.spark.conftest import SparkCluster
from tests.spark.test_batch import records
from zkcoord.security import certs
from zkcoord.security.config import TlsConfig, librdkafka_settings
from zkcoord.spark.errors import SourceOptionError
from zkcoord.spark.options import parse_options


def test_tls_options_are_librdkafkas_and_checked():
    options = parse_options({"zookeeper": "h", "subscribe": "a", "ssl.ca.location": "ca.pem",
                             "ssl.certificate.location": "me.pem", "ssl.key.location": "me-key.pem"},
                            streaming=False)
    assert options.tls == TlsConfig(ca="ca.pem", cert="me.pem", key="me-key.pem")
    assert parse_options({"zookeeper": "h", "subscribe": "a"}, streaming=False).tls == TlsConfig()
    with pytest.raises(SourceOptionError, match="TLS options: --tls-cert and --tls-key go together"):
        parse_options({"zookeeper": "h", "subscribe": "a", "ssl.certificate.location": "me.pem"}, streaming=False)


@pytest.fixture
def tls_cluster(zk_connect, tmp_path):
    ca = certs.make_ca(tmp_path / "pki")
    server = certs.issue(ca, tmp_path / "pki", "server")
    with SparkCluster(zk_connect, tmp_path / "cluster") as cluster:
        cluster.start(1, "--tls-cert", str(server.cert), "--tls-key", str(server.key), "--tls-ca", str(ca.cert))
        cluster.client_settings = librdkafka_settings(TlsConfig(ca=str(ca.cert)))
        cluster.ca = ca
        yield cluster


def test_a_batch_read_over_tls_returns_exactly_the_produced_records(spark, tls_cluster):
    tls_cluster.create_topic("secure", 2)
    sent = records(2, 300)
    tls_cluster.produce("secure", sent)
    read = (spark.read.format("zkcoord").option("zookeeper", tls_cluster.zookeeper).option("subscribe", "secure")
            .option("ssl.ca.location", str(tls_cluster.ca.cert)).load())
    assert sorted((r.partition, bytes(r.key), bytes(r.value)) for r in read.collect()) == sorted(sent)
