"""The nodes Kafka defines under /brokers (broker registrations, topic
assignments, partition state) and the cluster id at /cluster/id.

Also the last block of producer ids handed out (/latest_producer_id_block).

The codecs here write the bytes a ZooKeeper-mode Kafka writes and read every
version Kafka ever wrote, so that Kafka's tools, and tools built for Kafka, read
our data and we read theirs.

The formats were read from Kafka's ``kafka/zk/ZkData.scala`` (``BrokerIdZNode``,
``TopicZNode``, ``TopicPartitionStateZNode``, ``ClusterIdZNode``, ``ProducerIdBlockZNode``) and ``kafka/cluster/EndPoint.scala``,
and checked against what Kafka brokers of each era left in ZooKeeper.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

from zkcoord.zk.layout.json_codec import _Fields, _load, _prefix_errors, _scala_map_order, encode_json
from zkcoord.zk.layout.names import (
    _INT32_MAX,
    _INT32_MIN,
    _INT64_MAX,
    LayoutError,
    _check_broker_id,
    _is_int,
    _validate_partition,
    validate_topic_name,
)
from zkcoord.zk.layout.paths import CLUSTER_ID_PATH, PRODUCER_ID_BLOCK_PATH, broker_path, topic_path

# ---------------------------------------------------------------------------
# /brokers/ids/<id>

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
BROKER_VERSION = 5  # newest registration format Kafka wrote (2.7 to 3.9)
_ENDPOINT = re.compile(r"([A-Za-z0-9_.-]+)://(\[[0-9A-Za-z%.:]*\]|[0-9A-Za-z%._-]*):([0-9]{1,5})")


@dataclass(frozen=True)
class ListenerEndpoint:
    """One advertised listener of a broker."""

    listener_name: str
    security_protocol: str
    host: str  # "" means the broker's default interface, as Kafka writes it
    port: int

    def __post_init__(self) -> None:
        if not isinstance(self.listener_name, str) or not re.fullmatch(
            r"[A-Za-z0-9_.-]+", self.listener_name
        ):
            raise LayoutError(f"listener name {self.listener_name!r} is not valid")
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise LayoutError(
                f"security protocol {self.security_protocol!r} is not one of {SECURITY_PROTOCOLS}"
            )
        if not isinstance(self.host, str) or not re.fullmatch(r"[0-9A-Za-z%._:-]*", self.host):
            raise LayoutError(f"endpoint host {self.host!r} is not a host name or address")
        if not _is_int(self.port) or not 0 <= self.port <= 65535:
            raise LayoutError(f"endpoint port must be in [0, 65535], got {self.port!r}")

    def connection_string(self) -> str:
        # IPv6 literals are bracketed, as Kafka's Utils.formatAddress does.
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"


def _parse_endpoint(text: object, protocols: Mapping[str, str] | None, where: str) -> ListenerEndpoint:
    match = _ENDPOINT.fullmatch(text) if isinstance(text, str) else None
    if not match:
        raise LayoutError(f"{where}: field 'endpoints' has {text!r}, not LISTENER://host:port")
    listener, host, port = match.groups()
    host = host[1:-1] if host.startswith("[") else host
    # Before v4 there was no listener map: the listener name is the protocol.
    protocol = listener if protocols is None else protocols.get(listener)
    if protocol is None:
        raise LayoutError(
            f"{where}: listener {listener!r} is not in field 'listener_security_protocol_map'"
        )
    with _prefix_errors(f"{where}: field 'endpoints'"):
        return ListenerEndpoint(listener, protocol, host, int(port))


@dataclass(frozen=True)
class BrokerRegistration:
    """A broker's ephemeral registration: what clients need to reach it.

    ``host`` and ``port`` are the top-level fields Kafka keeps for clients older
    than endpoints: the first PLAINTEXT endpoint, or ``None``/``-1`` if none.
    ``features`` maps a feature name to its supported (min, max) versions (v5).
    """

    broker_id: int
    host: str | None
    port: int
    endpoints: tuple[ListenerEndpoint, ...]
    rack: str | None = None
    jmx_port: int = -1
    timestamp_ms: int = 0
    version: int = BROKER_VERSION
    features: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_broker_id(self.broker_id)
        if self.host is not None and not isinstance(self.host, str):
            raise LayoutError(f"broker host must be a string or None, got {self.host!r}")
        for name, value, low, high in (
            ("port", self.port, -1, 65535),
            ("jmx_port", self.jmx_port, _INT32_MIN, _INT32_MAX),
            ("timestamp_ms", self.timestamp_ms, 0, _INT64_MAX),
            ("version", self.version, 1, BROKER_VERSION),
        ):
            if not _is_int(value) or not low <= value <= high:
                raise LayoutError(f"broker {name} must be an integer in [{low}, {high}], got {value!r}")
        if not isinstance(self.endpoints, tuple) or not all(
            isinstance(e, ListenerEndpoint) for e in self.endpoints
        ):
            raise LayoutError("broker endpoints must be a tuple of ListenerEndpoint")
        names = [e.listener_name for e in self.endpoints]
        if len(set(names)) != len(names):
            raise LayoutError(f"broker listener names repeat: {names}")
        if self.rack is not None and not isinstance(self.rack, str):
            raise LayoutError(f"broker rack must be a string or None, got {self.rack!r}")
        for name, span in dict(self.features).items():
            if (
                not isinstance(name, str)
                or not isinstance(span, tuple)
                or len(span) != 2
                or not all(_is_int(v) and 0 <= v <= 32767 for v in span)
                or span[0] > span[1]
            ):
                raise LayoutError(f"broker feature {name!r} must map to (min, max) versions, got {span!r}")

    @classmethod
    def for_endpoints(
        cls,
        broker_id: int,
        endpoints: Iterable[ListenerEndpoint],
        *,
        timestamp_ms: int,
        rack: str | None = None,
        jmx_port: int = -1,
        version: int = BROKER_VERSION,
        features: Mapping[str, tuple[int, int]] | None = None,
    ) -> "BrokerRegistration":
        """A registration whose top-level host/port are derived as Kafka derives them."""
        endpoints = tuple(endpoints)
        plain = next((e for e in endpoints if e.security_protocol == "PLAINTEXT"), None)
        return cls(
            broker_id,
            plain.host if plain else None,
            plain.port if plain else -1,
            endpoints,
            rack,
            jmx_port,
            timestamp_ms,
            version,
            dict(features or {}),
        )

    def plaintext_address(self) -> tuple[str, int]:
        """(host, port) of the first PLAINTEXT endpoint, else of the first endpoint."""
        return self.address_for("PLAINTEXT")

    def address_for(self, protocol: str) -> tuple[str, int]:
        """(host, port) of the first endpoint speaking ``protocol`` (see
        :func:`client_protocol`), else of the first PLAINTEXT one, else of
        the first endpoint: a broker may keep a listener of each kind, and a
        client reaches only the one that speaks what it speaks."""
        if not self.endpoints:
            raise LayoutError(f"broker {self.broker_id} has no endpoints")
        for wanted in (protocol, "PLAINTEXT"):
            chosen = next((e for e in self.endpoints if e.security_protocol == wanted), None)
            if chosen is not None:
                return chosen.host, chosen.port
        return self.endpoints[0].host, self.endpoints[0].port


def client_protocol(tls: bool, sasl: bool) -> str:
    """The security protocol of the Kafka listener a client connects to when
    it speaks TLS (``tls``) and logs in with SASL (``sasl``).

    >>> client_protocol(tls=True, sasl=True), client_protocol(tls=False, sasl=False)
    ('SASL_SSL', 'PLAINTEXT')
    """
    return {(True, True): "SASL_SSL", (True, False): "SSL", (False, True): "SASL_PLAINTEXT",
            (False, False): "PLAINTEXT"}[(bool(tls), bool(sasl))]


def encode_broker(reg: BrokerRegistration) -> bytes:
    """The registration as Kafka writes it. Versions 4 and 5 (what Kafka 0.10 to 3.9 write)."""
    if reg.version not in (4, 5):
        raise LayoutError(f"broker registrations are written as version 4 or 5, not {reg.version}")
    values: dict[str, Any] = {
        "version": reg.version,
        "host": reg.host,
        "port": reg.port,
        "endpoints": [e.connection_string() for e in reg.endpoints],
        "jmx_port": reg.jmx_port,
        "timestamp": str(reg.timestamp_ms),  # Kafka writes the timestamp as a string
    }
    initial = list(values)
    if reg.rack is not None:
        values["rack"] = reg.rack
    # A small Scala immutable Map keeps insertion order, i.e. endpoint order.
    values["listener_security_protocol_map"] = {
        e.listener_name: e.security_protocol for e in reg.endpoints
    }
    if reg.version >= 5:
        values["features"] = {
            name: {"min_version": low, "max_version": high}
            for name, (low, high) in reg.features.items()
        }
    added = [k for k in values if k not in initial]
    return encode_json({k: values[k] for k in _scala_map_order(initial, added)})


def decode_broker(broker_id: int, data: bytes, where: str | None = None) -> BrokerRegistration:
    """Read a registration of any version Kafka wrote (1 to 5)."""
    where = where or broker_path(broker_id)
    fields = _Fields(_load(data, where), where)
    version = fields.version(BROKER_VERSION)
    jmx_port = fields.integer("jmx_port")
    timestamp = _timestamp(fields)
    rack = fields.string("rack", nullable=True) if fields.has("rack") else None
    if version == 1:
        host = fields.string("host")
        port = fields.integer("port", 0, 65535)
        endpoints: tuple[ListenerEndpoint, ...] = (_endpoint(fields, "PLAINTEXT", host, port),)
    else:
        host = fields.string("host", nullable=True) if fields.has("host") else None
        port = fields.integer("port", -1, 65535) if fields.has("port") else -1
        protocols = None
        if fields.has("listener_security_protocol_map"):
            protocols = fields.mapping("listener_security_protocol_map")
            for name, proto in protocols.items():
                if proto not in SECURITY_PROTOCOLS:
                    raise fields.fail(
                        "listener_security_protocol_map", f"maps {name!r} to unknown {proto!r}"
                    )
        listed = fields.get("endpoints")
        if not isinstance(listed, list):
            raise fields.fail("endpoints", f"must be a list, got {listed!r}")
        endpoints = tuple(_parse_endpoint(text, protocols, where) for text in listed)
    features = _features(fields) if fields.has("features") else {}
    with _prefix_errors(where):
        return BrokerRegistration(
            broker_id, host, port, endpoints, rack, jmx_port, timestamp, version, features
        )


def _endpoint(fields: _Fields, listener: str, host: str, port: int) -> ListenerEndpoint:
    with _prefix_errors(fields.where):
        return ListenerEndpoint(listener, listener, host, port)


def _timestamp(fields: _Fields) -> int:
    # Kafka never reads it back; a registration without one still names a broker.
    if not fields.has("timestamp"):
        return 0
    value = fields.get("timestamp")
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 19:
        value = int(value)
    if not _is_int(value) or not 0 <= value <= _INT64_MAX:
        raise fields.fail("timestamp", f"must be milliseconds as a decimal string, got {value!r}")
    return value


def _features(fields: _Fields) -> dict[str, tuple[int, int]]:
    out = {}
    for name, span in fields.mapping("features").items():
        if not isinstance(span, dict):
            raise fields.fail("features", f"has {name!r} mapped to {span!r}, not an object")
        inner = _Fields(span, f"{fields.where}: feature {name!r}")
        out[name] = (inner.integer("min_version", 0, 32767), inner.integer("max_version", 0, 32767))
    return out


# ---------------------------------------------------------------------------
# /brokers/topics/<topic>

TOPIC_VERSION = 3


@dataclass(frozen=True)
class TopicAssignment:
    """Which brokers hold each partition of a topic (partition -> replica ids, leader first)."""

    partitions: Mapping[int, tuple[int, ...]]
    version: int = 1
    topic_id: str | None = None

    def __post_init__(self) -> None:
        if not _is_int(self.version) or not 1 <= self.version <= TOPIC_VERSION:
            raise LayoutError(f"topic version must be 1 to {TOPIC_VERSION}, got {self.version!r}")
        if self.topic_id is not None and self.version < 3:
            raise LayoutError(f"a topic id needs topic version 3, not {self.version}")
        if self.topic_id is not None:
            _check_topic_id(self.topic_id)
        for partition, replicas in dict(self.partitions).items():
            _validate_partition(partition)
            if not isinstance(replicas, tuple) or not all(
                _is_int(r) and 0 <= r <= _INT32_MAX for r in replicas
            ):
                raise LayoutError(
                    f"partition {partition}: replicas must be a tuple of broker ids, got {replicas!r}"
                )


def _check_uuid(value: object, what: str) -> str:
    # Kafka's Uuid.toString: 16 bytes in URL-safe base64 without padding.
    raw = b""
    if isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9_-]{22}", value):
        try:
            raw = base64.urlsafe_b64decode(value + "==")
        except (binascii.Error, ValueError):
            raw = b""
    if len(raw) != 16:
        raise LayoutError(f"{what} {value!r} is not a Kafka Uuid")
    return value


def new_topic_assignment(partitions: Mapping[int, tuple[int, ...]]) -> TopicAssignment:
    """A topic node as Kafka 2.8 and later write it: version 3, with a new
    random topic id (an older topic given one keeps its partitions)."""
    return TopicAssignment(partitions, TOPIC_VERSION, kafka_uuid(uuid.uuid4().bytes))


def _check_topic_id(topic_id: object) -> str:
    return _check_uuid(topic_id, "topic id")


def _decimal_key(fields: _Fields, key: str, name: str) -> int:
    # Kafka writes partition ids as canonical decimal strings; anything else
    # (negative, padded, "+1") would let two keys name one partition.
    if not key.isascii() or not key.isdigit() or str(int(key)) != key or int(key) > _INT32_MAX:
        raise fields.fail(name, f"has key {key!r}, which is not a partition id")
    return int(key)


def encode_topic(assignment: TopicAssignment) -> bytes:
    """The assignment as Kafka writes it for the assignment's version.

    v1 (Kafka 0.8 to 2.3) and v2 (2.4 to 2.7) come from small Scala maps that keep
    insertion order; v3 (2.8 and later) from a mutable.HashMap.
    """
    keys = _scala_map_order([str(p) for p in assignment.partitions])
    partitions = {k: list(assignment.partitions[int(k)]) for k in keys}
    if assignment.version == 1:
        return encode_json({"version": 1, "partitions": partitions})
    values: dict[str, Any] = {
        "version": assignment.version,
        "partitions": partitions,
        "adding_replicas": {},
        "removing_replicas": {},
    }
    if assignment.version == 2:
        return encode_json(values)
    initial = list(values)
    if assignment.topic_id is not None:
        values["topic_id"] = assignment.topic_id
    order = _scala_map_order(initial, [k for k in values if k not in initial])
    return encode_json({k: values[k] for k in order})


def decode_topic(topic: str, data: bytes, where: str | None = None) -> TopicAssignment:
    """Read an assignment of any version Kafka wrote (1 to 3).

    Replicas being added or removed by a reassignment are checked but not kept:
    the coordinator only needs where each partition lives now.
    """
    where = where or topic_path(topic)
    validate_topic_name(topic)
    fields = _Fields(_load(data, where), where)
    version = fields.version(TOPIC_VERSION)
    partitions = {
        _decimal_key(fields, key, "partitions"): fields.ints("partitions", replicas)
        for key, replicas in fields.mapping("partitions").items()
    }
    for moving in ("adding_replicas", "removing_replicas"):
        if fields.has(moving):
            for key, replicas in fields.mapping(moving).items():
                _decimal_key(fields, key, moving)
                fields.ints(moving, replicas)
    topic_id = None
    if fields.has("topic_id"):
        topic_id = fields.string("topic_id")
        try:
            _check_topic_id(topic_id)
        except LayoutError as exc:
            raise fields.fail("topic_id", str(exc)) from None
    # Development builds of Kafka 2.8 wrote a topic id under version 2; keep the
    # id and call it v3, the version that defines the field.
    if topic_id is not None and version < 3:
        version = 3
    return TopicAssignment(dict(sorted(partitions.items())), version, topic_id)


# ---------------------------------------------------------------------------
# /brokers/topics/<topic>/partitions/<n>/state

PARTITION_STATE_VERSION = 1
NO_LEADER = -1


@dataclass(frozen=True)
class PartitionState:
    """A partition's leader and in-sync replicas, as the Kafka controller records them."""

    leader: int
    leader_epoch: int
    controller_epoch: int
    isr: tuple[int, ...]
    version: int = PARTITION_STATE_VERSION

    def __post_init__(self) -> None:
        # Kafka's controller writes -1 for "no leader" and -2 while deleting.
        if not _is_int(self.leader) or not -2 <= self.leader <= _INT32_MAX:
            raise LayoutError(f"leader must be a broker id, -1 or -2, got {self.leader!r}")
        for name in ("leader_epoch", "controller_epoch"):
            value = getattr(self, name)
            if not _is_int(value) or not 0 <= value <= _INT32_MAX:
                raise LayoutError(f"{name} must be an integer in [0, {_INT32_MAX}], got {value!r}")
        if not isinstance(self.isr, tuple) or not all(
            _is_int(r) and 0 <= r <= _INT32_MAX for r in self.isr
        ):
            raise LayoutError(f"isr must be a tuple of broker ids, got {self.isr!r}")
        if self.version != PARTITION_STATE_VERSION:
            raise LayoutError(f"partition state version must be 1, got {self.version!r}")


