"""The coordinator's settings (seed 001 section 2), validated on creation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from zkcoord import wire
from zkcoord.addresses import kafka_addresses
from zkcoord.errors import ConfigError
from zkcoord.limits import ConnectionLimits
from zkcoord.metrics.config import MetricsConfig
from zkcoord.security.config import SecurityConfig, TlsConfig
from zkcoord.settings import NODE_ID, PORT, bind_address, check, setting
from zkcoord.zk import layout
from zkcoord.zk.config import ZooKeeperConfig
from zkcoord.zk.layout import validate_slot_count
from zkcoord.zk.security import ZkSecurity

REBALANCE_PROTOCOLS = ("incremental", "eager")


@dataclass(frozen=True)
class CoordinatorConfig:
    """The coordinator's knobs (seed 001 section 2), validated on creation."""

    min_session_timeout_ms: int = setting(1000, "smallest consumer session timeout accepted", minimum=1)
    max_session_timeout_ms: int = setting(60_000, "largest consumer session timeout accepted", minimum=1)
    max_rebalance_retries: int = setting(4, "rebalance attempts after the first fails, before the group "
                                            "is marked failed (it is still retried, at the longest backoff)",
                                         minimum=0)
    rebalance_backoff_ms: int = setting(500, "wait between a failed rebalance and the next attempt, doubled "
                                             "after each failure in a row", minimum=0)
    max_rebalance_backoff_ms: int = setting(30_000, "longest wait between failed rebalances: a failed group "
                                                    "is retried this often until it succeeds", minimum=1)
    rebalance_timeout_ms: int = setting(10_000, "how long a rebalance waits for every member's Stop and "
                                                "Start answers", minimum=1)
    offset_flush_interval_ms: int = setting(1000, "how often the offsets members report are written to "
                                                  "ZooKeeper", minimum=1)
    lease_margin_ms: int = setting(200, "slack for members' clocks running slower than the coordinator's",
                                   minimum=0)
    rebalance_delay_ms: int = setting(100, "joins and leaves within this delay make one rebalance", minimum=0)
    # Kafka's group.initial.rebalance.delay.ms.
    initial_rebalance_delay_ms: int = setting(
        1000, "a new group's first rebalance waits this long after each join, up to the rebalance timeout, "
              "so that members joining together make one rebalance (0: no wait)", minimum=0)
    rebalance_protocol: str = setting("incremental", "incremental: stop only what moves; eager: seed 001's "
                                                     "stop-all/start-all", choices=REBALANCE_PROTOCOLS)
    # Kafka's offsets.retention.minutes (7 days), for what has no offsets to keep.
    group_retention_ms: int = setting(
        7 * 24 * 3600 * 1000, "a group with no members and no committed offsets is forgotten (its state "
                              "dropped, its nodes deleted from ZooKeeper) this long after it was last seen empty",
        minimum=1)
    expire_offsets: bool = setting(
        False, "forget a group's committed offsets too, with the group, once it has had no members for the "
               "group retention (Kafka's offset expiry); without it, a group with offsets is kept for good")
    lag_refresh_ms: int = setting(
        10_000, "how often the partitions' leaders are asked where their logs end, for the consumer lag the "
                "metrics export (0: never; the lag is then as of the log ends learnt when offsets were committed)",
        minimum=0)
    rebalance_history_rounds: int = setting(
        20, "rebalance rounds kept per group in its history (ZooKeeper's /zkcoord/groups/<group>/history, "
            "shown by `zkcoord groups describe --history` and the console)",
        minimum=1, maximum=layout.MAX_HISTORY_ROUNDS)
    log_end_timeout_ms: int = setting(
        5000, "how long the coordinator waits for partitions' leaders to say where their logs end, when an "
              "offset reported is above the last log end it learnt (also the brokers' connect and request "
              "timeout); past it, an offset whose leader did not answer is taken as reported",
        minimum=1)

    def __post_init__(self) -> None:
        check(self)
        if self.min_session_timeout_ms > self.max_session_timeout_ms:
            raise ConfigError("min_session_timeout_ms exceeds max_session_timeout_ms")


