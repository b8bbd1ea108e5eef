"""A drill's settings: how many faults, the workload, and the cluster's timeouts."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

from zkcoord.zk.layout import validate_slot_count
from zkcoord.drill.schedule import Timing, data_plane_refusal, known_kinds
from zkcoord.errors import ConfigError
from zkcoord.settings import check, setting
from zkcoord.zk.security import ZkSecurity


# The most members a big-group fault adds: a server's default cap on connections per address (ConnectionLimits).
BIG_GROUP_MAX_MEMBERS = 1000


def _kafka_modes() -> dict[str, str]:
    """--kafka's release lines and the mode each runs in (imported only when
    asked: the Kafka harness and its client library are slow to load)."""
    from zkcoord.testing.kafka import RELEASE_LINE

    return {line: mode for mode, line in RELEASE_LINE.items()}


def _known_release(line: str) -> None:
    if line not in _kafka_modes():
        raise ConfigError(f"kafka must be one of {', '.join(_kafka_modes())}, not {line!r}")


def _positive(value: float) -> None:
    if value <= 0:
        raise ConfigError(f"max_minutes must be positive, not {value!r}")


@dataclasses.dataclass(frozen=True)
class DrillSettings:
    seed: int = setting(help="seed of the schedule", cli=False)
    kinds: tuple[str, ...] = setting(help="the fault kinds to draw from", non_empty=True, validate=known_kinds,
                                     cli=False)
    directory: Path = setting(help="directory of the history and reports", cli=False)
    faults: int = setting(20, "how many faults to inject", minimum=1)
    consumers: int = setting(4, "consumer processes in the group", minimum=1)
    stock_members: int = setting(0, "how many of the consumers are stock Kafka clients (confluent-kafka), "
                                    "members through the brokers' group APIs", minimum=0)
    big_group_members: int = setting(200, "members the big-group fault adds to the group at once, all thin "
                                           "consumers in one process", minimum=1, maximum=BIG_GROUP_MAX_MEMBERS)
    partitions: int = setting(12, "partitions of the drill's topic", minimum=1)
    rate: int = setting(300, "records produced per second", minimum=1)
    consumer_session_ms: int = setting(3000, "consumers' session timeout", minimum=500,
                                       flag="--session-timeout-ms")
    zk_session_ms: int = setting(3000, "servers' ZooKeeper session timeout (of the drill's own cluster; for an "
                                       "existing cluster, what its servers use, for the recovery bounds)",
                                 minimum=500, flag="--zk-session-timeout-ms")
    rebalance_timeout_ms: int = setting(5000, "the servers' rebalance timeout", minimum=500)
    coordinator_slots: int = setting(3, "coordinator slots of the drill's own cluster (3: every one of its "
                                        "three servers coordinates a slot, so that a standby kill kills another "
                                        "slot's coordinator)", validate=validate_slot_count)
    max_minutes: float = setting(60.0, "start no new fault after this many minutes", validate=_positive)
    background_load: int = setting(0, "busy processes kept running beside the cluster from the first fault to "
                                      "the end (0: none): a loaded machine, on which every process is slow "
                                      "(2 per core keeps every core busy)", minimum=0, maximum=64)
    secure: bool = setting(False, "the drill's own cluster with every layer of security on: ZooKeeper with "
                                  "digest authentication, TLS and ACLs; servers with TLS, required "
                                  "authentication and the authorizer; members and the producer as SCRAM "
                                  "users over TLS")
    kafka: Optional[str] = setting(None, "run the campaign over Apache Kafka instead of the embedded brokers: "
                                         "3.9 (three brokers in ZooKeeper mode on the drill's ensemble, sharing "
                                         "zkcoord's tree) or 4 (three combined KRaft nodes); replication factor "
                                         "3, min.insync.replicas 2, the producer with acks=all; the servers run "
                                         "without their brokers", validate=_known_release)
    # An existing cluster to aim at: its ZooKeeper and its servers (None: the drill's own).
    zookeeper: Optional[str] = setting(None, "an existing cluster's ZooKeeper connect string", cli=False)
    bootstrap: Optional[tuple[str, ...]] = setting(None, "an existing cluster's servers", cli=False)
    zk_security: ZkSecurity = setting(help="an existing cluster's ZooKeeper credentials and TLS",
                                      factory=ZkSecurity, cli=False)

    def __post_init__(self) -> None:
        check(self)
        if self.stock_members > self.consumers:
            raise ConfigError(f"--stock-members ({self.stock_members}) cannot exceed --consumers ({self.consumers})")
        if (self.zookeeper is None) != (self.bootstrap is None):
            raise ConfigError("aim at an existing cluster with both --zookeeper and --bootstrap, or neither")
        if self.kafka is not None:
            self._check_over_kafka()
        refused = {kind: why for kind in self.kinds if (why := data_plane_refusal(kind, self.kafka is not None))}
        if refused:
            where = "not over Apache Kafka: " if self.kafka is not None else ""
            raise ConfigError(where + "; ".join(f"{kind}: {why}" for kind, why in refused.items()))
        if self.secure and not self.own_cluster:
            raise ConfigError("secure secures the drill's own cluster: an existing cluster's security is "
                              "its operator's (give its ZooKeeper credentials with the --zk-* options)")

    def _check_over_kafka(self) -> None:
        if not self.own_cluster:
            raise ConfigError("--kafka runs the drill's own cluster beside a Kafka cluster of its own: it cannot "
                              "aim at an existing one")
        if self.secure:
            raise ConfigError("--secure is not supported with --kafka: the drill's Kafka cluster runs without "
                              "security")
        if self.stock_members:
            raise ConfigError("--stock-members is not supported with --kafka: stock members join through the "
                              "embedded brokers' group APIs")

    @property
    def own_cluster(self) -> bool:
        return self.zookeeper is None

    @property
    def timing(self) -> Timing:
        kafka = self.kafka_settings()
        kafka_session_s = 0.0 if kafka is None else kafka.session_timeout_ms / 1000
        return Timing(consumer_session_s=self.consumer_session_ms / 1000, zk_session_s=self.zk_session_ms / 1000,
                      rebalance_timeout_s=self.rebalance_timeout_ms / 1000, kafka_session_s=kafka_session_s)

    def server_args(self) -> tuple[str, ...]:
        return ("--zk-session-timeout-ms", str(self.zk_session_ms), "--min-session-timeout-ms", "1000",
                "--rebalance-timeout-ms", str(self.rebalance_timeout_ms), "--rebalance-backoff-ms", "200",
                "--offset-flush-interval-ms", "200", "--coordinator-slots", str(self.coordinator_slots))

    def member_args(self) -> tuple[str, ...]:
        """Every thin member's options: the big-group fault's crowd as well as the consumer processes."""
        return ("--strategy", "sticky", "--strategy", "range", "--max-poll-records", "100")

    def consumer_args(self) -> tuple[str, ...]:
        # A slow member outlasts the rebalance timeout by a second.
        return (*self.member_args(), "--slow-ms", str(self.rebalance_timeout_ms + 1000))

    def shown(self) -> dict:
        return {"faults": self.faults, "seed": self.seed, "kinds": ",".join(self.kinds),
                "consumers": self.consumers, "stock members": self.stock_members,
                **({"big group members": self.big_group_members} if "big-group" in self.kinds else {}),
                "partitions": self.partitions,
                "rate": self.rate,
                "consumer session ms": self.consumer_session_ms, "zk session ms": self.zk_session_ms,
                "coordinator slots": self.coordinator_slots if self.own_cluster else "the cluster's",
                "target": self.zookeeper or "own local cluster",
                "data plane": self.data_plane(),
                **({"background load": self.background_load} if self.background_load else {}),
                "security": "TLS, SASL/SCRAM, ACLs, ZooKeeper digest and TLS" if self.secure else "none"}

    def kafka_settings(self):
        """The drill's Kafka cluster's KafkaSettings (None: the embedded brokers)."""
        if self.kafka is None:
            return None
        from zkcoord.testing.kafka import KafkaSettings

        return KafkaSettings(_kafka_modes()[self.kafka])

    def data_plane(self) -> str:
        kafka = self.kafka_settings()
        if kafka is None:
            return "the servers' embedded brokers"
        from zkcoord.testing.kafka import ZOOKEEPER_MODE

        mode = "ZooKeeper mode" if kafka.mode == ZOOKEEPER_MODE else "KRaft"
        return (f"Apache Kafka {self.kafka} ({mode}), {kafka.brokers} brokers, replication factor "
                f"{kafka.replication_factor}, min.insync.replicas {kafka.min_insync_replicas}, acks=all")
