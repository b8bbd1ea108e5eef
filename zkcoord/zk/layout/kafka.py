"""The ZooKeeper layout: every path zkcoord reads or writes, and the bytes stored there.

Where Kafka defines a node (broker registrations, topic assignments, partition
state, the 0.8 consumer offsets and owners) the codecs here write the bytes a
ZooKeeper-mode Kafka writes and read every version Kafka ever wrote, so that
Kafka's tools, and tools built for Kafka, read our data and we read theirs. The
nodes that are zkcoord's own are small JSON objects with a ``version`` field;
docs/ZOOKEEPER.md describes all of them.

Everything here is pure: no ZooKeeper session, no clock. Bad input of any kind
raises :class:`LayoutError` (or a subclass) naming the node and the field.

The formats were read from Kafka's ``kafka/zk/ZkData.scala`` (``BrokerIdZNode``,
``TopicZNode``, ``TopicPartitionStateZNode``, ``ConsumerOffset``) and
``kafka/cluster/EndPoint.scala``, and checked against what Kafka brokers of
each era left in ZooKeeper.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from zkcoord.errors import ConfigError, ZkcoordError

# ---------------------------------------------------------------------------
# errors


class LayoutError(ZkcoordError):
    """A path argument or a node's content does not fit the layout."""


class InvalidName(LayoutError, ConfigError):
    """A name that would become a path segment is not allowed."""


class InvalidTopicName(InvalidName):
    """A topic name that Kafka would refuse."""


class InvalidGroupId(InvalidName):
    """A consumer group id that cannot be a ZooKeeper path segment."""


# ---------------------------------------------------------------------------
# names

_TOPIC_MAX = 249  # Kafka's limit: the name plus a partition suffix must fit a file name
_TOPIC_CHARS = re.compile(r"[a-zA-Z0-9._-]+")
# ZooKeeper refuses these characters anywhere in a path (PathUtils.validatePath).
_ZK_BAD_CHARS = re.compile("[\u0000-\u001f\u007f-\u009f\ud800-\uf8ff\ufff0-\uffff]")


def validate_topic_name(name: object) -> str:
    """Return ``name`` if Kafka accepts it as a topic name, else raise InvalidTopicName."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicName(f"topic name must be a non-empty string, got {name!r}")
    if name in (".", ".."):
        raise InvalidTopicName(f"topic name cannot be {name!r}")
    if len(name) > _TOPIC_MAX:
        raise InvalidTopicName(f"topic name is {len(name)} characters, the limit is {_TOPIC_MAX}")
    if not _TOPIC_CHARS.fullmatch(name):
        raise InvalidTopicName(
            f"topic name {name!r} may contain only ASCII letters, digits, '.', '_' and '-'"
        )
    return name


def _validate_segment(value: object, what: str, error: type[LayoutError]) -> str:
    if not isinstance(value, str) or not value:
        raise error(f"{what} must be a non-empty string, got {value!r}")
    if value in (".", "..") or "/" in value or _ZK_BAD_CHARS.search(value):
        raise error(f"{what} {value!r} cannot be a ZooKeeper path segment")
    return value


def validate_group_id(group: object) -> str:
    """Return ``group`` if it can be a path segment under /consumers, else raise InvalidGroupId."""
    return _validate_segment(group, "group id", InvalidGroupId)


def _validate_partition(partition: object) -> int:
    if not _is_int(partition) or not 0 <= partition <= _INT32_MAX:
        raise LayoutError(f"partition must be an integer in [0, {_INT32_MAX}], got {partition!r}")
    return partition


# ---------------------------------------------------------------------------
# paths

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONSUMERS = "/consumers"
COORDINATOR_PATH = "/consumers/coordinator"
SERVERS = "/zkcoord/servers"
COORDINATOR_EPOCH_PATH = "/zkcoord/coordinator_epoch"
GROUPS = "/zkcoord/groups"
SLOTS = "/zkcoord/slots"


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{_check_broker_id(broker_id)}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{validate_topic_name(topic)}"


def partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partitions_path(topic)}/{_validate_partition(partition)}/state"


def group_path(group: str) -> str:
    if group == "coordinator":
        # /consumers/coordinator is the elected coordinator's node (seed design),
        # so a group of that name would collide with it.
        raise InvalidGroupId("group id 'coordinator' is reserved")
    return f"{CONSUMERS}/{validate_group_id(group)}"


def owners_path(group: str, topic: str | None = None) -> str:
    base = f"{group_path(group)}/owners"
    return base if topic is None else f"{base}/{validate_topic_name(topic)}"


def owner_path(group: str, topic: str, partition: int) -> str:
    return f"{owners_path(group, topic)}/{_validate_partition(partition)}"


def offsets_path(group: str, topic: str | None = None) -> str:
    base = f"{group_path(group)}/offsets"
    return base if topic is None else f"{base}/{validate_topic_name(topic)}"


def offset_path(group: str, topic: str, partition: int) -> str:
    return f"{offsets_path(group, topic)}/{_validate_partition(partition)}"


def server_path(server_id: str) -> str:
    return f"{SERVERS}/{_validate_segment(server_id, 'server id', InvalidName)}"


def group_failure_path(group: str) -> str:
    """Present while the group's last rebalance gave up after its retries."""
    group_path(group)
    return f"{GROUPS}/{group}/failure"


