"""The broker's settings under Kafka's config names, as DescribeConfigs
reports them and CreateTopics checks the configs it is sent against.

zkcoord keeps no per-topic configs: every partition log is stored, flushed
and expired by the broker's LogConfig, so a topic's configs are the broker's
settings under their topic names (Kafka's synonyms: ``segment.bytes`` is the
broker's ``log.segment.bytes``). A value is a default when the broker runs
with zkcoord's default for it (source DEFAULT_CONFIG), else it was set when
the broker started (STATIC_BROKER_CONFIG). Behaviours that are fixed (the
broker only deletes, stores batches as produced, keeps the producer's
timestamps, down-converts for old clients) are listed as defaults.

Pure: a table and functions of a BrokerConfig.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

from zkcoord import settings
from zkcoord.broker.config import BrokerConfig, LogConfig

# Kafka's DescribeConfigs ConfigSource
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# Kafka's ConfigType (DescribeConfigs v3+)
BOOLEAN, STRING, INT, LONG, LIST = 1, 2, 3, 5, 7

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4

_LONG_MAX = 2**63 - 1  # Kafka's "never" for the flush settings


class ConfigEntry(NamedTuple):
    name: str
    value: Optional[str]
    source: int
    config_type: int
    documentation: str
    default_value: Optional[str]  # what zkcoord's default would make it

    @property
    def is_default(self) -> bool:
        return self.source == DEFAULT_CONFIG


class _Setting(NamedTuple):
    topic_name: Optional[str]  # None: a setting of the broker alone
    broker_name: str
    config_type: int
    documentation: str
    value: Callable[[BrokerConfig], object]
    default: object  # zkcoord's default, rendered like value; None: none (set at start)


def _log(name: str) -> Callable[[BrokerConfig], object]:
    return lambda config: getattr(config.log, name)


def _broker(name: str) -> Callable[[BrokerConfig], object]:
    return lambda config: getattr(config, name)


def _fixed(value: object) -> Callable[[BrokerConfig], object]:
    return lambda _config: value


def _flush(name: str) -> Callable[[BrokerConfig], object]:
    return lambda config: _LONG_MAX if getattr(config.log, name) is None else getattr(config.log, name)


def _largest_batch(config: BrokerConfig) -> int:
    # A produce is refused when its batches exceed a segment, and a request
    # larger than max_request_bytes is not read.
    return min(config.log.segment_bytes, config.max_request_bytes)


_NO_DEFAULT = object()
_TABLE = (
    _Setting("cleanup.policy", "log.cleanup.policy", LIST,
             "old segments are deleted (retention); the broker does not compact", _fixed("delete"), "delete"),
    _Setting("compression.type", "compression.type", STRING,
             "batches are stored as the producer compressed them", _fixed("producer"), "producer"),
    _Setting("flush.messages", "log.flush.interval.messages", LONG,
             "fsync a partition after this many records", _flush("flush_messages"), _LONG_MAX),
    _Setting("flush.ms", "log.flush.interval.ms", LONG,
             "fsync a partition this long after its last fsync", _flush("flush_ms"), _LONG_MAX),
    _Setting("index.interval.bytes", "log.index.interval.bytes", INT,
             "bytes of log between two entries of a segment's index", _log("index_interval_bytes"),
             settings.default(LogConfig, "index_interval_bytes")),
    _Setting("max.message.bytes", "message.max.bytes", INT,
             "the largest batches one produce may append to a partition (a segment, and a request, bound it)",
             _largest_batch, min(settings.default(LogConfig, "segment_bytes"),
                                 settings.default(BrokerConfig, "max_request_bytes"))),
    _Setting("message.downconversion.enable", "log.message.downconversion.enable", BOOLEAN,
             "fetches of version 3 and older get the old message formats", _fixed("true"), "true"),
    _Setting("message.timestamp.type", "log.message.timestamp.type", STRING,
             "records keep the timestamps their producers gave", _fixed("CreateTime"), "CreateTime"),
    _Setting("retention.bytes", "log.retention.bytes", LONG,
             "delete a partition's oldest segments beyond this size (-1: keep all)", _log("retention_bytes"),
             settings.default(LogConfig, "retention_bytes")),
    _Setting("retention.ms", "log.retention.ms", LONG,
             "delete segments older than this (-1: keep all)", _log("retention_ms"),
             settings.default(LogConfig, "retention_ms")),
    _Setting("segment.bytes", "log.segment.bytes", INT,
             "size at which a partition's log rolls to a new segment", _log("segment_bytes"),
             settings.default(LogConfig, "segment_bytes")),
    _Setting(None, "auto.create.topics.enable", BOOLEAN,
             "topics are created only by CreateTopics or `zkcoord topics create`", _fixed("false"), "false"),
    _Setting(None, "broker.id", INT, "the broker's id, as in /brokers/ids", _broker("broker_id"), _NO_DEFAULT),
    _Setting(None, "broker.rack", STRING, "the broker's rack", _broker("rack"), None),
    _Setting(None, "connections.max.idle.ms", LONG, "close a connection that sends nothing for this long",
             _broker("idle_timeout_ms"), settings.default(BrokerConfig, "idle_timeout_ms")),
    _Setting(None, "default.replication.factor", INT, "replicas of a partition: always one",
             _fixed(1), 1),
    _Setting(None, "log.dirs", STRING, "directory of the partition logs", _broker("data_dir"), _NO_DEFAULT),
    _Setting(None, "log.retention.check.interval.ms", LONG, "how often retention looks for segments to delete",
             _broker("retention_check_ms"), settings.default(BrokerConfig, "retention_check_ms")),
    _Setting(None, "max.connections", INT, "most client connections served at once",
             _broker("max_connections"), settings.default(BrokerConfig, "max_connections")),
    _Setting(None, "num.partitions", INT, "partitions of a topic created without a count", _fixed(1), 1),
    _Setting(None, "socket.request.max.bytes", INT, "largest request accepted",
             _broker("max_request_bytes"), settings.default(BrokerConfig, "max_request_bytes")),
)

# What a CreateTopics without a count or a replication factor (-1) gets.
DEFAULT_PARTITIONS = 1
DEFAULT_REPLICATION_FACTOR = 1


def _render(value: object) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _entry(setting: _Setting, name: str, config: BrokerConfig) -> ConfigEntry:
    value = _render(setting.value(config))
    default = None if setting.default is _NO_DEFAULT else _render(setting.default)
    source = DEFAULT_CONFIG if setting.default is not _NO_DEFAULT and value == default else STATIC_BROKER_CONFIG
    return ConfigEntry(name, value, source, setting.config_type, setting.documentation, default)


def topic_configs(config: BrokerConfig) -> list[ConfigEntry]:
    """Every topic's configs (all topics have the same), by name."""
    return [_entry(s, s.topic_name, config) for s in _TABLE if s.topic_name is not None]


def broker_configs(config: BrokerConfig) -> list[ConfigEntry]:
    """The broker's own settings under their broker names, by name."""
    return sorted((_entry(s, s.broker_name, config) for s in _TABLE), key=lambda e: e.name)


def broker_name_of(topic_name: str) -> str:
    """The broker setting a topic config comes from (its synonym)."""
    return next(s.broker_name for s in _TABLE if s.topic_name == topic_name)