def encode_partition_state(state: PartitionState) -> bytes:
    # Kafka builds this from a five-entry immutable Scala map; its hash order has
    # been the same in every Kafka release.
    return encode_json(
        {
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "version": state.version,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
        }
    )


def decode_partition_state(data: bytes, where: str = "partition state") -> PartitionState:
    """Read a partition state node. ``leader_recovery_state`` (Kafka 3.2+) is checked, not kept."""
    fields = _Fields(_load(data, where), where)
    version = fields.version(PARTITION_STATE_VERSION)
    if fields.has("leader_recovery_state"):
        fields.integer("leader_recovery_state", 0, 1)
    # The fields are read first: their errors name the node already.
    leader, leader_epoch = fields.integer("leader", -2), fields.integer("leader_epoch", 0)
    controller_epoch, isr = fields.integer("controller_epoch", 0), fields.ints("isr")
    with _prefix_errors(where):
        return PartitionState(leader, leader_epoch, controller_epoch, isr, version)


# ---------------------------------------------------------------------------
# /cluster/id

# Kafka writes the version as a string here, unlike in its other nodes.
CLUSTER_ID_VERSION = "1"


def kafka_uuid(raw: bytes) -> str:
    """Kafka's Uuid text form of 16 bytes (a random UUID's for the cluster id
    and topic ids): URL-safe base64 without padding, 22 characters."""
    if not isinstance(raw, (bytes, bytearray)) or len(raw) != 16:
        raise LayoutError("a Kafka Uuid is made of 16 bytes")
    return base64.urlsafe_b64encode(bytes(raw)).decode("ascii").rstrip("=")


