"""The broker's settings, and its partition logs': validated, immutable values.

Nothing here imports the broker's networking, so a command can declare its
options (zkcoord.settings) before gevent patches the process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from zkcoord.errors import ConfigError
from zkcoord.limits import ConnectionLimits
from zkcoord.security.config import SecurityConfig, TlsConfig
from zkcoord.settings import INT32_MAX, NODE_ID, PORT, bind_address, check, setting


@dataclass(frozen=True)
class LogConfig:
    """How one partition log stores, flushes and expires its data (the same for every partition)."""

    segment_bytes: int = setting(128 * 1024 * 1024, "size at which a partition's log rolls to a new segment",
                                 minimum=1024, maximum=INT32_MAX)
    index_interval_bytes: int = setting(4096, "bytes of log between two entries of a segment's index", minimum=1,
                                        cli=False)
    # None leaves flushing to the operating system, as Kafka does by default.
    flush_messages: Optional[int] = setting(None, "fsync a partition after this many records "
                                                  "(default: leave it to the operating system)", minimum=1)
    flush_ms: Optional[int] = setting(None, "fsync a partition this long after its last fsync "
                                            "(default: leave it to the operating system)", minimum=1)
    retention_bytes: int = setting(-1, "delete a partition's oldest segments beyond this size (-1: keep all)",
                                   minimum=-1)
    retention_ms: int = setting(7 * 24 * 3600 * 1000, "delete segments older than this (-1: keep all)",
                                minimum=-1)

    def __post_init__(self):
        check(self)


@dataclass(frozen=True)
class BrokerConfig:
    """Everything a broker needs besides its ZooKeeper client."""

    broker_id: int = setting(help="broker id, as in /brokers/ids", flag="--id", **NODE_ID)
    # None only for a gateway, which holds no partitions (__post_init__).
    data_dir: Optional[str] = setting(None, "directory of the partition logs (required unless --gateway)",
                                      non_empty=True)
    host: str = bind_address()
    port: int = setting(0, "the Kafka protocol's port (0: a free one)", **PORT)
    advertised_host: Optional[str] = setting(None, "name to publish in ZooKeeper instead of the host, "
                                                   "when clients must use another name", non_empty=True)
    rack: Optional[str] = setting(None, "the broker's rack, published in its registration")
    log: LogConfig = setting(help="storage of every partition", factory=LogConfig, cli=False)
    retention_check_ms: int = setting(60_000, "how often retention looks for segments to delete", minimum=1)
    max_request_bytes: int = setting(100 * 1024 * 1024, "largest request accepted", minimum=1024)
    max_connections: int = setting(1000, "most client connections served at once", minimum=1)
    sendfile_threshold: int = setting(64 * 1024, "fetch responses this large go out with sendfile", minimum=0,
                                      cli=False)
    max_fetch_wait_ms: int = setting(30_000, "longest a fetch may wait for data, whatever it asks", minimum=1)
    register_timeout_ms: int = setting(30_000, "how long to wait at start for a crashed predecessor's "
                                               "registration to expire", minimum=1)
    # KIP-848 lets the broker, not the client, set these (Kafka's
    # group.consumer.heartbeat.interval.ms and group.consumer.session.timeout.ms).
    group_consumer_heartbeat_interval_ms: int = setting(5000, "how often members speaking KIP-848's group "
                                                              "protocol heartbeat", minimum=1)
    group_consumer_session_timeout_ms: int = setting(45_000, "how long a member speaking KIP-848's group "
                                                             "protocol may go without a heartbeat", minimum=1)
    fetch_fence_idle_ms: int = setting(600_000, "a stock member gone from its group is refused the fetches of "
                                                "what it held until its client shows it let go, or until no "
                                                "broker has refused it a fetch for this long (the same on every "
                                                "broker)", minimum=1000)
    # The records live on Kafka, so the gateway has nothing to fetch or
    # produce, and registers nowhere Kafka would see it (broker/gateway.py).
    gateway: bool = setting(False, "run the broker as a group gateway beside an Apache Kafka cluster that holds "
                                   "the records (ZooKeeper mode: sharing this chroot; KRaft: --kafka-bootstrap): "
                                   "it holds no partitions, names Kafka's brokers as the leaders in Metadata and "
                                   "itself for FindCoordinator, and serves the group and offset APIs")
    # Kafka's connections.max.idle.ms.
    idle_timeout_ms: int = setting(600_000, "close a connection that sends nothing for this long", minimum=1)
    # One listener, TLS or plaintext: a cluster's clients all reach its
    # brokers one way, and Metadata names the one endpoint there is.
    tls: TlsConfig = setting(help="TLS of the Kafka listener (SSL; plaintext without a certificate)",
                             factory=TlsConfig, cli=False)
    limits: ConnectionLimits = setting(help="what one peer may hold of the listener", factory=ConnectionLimits,
                                       cli=False)
    security: SecurityConfig = setting(help="SASL, and the authorizer", factory=SecurityConfig, cli=False)

    def __post_init__(self):
        check(self)
        if self.gateway and self.data_dir is not None:
            raise ConfigError("a gateway holds no partitions: --data-dir is for the embedded broker, not with "
                              "--gateway")
        if self.gateway and self.security.authorizing:
            # A relay sends Produce and Fetch on to Kafka unread: Kafka's ACLs, not ours, would have to judge them.
            raise ConfigError("--gateway with --authorizer on is not offered: the gateway's relays pass records "
                              "to and from Kafka without asking the authorizer; authorize at Kafka")
        if not self.gateway and self.data_dir is None:
            raise ConfigError("--data-dir is required for the embedded broker (or pass --gateway beside a "
                              "Kafka cluster, or --no-broker)")
        self.security.refuse_bridge_password_without_tls(self.tls)

    @property
    def advertised(self) -> str:
        return self.advertised_host or self.host
