"""A batch read whose driver finds topics, leaders and offsets in a ZooKeeper
that takes SASL credentials over TLS only: the source's ``zookeeper.*`` options."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.spark.conftest import SparkCluster
from zkcoord.security.secrets import write_private
from zkcoord.zk.ensemble import LocalEnsemble


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Iterator[LocalEnsemble]:
    ensemble = LocalEnsemble.create(tmp_path_factory.mktemp("zk-spark-sasl-tls"), nodes=1, tick_ms=250,
                                    auth="sasl", tls=True)
    try:
        ensemble.start(timeout=60)
        yield ensemble
    finally:
        ensemble.destroy()


def test_a_batch_read_through_a_zookeeper_with_sasl_and_tls(spark, secured, tmp_path):
    security = secured.client_security()
    with SparkCluster(secured.connect_string, tmp_path, zk_security=security) as cluster:
        cluster.start(1)
        cluster.create_topic("s", 2)
        sent = [(p, b"k%d" % i, b"v%d-%d" % (p, i)) for p in range(2) for i in range(50)]
        cluster.produce("s", sent)

        def read(**zookeeper_options):
            reader = spark.read.format("zkcoord").option("zookeeper", secured.connect_string).option("subscribe", "s")
            for key, value in zookeeper_options.items():
                reader = reader.option(key, value)
            return reader.load()

        rows = read(**{"zookeeper.auth": "sasl", "zookeeper.user": "zkcoord",
                       "zookeeper.passwordFile": str(security.zk_password_file),
                       "zookeeper.caFile": str(security.zk_ca_file)}).collect()
        assert sorted((r.partition, bytes(r.key), bytes(r.value)) for r in rows) == sorted(sent)

        # A wrong password is refused by name when the driver plans the read.
        wrong = tmp_path / "wrong.password"
        write_private(wrong, "not-the-password\n")
        with pytest.raises(Exception, match="ZooKeeper refused sasl \\(DIGEST-MD5\\) user 'zkcoord'"):
            read(**{"zookeeper.auth": "sasl", "zookeeper.user": "zkcoord", "zookeeper.passwordFile": str(wrong),
                    "zookeeper.caFile": str(security.zk_ca_file)}).collect()
