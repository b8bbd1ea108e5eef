"""Where the cluster's own servers and brokers are: the IP addresses they are
registered at, read from ZooKeeper (and, beside a KRaft Kafka, from Kafka's
metadata). A process's login checks (zkcoord.security.checks) ask it whether
a login comes from one of them; zkcoord.security.logins says why that matters.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Optional

from zkcoord.zk.nodes import read_brokers, read_servers

log = logging.getLogger(__name__)


def _ip(host: Optional[str]) -> Optional[str]:
    """``host`` as a peer's address reads, if it is an IP address (a name is never resolved here)."""
    try:
        return str(ipaddress.ip_address(host)) if host else None
    except ValueError:
        return None


class ClusterHosts:
    """The IP addresses the cluster's servers (/zkcoord/servers) and brokers
    are registered at: where the servers' own logins come from. The brokers
    are those of /brokers/ids or, beside a KRaft Kafka (``kafka``, a
    :class:`~zkcoord.coordinator.kafka_cluster.KafkaClusterWatch`: nothing
    of Kafka's is in ZooKeeper), those of Kafka's metadata. Read when first
    asked and again once a watch says they changed; while they cannot be
    read, no address is one of them (a login from it is limited as any other)."""

    def __init__(self, zk, kafka=None):
        self._zk = zk
        self._kafka = kafka
        self._hosts: Optional[frozenset[str]] = None
        self._changes = 0  # a read that a change overtook is not kept
        if kafka is not None:
            kafka.on_brokers_changed(self._changed)

    def _changed(self, _event=None) -> None:
        self._changes += 1
        self._hosts = None

    def _broker_hosts(self) -> set:
        if self._kafka is not None:
            return {_ip(address.rpartition(":")[0].strip("[]")) for address in self._kafka.addresses()}
        found = set()
        for broker in read_brokers(self._zk, watch=self._changed, watch_data=True).values():
            found |= {_ip(broker.host)} | {_ip(endpoint.host) for endpoint in broker.endpoints}
        return found

    def __contains__(self, address: object) -> bool:
        hosts = self._hosts
        if hosts is None:
            changes = self._changes
            try:
                servers = read_servers(self._zk, watch=self._changed, watch_data=True)
                brokers = self._broker_hosts()
            except Exception as exc:  # kazoo's errors: no session, no answer
                log.info("cannot read where the cluster's servers and brokers are: %s", exc)
                return False
            hosts = frozenset(({_ip(server.host) for server in servers.values()} | brokers) - {None})
            if changes == self._changes:
                self._hosts = hosts
        return address in hosts