def _check_slot(slot: object) -> int:
    if not _is_int(slot) or not 0 <= slot <= _INT32_MAX:
        raise LayoutError(f"a coordinator slot must be an integer in [0, {_INT32_MAX}], got {slot!r}")
    return slot


def slot_coordinator_path(slot: int) -> str:
    """The election node of a coordinator slot. Slot 0's is the seed's
    /consumers/coordinator, so that a cluster of one slot is the seed's layout."""
    return COORDINATOR_PATH if _check_slot(slot) == 0 else f"{SLOTS}/{slot}/coordinator"


def slot_epoch_path(slot: int) -> str:
    """The epoch node that fences a coordinator slot's writes (slot 0: /zkcoord/coordinator_epoch)."""
    return COORDINATOR_EPOCH_PATH if _check_slot(slot) == 0 else f"{SLOTS}/{slot}/epoch"


def group_state_path(group: str) -> str:
    # Kept under /zkcoord rather than /consumers/<group> so that tools walking
    # the 0.8 consumer layout never meet a child they do not know.
    group_path(group)
    return f"{GROUPS}/{group}/state"


# ---------------------------------------------------------------------------
# JSON plumbing shared by every codec

_INT32_MAX = 2**31 - 1
_INT32_MIN = -(2**31)
_INT64_MAX = 2**63 - 1


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _load(data: object, where: str) -> dict[str, Any]:
    """Parse a node's bytes as one JSON object."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise LayoutError(f"{where}: expected bytes, got {type(data).__name__}")
    try:
        text = bytes(data).decode("utf-8")
        obj = json.loads(text, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise LayoutError(f"{where}: not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise LayoutError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    return obj


def encode_json(obj: Mapping[str, Any]) -> bytes:
    """Compact UTF-8 JSON, key order as given: the way Kafka's Jackson writes it."""
    try:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise LayoutError(f"cannot encode as JSON: {exc}") from None


class _Fields:
    """Typed access to one decoded JSON object; every failure names the node and field."""

    def __init__(self, obj: Mapping[str, Any], where: str):
        self.obj = obj
        self.where = where

    def fail(self, key: str, problem: str) -> LayoutError:
        return LayoutError(f"{self.where}: field {key!r} {problem}")

    def has(self, key: str) -> bool:
        return key in self.obj

    def get(self, key: str) -> Any:
        if key not in self.obj:
            raise self.fail(key, "is missing")
        return self.obj[key]

    def integer(self, key: str, low: int = _INT32_MIN, high: int = _INT32_MAX) -> int:
        value = self.get(key)
        if not _is_int(value) or not low <= value <= high:
            raise self.fail(key, f"must be an integer in [{low}, {high}], got {value!r}")
        return value

    def string(self, key: str, nullable: bool = False) -> str | None:
        value = self.get(key)
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {value!r}")
        return value

    def mapping(self, key: str) -> dict[str, Any]:
        value = self.get(key)
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a JSON object, got {value!r}")
        return value

    def ints(self, key: str, value: Any = None, low: int = 0) -> tuple[int, ...]:
        value = self.get(key) if value is None else value
        if not isinstance(value, list) or not all(
            _is_int(v) and low <= v <= _INT32_MAX for v in value
        ):
            raise self.fail(key, f"must be a list of integers in [{low}, {_INT32_MAX}], got {value!r}")
        return tuple(value)

    def version(self, known: int) -> int:
        version = self.integer("version")
        if not 1 <= version <= known:
            raise self.fail("version", f"is {version}; versions 1 to {known} are known")
        return version


