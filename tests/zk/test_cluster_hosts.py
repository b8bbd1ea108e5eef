"""Where the cluster's own servers and brokers are (zkcoord.zk.cluster_hosts.
ClusterHosts), on real ZooKeeper: the addresses they are registered at,
read once and again after each change."""

from __future__ import annotations

from zkcoord.zk.cluster_hosts import ClusterHosts
from zkcoord.testing import wait_until
from zkcoord.zk import layout


def broker(broker_id: int, host: str) -> bytes:
    endpoint = layout.ListenerEndpoint("SASL_SSL", "SASL_SSL", host, 9092)
    return layout.encode_broker(layout.BrokerRegistration.for_endpoints(broker_id, [endpoint], timestamp_ms=1))


def test_the_registered_addresses_and_their_changes(zk):
    hosts = ClusterHosts(zk)
    assert "10.0.0.1" not in hosts  # nothing registered yet
    zk.create(layout.server_path("1"), layout.encode_server(layout.ServerInfo("1", "10.0.0.1", 9901)),
              makepath=True)
    zk.create(layout.broker_path(7), broker(7, "10.0.0.7"), makepath=True)
    zk.create(layout.broker_path(8), broker(8, "kafka-8.example"), makepath=True)  # a name is never resolved
    wait_until(lambda: "10.0.0.1" in hosts and "10.0.0.7" in hosts, 10, message="the new registrations read")
    assert "10.0.0.2" not in hosts and "kafka-8.example" not in hosts
    zk.delete(layout.broker_path(7))
    wait_until(lambda: "10.0.0.7" not in hosts, 10, message="a broker gone read as gone")
    assert "10.0.0.1" in hosts