def parse_kafka_uuid(text: str) -> uuid.UUID:
    """A Kafka Uuid's text form as a UUID (what the Kafka protocol carries)."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(_check_uuid(text, "Kafka Uuid") + "=="))


def encode_cluster_id(cluster_id: str) -> bytes:
    """``{"version":"1","id":"<id>"}``, byte for byte as Kafka writes it."""
    _check_uuid(cluster_id, "cluster id")
    return encode_json({"version": CLUSTER_ID_VERSION, "id": cluster_id})


def decode_cluster_id(data: bytes, where: str = CLUSTER_ID_PATH) -> str:
    """The id in a /cluster/id node. Kafka reads only ``id``; the version is
    checked to be the one Kafka writes, as a string or a number."""
    fields = _Fields(_load(data, where), where)
    version = fields.get("version")
    if version not in (CLUSTER_ID_VERSION, int(CLUSTER_ID_VERSION)) or isinstance(version, bool):
        raise fields.fail("version", f"is {version!r}; only version 1 is known")
    cluster_id = fields.string("id")
    try:
        return _check_uuid(cluster_id, "cluster id")
    except LayoutError as exc:
        raise fields.fail("id", str(exc)) from None


# ---------------------------------------------------------------------------
# /latest_producer_id_block

# Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE: a broker claims this many at once.
PRODUCER_ID_BLOCK_SIZE = 1000
PRODUCER_ID_BLOCK_VERSION = 1


class ProducerIdsExhausted(LayoutError):
    """Every producer id up to 2**63 - 1 has been handed out."""


@dataclass(frozen=True)
class ProducerIdBlock:
    """The producer ids ``first`` to ``last`` (inclusive), claimed by ``broker``."""

    broker: int
    first: int
    last: int


def next_producer_id_block(current: Optional[ProducerIdBlock], broker_id: int) -> ProducerIdBlock:
    """The block after ``current`` (the first, from 0, when there is none),
    as Kafka's ZkProducerIdManager claims it: ids are never handed out twice,
    across brokers and restarts, and never pass 2**63 - 1."""
    if current is None:
        return ProducerIdBlock(broker_id, 0, PRODUCER_ID_BLOCK_SIZE - 1)
    if current.last > _INT64_MAX - PRODUCER_ID_BLOCK_SIZE:
        raise ProducerIdsExhausted(f"{PRODUCER_ID_BLOCK_PATH}: every producer id has been handed out "
                                   f"(the last block ends at {current.last})")
    return ProducerIdBlock(broker_id, current.last + 1, current.last + PRODUCER_ID_BLOCK_SIZE)


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    """``{"version":1,"broker":0,"block_start":"0","block_end":"999"}``, as
    Kafka writes it (the ids as strings)."""
    return encode_json({"version": PRODUCER_ID_BLOCK_VERSION, "broker": block.broker,
                        "block_start": str(block.first), "block_end": str(block.last)})


def decode_producer_id_block(data: bytes, where: str = PRODUCER_ID_BLOCK_PATH) -> ProducerIdBlock:
    fields = _Fields(_load(data, where), where)
    broker = fields.integer("broker", low=-1)
    ids = []
    for key in ("block_start", "block_end"):
        text = fields.string(key)
        if not text.isascii() or not text.isdigit() or int(text) > _INT64_MAX:
            raise fields.fail(key, f"must be a decimal id in [0, {_INT64_MAX}], got {text!r}")
        ids.append(int(text))
    first, last = ids
    if last < first:
        raise fields.fail("block_end", f"is {last}, before block_start {first}")
    return ProducerIdBlock(broker, first, last)