def _decimal_key(fields: _Fields, key: str, name: str) -> int:
    # Kafka writes partition ids as canonical decimal strings; anything else
    # (negative, padded, "+1") would let two keys name one partition.
    if not key.isascii() or not key.isdigit() or str(int(key)) != key or int(key) > _INT32_MAX:
        raise fields.fail(name, f"has key {key!r}, which is not a partition id")
    return int(key)


# Kafka builds these JSON objects from Scala hash maps, so the key order Jackson
# writes is the map's iteration order. Kafka 3.x (built for Scala 2.13, the
# distribution Kafka recommends) uses mutable.HashMap: a table of 2**k buckets,
# bucket index = spread(hash) & (size - 1), each bucket sorted by spread hash.
# Reproducing that order is what makes our bytes equal Kafka's.


def _java_string_hash(text: str) -> int:
    units = text.encode("utf-16-be")  # Java hashes UTF-16 code units
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h


def _spread(key: str) -> int:
    h = _java_string_hash(key)
    h ^= h >> 16
    return h - 2**32 if h >= 2**31 else h  # compared as a signed Java int


def _scala_map_order(initial: Iterable[str], added: Iterable[str] = ()) -> list[str]:
    """Iteration order of ``mutable.HashMap(initial...)`` after ``+= added`` (Scala 2.13)."""
    initial = list(initial)
    keys = initial + list(added)
    if initial:
        size = 1 << max(2, (int((len(initial) + 1) / 0.75) - 1).bit_length())
    else:
        size = 16
    count = 0
    for _ in keys:
        if count + 1 >= int(size * 0.75):
            size *= 2
        count += 1
    return sorted(keys, key=lambda k: (_spread(k) & (size - 1), _spread(k)))


# ---------------------------------------------------------------------------
# /brokers/ids/<id>

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
BROKER_VERSION = 5  # newest registration format Kafka wrote (2.7 to 3.9)
_ENDPOINT = re.compile(r"([A-Za-z0-9_.-]+)://(\[[0-9A-Za-z%.:]*\]|[0-9A-Za-z%._-]*):([0-9]{1,5})")


def _check_broker_id(broker_id: object) -> int:
    if not _is_int(broker_id) or not 0 <= broker_id <= _INT32_MAX:
        raise LayoutError(f"broker id must be an integer in [0, {_INT32_MAX}], got {broker_id!r}")
    return broker_id


@dataclass(frozen=True)
class Endpoint:
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


def _parse_endpoint(text: object, protocols: Mapping[str, str] | None, where: str) -> Endpoint:
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
    try:
        return Endpoint(listener, protocol, host, int(port))
    except LayoutError as exc:
        raise LayoutError(f"{where}: field 'endpoints': {exc}") from None


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
    endpoints: tuple[Endpoint, ...]
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
            isinstance(e, Endpoint) for e in self.endpoints
        ):
            raise LayoutError("broker endpoints must be a tuple of Endpoint")
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
        endpoints: Iterable[Endpoint],
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
        if not self.endpoints:
            raise LayoutError(f"broker {self.broker_id} has no endpoints")
        chosen = next(
            (e for e in self.endpoints if e.security_protocol == "PLAINTEXT"), self.endpoints[0]
        )
        return chosen.host, chosen.port


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
        endpoints: tuple[Endpoint, ...] = (_endpoint(fields, "PLAINTEXT", host, port),)
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
    try:
        return BrokerRegistration(
            broker_id, host, port, endpoints, rack, jmx_port, timestamp, version, features
        )
    except LayoutError as exc:
        raise LayoutError(f"{where}: {exc}") from None