@dataclass(frozen=True)
class ServerConfig:
    """One server: where it listens, its ZooKeeper, its coordinator's knobs and its embedded broker."""

    server_id: int = setting(help="server id, unique in the cluster", flag="--id", **NODE_ID)
    zookeeper: str = setting(help="ZooKeeper connect string (host:port,...[/chroot])", non_empty=True)
    host: str = bind_address()
    port: int = setting(0, "the coordinator protocol's port (0: a free one)", **PORT)
    zk_session: ZooKeeperConfig = setting(help="the ZooKeeper session asked for", factory=ZooKeeperConfig,
                                          cli=False)
    zk_security: ZkSecurity = setting(help="ZooKeeper credentials, TLS and ACL policy", factory=ZkSecurity,
                                      cli=False)
    max_connections: Optional[int] = setting(None, "most connections served at once (default: as many as "
                                                   "the open-file limit allows)", minimum=1)
    max_frame_size: int = setting(wire.MAX_FRAME_SIZE, "largest coordinator-protocol frame accepted",
                                  minimum=1024, cli=False)
    coordinator: CoordinatorConfig = setting(help="the coordinator's knobs", factory=CoordinatorConfig, cli=False)
    # A zkcoord.broker.config.BrokerConfig (not imported here: it is the
    # broker's business), or None for a server without a broker.
    broker: Optional[object] = setting(None, "the embedded broker's settings (None: no broker)", cli=False)
    metrics: MetricsConfig = setting(help="the metrics endpoint (its host defaults to the server's)",
                                     factory=MetricsConfig, cli=False)
    limits: ConnectionLimits = setting(help="what one peer may hold of the listeners (shared with the embedded "
                                            "broker)", factory=ConnectionLimits, cli=False)
    coordinator_slots: Optional[int] = setting(
        None, "coordinator slots the groups are spread over, each elected on its own, so that every server "
              "coordinates a share; set by a cluster's first server, fixed after that (default: the cluster's "
              "count, 1 for a new cluster)", validate=validate_slot_count)
    tls: TlsConfig = setting(help="TLS of the coordinator protocol's listener and the embedded broker's",
                             factory=TlsConfig, cli=False)
    security: SecurityConfig = setting(help="authentication and the authorizer", factory=SecurityConfig,
                                       cli=False)
    # Kafka in KRaft mode registers nothing in ZooKeeper.
    kafka_bootstrap: Optional[str] = setting(
        None, "a Kafka cluster's brokers (host:port,...): learn its brokers, topics and partition counts from "
              "its Metadata API instead of from ZooKeeper's /brokers (Kafka in KRaft mode; needs --no-broker or "
              "--gateway). "
              "Reached with the server's TLS and its own credential", validate=kafka_addresses)
    kafka_metadata_interval_ms: int = setting(
        5000, "with --kafka-bootstrap, how often Kafka's Metadata is read (at once, too, when a member names "
              "a topic not known or subscribes to a pattern)", minimum=100)

    def __post_init__(self) -> None:
        check(self)
        if self.kafka_bootstrap is not None and self.broker is not None and not self.broker.gateway:
            raise ConfigError("--kafka-bootstrap names the Kafka cluster that holds the records: the server "
                              "runs without its embedded broker then (--no-broker), or with it as a group "
                              "gateway (--gateway)")
        self.security.refuse_bridge_password_without_tls(self.tls)
        if self.tls.serves and not self.tls.speaks:
            # The embedded broker's bridge registers stock members with the
            # coordinators as a client does: it must verify them too.
            raise ConfigError("a server with --tls-cert needs --tls-ca too: it connects to the cluster's "
                              "coordinators as a client, and verifies them against it")
        if ((self.security.authentication_required or self.security.authorizing)
                and self.security.own_credential is None and self.tls.client_auth != "required"):
            # Its coordinators ask the brokers for log ends before they commit
            # an offset, and its broker registers stock clients' members: as
            # whom, where the anonymous may do nothing?
            flag = "--authentication-required" if self.security.authentication_required else "--authorizer on"
            raise ConfigError(f"{flag} needs the server's own credential: --bridge-user (a super user) with "
                              "--bridge-password-file, or client certificates (--tls-client-auth required)")
