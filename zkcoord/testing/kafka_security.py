"""A secured Apache Kafka cluster for the tests: clients connect over SASL_SSL
with SCRAM-SHA-256 or SCRAM-SHA-512, and an authorizer enforces ACLs.

:class:`SecuredKafkaCluster` is a :class:`~zkcoord.testing.kafka.KafkaCluster`
whose nodes listen twice. The SASL_SSL listener is the one under test
(:attr:`SecuredKafkaCluster.secure_bootstrap`): its certificate comes from
zkcoord's own CA (:mod:`zkcoord.security.certs`), in PEM files Kafka reads
as they are, and every client there logs in with a SCRAM user. The
PLAINTEXT listener stays the harness's own, on 127.0.0.1: the brokers and
controllers speak to each other there, and the harness creates topics,
users and ACLs there, as ``User:ANONYMOUS``, a super user (as Kafka's own
quickstarts run an internal listener); a client under test never uses it.

The authorizer is Kafka's for the mode: StandardAuthorizer (ACLs in the
metadata log) in KRaft, AclAuthorizer (ACLs in ZooKeeper) in ZooKeeper
mode; with no ACL on a resource, nobody but the super users may use it.
SCRAM users are added after the start with Kafka's admin API
(AlterUserScramCredentials) in both modes: the brokers need none of them
to start, as they speak to each other on the PLAINTEXT listener.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Optional

from confluent_kafka.admin import (
    AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType, ScramCredentialInfo,
    ScramMechanism, UserScramCredentialUpsertion,
)

from zkcoord.errors import ZkcoordError
from zkcoord.fetch.connection import BrokerConnection
from zkcoord.security import certs, scram, tls
from zkcoord.security.config import TlsConfig
from zkcoord.security.secrets import write_private
from zkcoord.testing.kafka import (
    KRAFT_MODE, KafkaCluster, KafkaSettings, NodePorts, free_port, server_properties,
)
from zkcoord.testing.waiting import wait_until

MECHANISMS = (scram.SCRAM_SHA_256, scram.SCRAM_SHA_512)
SCRAM_ITERATIONS = 4096  # Kafka's minimum, and its tools' default
AUTHORIZER = {KRAFT_MODE: "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
ZOOKEEPER_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
_CONFLUENT_MECHANISM = {scram.SCRAM_SHA_256: ScramMechanism.SCRAM_SHA_256,
                        scram.SCRAM_SHA_512: ScramMechanism.SCRAM_SHA_512}
_OPERATIONS = {"READ": AclOperation.READ, "DESCRIBE": AclOperation.DESCRIBE, "WRITE": AclOperation.WRITE}


@dataclass(frozen=True)
class KafkaTls:
    """The files of the SASL_SSL listener: its keystore (key and certificate
    in one PEM file) and the CA that signed it, which clients trust."""

    keystore: Path
    authority: certs.CertFiles  # the CA: tests issue zkcoord's servers certificates from it too

    @property
    def ca(self) -> Path:
        return self.authority.cert

    @classmethod
    def issue(cls, directory: Path) -> "KafkaTls":
        """A CA and a certificate for 127.0.0.1 and localhost signed by it, in ``directory``."""
        ca = certs.make_ca(directory)
        issued = certs.issue(ca, directory, "kafka")
        keystore = directory / "kafka-keystore.pem"
        write_private(keystore, issued.key.read_bytes() + issued.cert.read_bytes())
        return cls(keystore, ca)

    @property
    def client(self) -> TlsConfig:
        """zkcoord's client TLS settings for the listener."""
        return TlsConfig(ca=str(self.ca))