def _endpoint(fields: _Fields, listener: str, host: str, port: int) -> Endpoint:
    try:
        return Endpoint(listener, listener, host, port)
    except LayoutError as exc:
        raise LayoutError(f"{fields.where}: {exc}") from None


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


def _check_topic_id(topic_id: object) -> str:
    # Kafka's Uuid.toString: 16 bytes in URL-safe base64 without padding.
    try:
        raw = base64.urlsafe_b64decode(topic_id + "==") if isinstance(topic_id, str) else b""
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 16 or not isinstance(topic_id, str) or len(topic_id) != 22:
        raise LayoutError(f"topic id {topic_id!r} is not a Kafka Uuid")
    return topic_id


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
    try:
        return PartitionState(
            fields.integer("leader", -2),
            fields.integer("leader_epoch", 0),
            fields.integer("controller_epoch", 0),
            fields.ints("isr"),
            version,
        )
    except LayoutError as exc:
        raise LayoutError(f"{where}: {exc}") from None


# ---------------------------------------------------------------------------
# /consumers/<group>/offsets/<topic>/<partition> and .../owners/...  (Kafka 0.8)


def encode_offset(offset: int) -> bytes:
    """The next offset to consume, as the decimal string Kafka 0.8 wrote."""
    if not _is_int(offset) or not 0 <= offset <= _INT64_MAX:
        raise LayoutError(f"offset must be an integer in [0, {_INT64_MAX}], got {offset!r}")
    return str(offset).encode("ascii")


def decode_offset(data: bytes, where: str = "offset") -> int:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise LayoutError(f"{where}: expected bytes, got {type(data).__name__}")
    raw = bytes(data)
    if not re.fullmatch(rb"[0-9]{1,19}", raw) or int(raw) > _INT64_MAX:
        raise LayoutError(f"{where}: {raw[:40]!r} is not a non-negative decimal offset")
    return int(raw)


def encode_owner(consumer_id: str) -> bytes:
    """The owning consumer's thread id as plain UTF-8 (Kafka 0.8 owner nodes)."""
    if not isinstance(consumer_id, str) or not consumer_id or _ZK_BAD_CHARS.search(consumer_id):
        raise LayoutError(f"consumer id must be a non-empty printable string, got {consumer_id!r}")
    return consumer_id.encode("utf-8")


def decode_owner(data: bytes, where: str = "owner") -> str:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise LayoutError(f"{where}: expected bytes, got {type(data).__name__}")
    try:
        owner = bytes(data).decode("utf-8")
        encode_owner(owner)
        return owner
    except (UnicodeDecodeError, LayoutError):
        raise LayoutError(f"{where}: {bytes(data)[:40]!r} is not a consumer id") from None


# ---------------------------------------------------------------------------
# zkcoord's own nodes: JSON objects with a "version" field


def decode_versioned(
    data: bytes, where: str, known_version: int, required: Iterable[str] = ()
) -> _Fields:
    """Parse one of our own nodes; check its version and that ``required`` keys are there."""
    fields = _Fields(_load(data, where), where)
    fields.version(known_version)
    for key in required:
        fields.get(key)
    return fields


def encode_coordinator(server_id: str) -> bytes:
    """Content of /consumers/coordinator: the elected server's id (seed design)."""
    _validate_segment(server_id, "server id", InvalidName)
    return server_id.encode("utf-8")


def decode_coordinator(data: bytes, where: str = COORDINATOR_PATH) -> str:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise LayoutError(f"{where}: expected bytes, got {type(data).__name__}")
    try:
        return _validate_segment(bytes(data).decode("utf-8"), "server id", InvalidName)
    except (UnicodeDecodeError, LayoutError):
        raise LayoutError(f"{where}: {bytes(data)[:40]!r} is not a server id") from None


@dataclass(frozen=True)
class ServerInfo:
    """Where a zkcoord server answers the coordinator protocol (/zkcoord/servers/<id>)."""

    server_id: str
    host: str
    port: int
    version: int = 1

    def __post_init__(self) -> None:
        _validate_segment(self.server_id, "server id", InvalidName)
        if not isinstance(self.host, str) or not self.host:
            raise LayoutError(f"server host must be a non-empty string, got {self.host!r}")
        if not _is_int(self.port) or not 1 <= self.port <= 65535:
            raise LayoutError(f"server port must be in [1, 65535], got {self.port!r}")
        if self.version != 1:
            raise LayoutError(f"server info version must be 1, got {self.version!r}")


def encode_server(info: ServerInfo) -> bytes:
    return encode_json({"version": info.version, "host": info.host, "port": info.port})


def decode_server(server_id: str, data: bytes, where: str | None = None) -> ServerInfo:
    where = where or server_path(server_id)
    fields = decode_versioned(data, where, 1)
    try:
        return ServerInfo(server_id, fields.string("host"), fields.integer("port", 1, 65535))
    except LayoutError as exc:
        raise LayoutError(f"{where}: {exc}") from None


def encode_coordinator_epoch(epoch: int) -> bytes:
    if not _is_int(epoch) or not 0 <= epoch <= _INT64_MAX:
        raise LayoutError(f"coordinator epoch must be an integer in [0, {_INT64_MAX}], got {epoch!r}")
    return encode_json({"version": 1, "epoch": epoch})


def decode_coordinator_epoch(data: bytes, where: str = COORDINATOR_EPOCH_PATH) -> int:
    return decode_versioned(data, where, 1).integer("epoch", 0, _INT64_MAX)


def encode_slot_count(slots: int) -> bytes:
    """Content of /zkcoord/slots: how many coordinator slots the cluster's
    groups are spread over (coordinator/slots.py), fixed when the first
    server creates it."""
    if not _is_int(slots) or not 1 <= slots <= _INT32_MAX:
        raise LayoutError(f"a slot count must be an integer in [1, {_INT32_MAX}], got {slots!r}")
    return encode_json({"version": 1, "slots": slots})


def decode_slot_count(data: bytes, where: str = SLOTS) -> int:
    return decode_versioned(data, where, 1).integer("slots", 1, _INT32_MAX)