def secure_properties(mode: str, ports: NodePorts, secure_port: int, keystore: KafkaTls) -> dict[str, str]:
    """What a node's server.properties gains: a SASL_SSL listener beside the
    PLAINTEXT one, SCRAM on it, and the mode's authorizer."""
    plain, secure = f"PLAINTEXT://127.0.0.1:{ports.port}", f"SASL_SSL://127.0.0.1:{secure_port}"
    protocols = "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL"
    listeners = f"{plain},{secure}"
    if mode == KRAFT_MODE:
        listeners += f",CONTROLLER://127.0.0.1:{ports.controller_port}"
        protocols += ",CONTROLLER:PLAINTEXT"
    props = {
        "listeners": listeners,
        "advertised.listeners": f"{plain},{secure}",
        "listener.security.protocol.map": protocols,
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore.keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(keystore.ca),
        "authorizer.class.name": AUTHORIZER.get(mode, ZOOKEEPER_AUTHORIZER),
        "allow.everyone.if.no.acl.found": "false",
        # The harness's listener, the brokers' and the controllers' own: no login there.
        "super.users": "User:ANONYMOUS",
    }
    for mechanism in MECHANISMS:
        # A broker checks SCRAM logins under a JAAS entry of the listener's (no credentials in it).
        props[f"listener.name.sasl_ssl.{mechanism.lower()}.sasl.jaas.config"] = \
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    return props


class SecuredKafkaCluster(KafkaCluster):
    """A KafkaCluster with a SASL_SSL listener under test (see the module)."""

    def __init__(self, directory: Path, settings: KafkaSettings, zookeeper: Optional[str] = None):
        super().__init__(directory, settings, zookeeper)
        self.tls = KafkaTls.issue(self.directory / "pki")
        self.secure_ports: dict[int, int] = {}

    def _configure_all(self) -> None:
        super()._configure_all()
        self.secure_ports = {n: free_port() for n in self.brokers}
        for n, broker in self.brokers.items():
            props = server_properties(self.settings, n, broker.log_dir, broker.node_ports,
                                      voters={m: b.node_ports for m, b in self.brokers.items()},
                                      zookeeper=self.zookeeper)
            props.update(secure_properties(self.mode, broker.node_ports, self.secure_ports[n], self.tls))
            broker.configure(broker.node_ports, props)

    @property
    def secure_bootstrap(self) -> str:
        """Every node's SASL_SSL address."""
        return ",".join(f"127.0.0.1:{port}" for port in self.secure_ports.values())

    def add_users(self, users: Mapping[str, str], timeout: float = 60.0) -> None:
        """SCRAM credentials (both mechanisms) for ``users`` ({name: password});
        waits until every broker takes each of them."""
        admin = self.new_admin()
        for mechanism in MECHANISMS:  # Kafka takes one change per user in a request
            upserts = [UserScramCredentialUpsertion(
                name, ScramCredentialInfo(_CONFLUENT_MECHANISM[mechanism], SCRAM_ITERATIONS), password.encode())
                for name, password in users.items()]
            for future in admin.alter_user_scram_credentials(upserts).values():
                future.result(timeout)
        context = tls.client_context(self.tls.client)

        def every_broker_logs_them_in() -> bool:
            for port in self.secure_ports.values():
                for name, password in users.items():
                    try:
                        BrokerConnection(f"127.0.0.1:{port}", tls=context, credential=(name, password),
                                         timeout_s=5).close()
                    except ZkcoordError:
                        return False
            return True

        wait_until(every_broker_logs_them_in, timeout, interval=0.2, message=f"users {sorted(users)} to log in")

    def allow(self, principal: str, operations: Iterable[str], topic: str = "*", timeout: float = 30.0) -> None:
        """ACLs letting ``principal`` (User:name) do ``operations`` (READ,
        DESCRIBE, WRITE) on ``topic`` ("*": every topic), from any host."""
        admin = self.new_admin()
        bindings = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*",
                               _OPERATIONS[operation], AclPermissionType.ALLOW) for operation in operations]
        for future in admin.create_acls(bindings).values():
            future.result(timeout)


__all__ = ["KafkaTls", "SecuredKafkaCluster", "secure_properties"]