@dataclass(frozen=True)
class GroupState:
    """What the coordinator persists per group so that a successor resumes from it.

    ``assignment`` maps a member id to the (topic, partition) pairs it owns in
    ``generation``; ``strategy`` names the assignor that produced it.
    ``lease_ms`` is the longest session timeout among those members: a member
    that loses its coordinator stops fetching within its session timeout, so a
    successor may hand a partition to someone else only after that long, unless
    its holder has come back to it (written as 0 by older states: no lease).
    ``running`` maps a member id to what it ran when the state was written,
    partitions being taken from it included: until they are stopped, a
    successor counts them as that member's too (absent in older states).
    """

    generation: int
    strategy: str
    assignment: Mapping[str, tuple[tuple[str, int], ...]]
    lease_ms: int = 0
    running: Mapping[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _is_int(self.generation) or not 0 <= self.generation <= _INT32_MAX:
            raise LayoutError(f"generation must be an integer in [0, {_INT32_MAX}], got {self.generation!r}")
        if not isinstance(self.strategy, str) or not self.strategy:
            raise LayoutError(f"strategy must be a non-empty string, got {self.strategy!r}")
        if not _is_int(self.lease_ms) or not 0 <= self.lease_ms <= _INT32_MAX:
            raise LayoutError(f"lease_ms must be an integer in [0, {_INT32_MAX}], got {self.lease_ms!r}")
        owned: set[tuple[str, int]] = set()
        for member, pairs in dict(self.assignment).items():
            _validate_member_partitions(member, pairs)
            for pair in pairs:
                if pair in owned:
                    # Exclusive ownership: one partition, one member.
                    raise LayoutError(f"partition {pair[0]}/{pair[1]} is assigned twice")
                owned.add(pair)
        for member, pairs in dict(self.running).items():
            _validate_member_partitions(member, pairs)


def _validate_member_partitions(member, pairs) -> None:
    if not isinstance(member, str) or not member or not isinstance(pairs, tuple):
        raise LayoutError(f"partitions of member {member!r} must be a tuple of (topic, partition)")
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise LayoutError(f"member {member!r}: {pair!r} is not (topic, partition)")
        validate_topic_name(pair[0])
        _validate_partition(pair[1])


# Version 2 groups each member's partitions by topic and writes ``running``
# only for members that do not run exactly their assignment: a group of
# 20,000 partitions, all running as assigned, takes about 110 KB instead of
# the 660 KB of version 1, which listed every (topic, partition) twice.
GROUP_STATE_VERSION = 2


def _by_topic(pairs: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for topic, partition in sorted(pairs):
        grouped.setdefault(topic, []).append(partition)
    return grouped


def encode_group_state(state: GroupState) -> bytes:
    """Version 2 (decode_group_state reads 1 and 2)."""
    running = {m: pairs for m, pairs in state.running.items() if pairs}
    differs = {m: running.get(m, ()) for m in set(state.assignment) | set(running)
               if set(running.get(m, ())) != set(state.assignment.get(m, ()))}
    return encode_json(
        {
            "version": GROUP_STATE_VERSION,
            "generation": state.generation,
            "strategy": state.strategy,
            "assignment": {m: _by_topic(pairs) for m, pairs in state.assignment.items()},
            "lease_ms": state.lease_ms,
            "running": {m: _by_topic(differs[m]) for m in sorted(differs)},
        }
    )


def decode_group_state(data: bytes, where: str = "group state") -> GroupState:
    """A group's state, of version 1 or 2. ``running`` comes back without
    members that run nothing (the same to every reader)."""
    fields = decode_versioned(data, where, GROUP_STATE_VERSION, ("generation", "strategy", "assignment"))
    version = fields.integer("version")

    def partitions_by_member(name: str) -> dict[str, tuple[tuple[str, int], ...]]:
        result = {}
        for member, held in fields.mapping(name).items():
            if version == 1:
                if not isinstance(held, list) or not all(
                    isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and _is_int(p[1]) for p in held
                ):
                    raise fields.fail(name, f"of member {member!r} must be [[topic, partition], ...]")
                result[member] = tuple((t, p) for t, p in held)
            else:
                if not isinstance(held, dict) or not all(
                    isinstance(ps, list) and all(_is_int(p) for p in ps) for ps in held.values()
                ):
                    raise fields.fail(name, f"of member {member!r} must be {{topic: [partition, ...]}}")
                result[member] = tuple((t, p) for t, ps in held.items() for p in ps)
        return result

    assignment = partitions_by_member("assignment")
    running = partitions_by_member("running") if fields.has("running") else {}
    if version >= 2:  # members left out run exactly their assignment
        running = {**{m: pairs for m, pairs in assignment.items() if m not in running}, **running}
    running = {m: pairs for m, pairs in running.items() if pairs}
    try:
        lease_ms = fields.integer("lease_ms", 0) if fields.has("lease_ms") else 0
        return GroupState(fields.integer("generation", 0), fields.string("strategy"), assignment,
                          lease_ms=lease_ms, running=running)
    except LayoutError as exc:
        raise LayoutError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class GroupFailure:
    """Why a group's rebalance gave up: visible to operators until a retry succeeds."""

    generation: int
    attempts: int
    error: str
    version: int = 1


def encode_group_failure(failure: GroupFailure) -> bytes:
    return encode_json({"version": failure.version, "generation": failure.generation,
                        "attempts": failure.attempts, "error": failure.error})


def decode_group_failure(data: bytes, where: str = "group failure") -> GroupFailure:
    fields = decode_versioned(data, where, 1, ("generation", "attempts", "error"))
    return GroupFailure(fields.integer("generation", 0), fields.integer("attempts", 0), fields.string("error"))
