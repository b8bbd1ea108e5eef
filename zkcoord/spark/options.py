"""The options of ``format("zkcoord")``, parsed once into one checked value.

Names follow Spark's own Kafka source where the idea is the same
(``subscribe``, ``subscribePattern``, ``startingOffsets``, ``endingOffsets``,
``maxOffsetsPerTrigger``, ``minPartitions``, ``failOnDataLoss``,
``kafkaConsumer.pollTimeoutMs``; ``isolationLevel`` is its
``kafka.isolation.level``, as the thin consumer's ``isolation_level``); TLS to the servers and brokers takes
librdkafka's PEM options (``ssl.ca.location``, ``ssl.certificate.location``,
``ssl.key.location``) and SASL with the brokers librdkafka's user
(``sasl.username``), its password from a file or an environment variable
(``sasl.passwordFile``, ``sasl.passwordEnv``, never an option's value: options
show in plans); ``zookeeper`` is where zkcoord keeps groups and offsets, and
where topics, partitions and brokers are found when Kafka registers them
there (the embedded broker, Kafka in ZooKeeper mode); beside a Kafka in
KRaft mode, ``kafka.bootstrap.servers`` names its brokers, and they are asked
instead (Metadata). ``group`` makes a streaming query a member of a consumer
group. The ``zookeeper.*`` options are zkcoord's ZooKeeper credentials, TLS
and ACL settings (:class:`~zkcoord.zk.security.ZkSecurity`), each named after
its setting: ``zookeeper.auth``, ``zookeeper.user``, ``zookeeper.passwordFile``,
``zookeeper.caFile``... Pure: no ZooKeeper, no Spark.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Union

from zkcoord import settings
from zkcoord.addresses import parse_bootstrap
from zkcoord.consumer.config import ConsumerConfig
from zkcoord.errors import ConfigError
from zkcoord.fetch.isolation import ISOLATION_LEVELS
from zkcoord.member.config import MemberConfig
from zkcoord.patterns import PatternError, check_pattern, matches
from zkcoord.security.config import PLAIN, TlsConfig
from zkcoord.security.secrets import PASSWORD_ENV, password_for
from zkcoord.spark.errors import SourceOptionError
from zkcoord.spark.login import Login
from zkcoord.spark.offsets import PartitionOffsets, parse_offsets_json
from zkcoord.zk import layout
from zkcoord.zk.security import ZkSecurity

EARLIEST = "earliest"
LATEST = "latest"
COMMITTED = "committed"

# A position is a policy name or explicit offsets per partition (Spark's
# JSON: -2 means earliest, -1 latest).
Position = Union[str, PartitionOffsets]

_KNOWN = {
    "zookeeper", "subscribe", "subscribepattern", "startingoffsets", "endingoffsets",
    "maxoffsetspertrigger", "minpartitions", "failondataloss", "kafkaconsumer.polltimeoutms",
    "group", "servers", "sessiontimeoutms", "handofftimeoutms", "isolationlevel",
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
    "sasl.username", "sasl.passwordfile", "sasl.passwordenv", "sasl.passwordwithouttls",
    "kafka.bootstrap.servers",
}
# The TLS options, as TlsConfig's settings.
_TLS = {"ssl.ca.location": "ca", "ssl.certificate.location": "cert", "ssl.key.location": "key"}


def _zk_option(name: str) -> str:
    """The option of a ZkSecurity setting: zk_password_file -> zookeeper.passwordFile."""
    first, *rest = name.removeprefix("zk_").split("_")
    return "zookeeper." + first + "".join(word.capitalize() for word in rest)


# option -> (the setting's name, its type)
_ZK_OPTIONS = {_zk_option(f.name): (f.name, kind) for f, _, kind in settings.fields(ZkSecurity)}
_KNOWN |= {option.lower() for option in _ZK_OPTIONS}


@dataclass(frozen=True)
class SaslOptions:
    """Who the source is to the brokers and the coordinator, and where its
    password is: the first line of ``password_file``, else ``$password_env``."""

    user: str
    password_file: Optional[str] = None
    password_env: str = PASSWORD_ENV
    plain_without_tls: bool = False  # SASL/PLAIN may send the password without TLS

    def login(self) -> Login:
        """The login, its password read now (by the driver, when it plans)."""
        try:
            password = password_for(self.user, self.password_file, "sasl.username", "sasl.passwordFile",
                                    self.password_env)
        except ConfigError as exc:
            raise SourceOptionError(f"SASL options: {exc}") from None
        return Login(self.user, password, self.plain_without_tls)


def login(sasl: Optional[SaslOptions]) -> Optional[Login]:
    """``sasl``'s login, or None: anonymous."""
    return None if sasl is None else sasl.login()


@dataclass(frozen=True)
class SourceOptions:
    zookeeper: str
    topics: tuple[str, ...] = ()
    pattern: Optional[str] = None
    starting: Position = LATEST
    ending: Position = LATEST
    max_offsets_per_trigger: Optional[int] = None
    min_partitions: Optional[int] = None
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000
    group: Optional[str] = None
    servers: tuple[str, ...] = ()  # coordinator endpoints; empty: read /zkcoord/servers
    session_timeout_ms: int = settings.default(MemberConfig, "session_timeout_ms")  # a group member's, as any
    handoff_timeout_ms: int = 8_000
    isolation_level: str = settings.default(ConsumerConfig, "isolation_level")  # as a thin consumer's
    tls: TlsConfig = PLAIN  # to the servers and the brokers
    sasl: Optional[SaslOptions] = None  # None: anonymous to the brokers and the coordinator
    zk_security: ZkSecurity = dataclasses.field(default_factory=ZkSecurity)
    kafka_bootstrap: tuple[str, ...] = ()  # Kafka's brokers, asked for topics and leaders; empty: ZooKeeper's /brokers

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return matches(self.pattern, topic)
        return topic in self.topics


def parse_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check every option and return them as one value; raise SourceOptionError."""
    opts = {str(k).lower(): v for k, v in dict(options).items()}
    unknown = sorted(k for k in opts if k not in _KNOWN)
    if unknown:
        raise SourceOptionError(f"unknown option(s) for format('zkcoord'): {', '.join(unknown)}")
    zookeeper = (opts.get("zookeeper") or "").strip()
    if not zookeeper:
        raise SourceOptionError("option 'zookeeper' (the ZooKeeper connect string) is required")
    topics, pattern = _subscription(opts)
    group = opts.get("group")
    if group is not None:
        try:
            layout.group_path(group)
        except layout.InvalidName as exc:
            raise SourceOptionError(f"option 'group': {exc}") from None
    starting = _position(opts.get("startingoffsets"), "startingOffsets",
                         default=LATEST if streaming else EARLIEST, group=group)
    if streaming:
        if "endingoffsets" in opts:
            raise SourceOptionError("option 'endingOffsets' is for batch queries only")
        ending: Position = LATEST
    else:
        for name in ("maxoffsetspertrigger", "sessiontimeoutms", "handofftimeoutms"):
            if name in opts:
                raise SourceOptionError(f"option {name!r} is for streaming queries only")
        ending = _position(opts.get("endingoffsets"), "endingOffsets", default=LATEST, group=group)
        if ending == EARLIEST or (isinstance(ending, dict) and _has(ending, -2)):
            raise SourceOptionError("endingOffsets cannot be 'earliest' (or -2)")
        if isinstance(starting, dict) and _has(starting, -1):
            raise SourceOptionError("startingOffsets cannot use -1 (latest) in a batch query")
        if starting == LATEST:
            raise SourceOptionError("startingOffsets cannot be 'latest' in a batch query")
    servers = tuple(s.strip() for s in (opts.get("servers") or "").split(",") if s.strip())
    if servers:
        try:
            parse_bootstrap(servers)
        except ConfigError as exc:
            raise SourceOptionError(f"option 'servers': {exc}") from None
    kafka_bootstrap = (opts.get("kafka.bootstrap.servers") or "").strip()
    if kafka_bootstrap:
        try:
            kafka_bootstrap = tuple(f"{host}:{port}" for host, port in parse_bootstrap(kafka_bootstrap))
        except ConfigError as exc:
            raise SourceOptionError(f"option 'kafka.bootstrap.servers': {exc}") from None
    try:
        tls = TlsConfig(**{setting: opts[option] for option, setting in _TLS.items() if option in opts})
    except ConfigError as exc:
        raise SourceOptionError(f"TLS options: {exc}") from None
    # Options not given keep SourceOptions' defaults.
    given = {name: value for name, value in (
        ("max_offsets_per_trigger", _positive(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")),
        ("min_partitions", _positive(opts, "minpartitions", "minPartitions")),
        ("poll_timeout_ms", _positive(opts, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs")),
        ("session_timeout_ms", _positive(opts, "sessiontimeoutms", "sessionTimeoutMs")),
        ("handoff_timeout_ms", _positive(opts, "handofftimeoutms", "handoffTimeoutMs")),
    ) if value is not None}
    return SourceOptions(
        zookeeper=zookeeper,
        topics=topics,
        pattern=pattern,
        starting=starting,
        ending=ending,
        fail_on_data_loss=_boolean(opts.get("failondataloss", "true"), "failOnDataLoss"),
        group=group,
        servers=servers,
        tls=tls,
        sasl=_sasl(opts),
        zk_security=_zk_security(opts),
        isolation_level=_isolation_level(opts),
        kafka_bootstrap=kafka_bootstrap or (),
        **given,
    )


def zookeeper_options(security: ZkSecurity) -> dict[str, str]:
    """The source's options that give it ``security`` (those that differ from the defaults)."""
    defaults = ZkSecurity()
    return {option: str(getattr(security, name)).lower() if kind is bool else str(getattr(security, name))
            for option, (name, kind) in _ZK_OPTIONS.items() if getattr(security, name) != getattr(defaults, name)}


def _sasl(opts: Mapping[str, str]) -> Optional[SaslOptions]:
    user = opts.get("sasl.username")
    if user is None:
        given = sorted(k for k in opts if k.startswith("sasl."))
        if given:
            raise SourceOptionError(f"option(s) {', '.join(given)} without sasl.username")
        return None
    if not user.strip() or user != user.strip():
        raise SourceOptionError(f"option 'sasl.username' must be a user name, got {user!r}")
    path, env = opts.get("sasl.passwordfile"), opts.get("sasl.passwordenv")
    if path is not None and env is not None:
        raise SourceOptionError("give one of the options 'sasl.passwordFile' and 'sasl.passwordEnv', not both")
    for name, value in (("sasl.passwordFile", path), ("sasl.passwordEnv", env)):
        if value is not None and not value.strip():
            raise SourceOptionError(f"option {name!r} is empty")
    return SaslOptions(user=user, password_file=path, password_env=env or PASSWORD_ENV,
                       plain_without_tls=_boolean(opts.get("sasl.passwordwithouttls", "false"),
                                                  "sasl.passwordWithoutTls"))


def _zk_security(opts: Mapping[str, str]) -> ZkSecurity:
    values = {}
    for option, (name, kind) in _ZK_OPTIONS.items():
        raw = opts.get(option.lower())
        if raw is None:
            continue
        if kind is bool:
            values[name] = _boolean(raw, option)
        elif Path in typing.get_args(kind):
            values[name] = Path(raw)
        else:
            values[name] = raw
    try:
        return ZkSecurity(**values)
    except ConfigError as exc:
        text = str(exc)
        for option, (name, _) in _ZK_OPTIONS.items():
            text = re.sub(rf"\b{name}\b", option, text)
        raise SourceOptionError(f"ZooKeeper options: {text}") from None


def _subscription(opts: Mapping[str, str]) -> tuple[tuple[str, ...], Optional[str]]:
    subscribe, pattern = opts.get("subscribe"), opts.get("subscribepattern")
    if (subscribe is None) == (pattern is None):
        raise SourceOptionError("give exactly one of the options 'subscribe' and 'subscribePattern'")
    if pattern is not None:
        try:
            check_pattern(pattern)
        except PatternError as exc:
            raise SourceOptionError(f"option 'subscribePattern': {exc}") from None
        return (), pattern
    topics = tuple(sorted({t.strip() for t in subscribe.split(",") if t.strip()}))
    if not topics:
        raise SourceOptionError("option 'subscribe' names no topic")
    for topic in topics:
        try:
            layout.validate_topic_name(topic)
        except layout.InvalidTopicName as exc:
            raise SourceOptionError(f"option 'subscribe': {exc}") from None
    return topics, None


def _position(value: Optional[str], name: str, *, default: str, group: Optional[str]) -> Position:
    if value is None:
        return default
    text = value.strip()
    if text.lower() in (EARLIEST, LATEST):
        return text.lower()
    if text.lower() == COMMITTED:
        if group is None:
            raise SourceOptionError(f"{name}='committed' needs the option 'group'")
        return COMMITTED
    if text.startswith("{"):
        try:
            return parse_offsets_json(text, allow_special=True)
        except ValueError as exc:
            raise SourceOptionError(f"option {name!r}: {exc}") from None
    raise SourceOptionError(f"option {name!r} must be 'earliest', 'latest', 'committed' or a JSON "
                            f"map of offsets per partition, got {value!r}")


def _has(offsets: PartitionOffsets, special: int) -> bool:
    return any(o == special for o in offsets.values())


def _positive(opts: Mapping[str, str], key: str, name: str) -> Optional[int]:
    raw = opts.get(key)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise SourceOptionError(f"option {name!r} must be a positive integer, got {raw!r}") from None
    if value < 1:
        raise SourceOptionError(f"option {name!r} must be a positive integer, got {raw!r}")
    return value


def _isolation_level(opts: Mapping[str, str]) -> str:
    """The option ``isolationLevel``: one of ISOLATION_LEVELS, in any case."""
    raw = opts.get("isolationlevel")
    if raw is None:
        return settings.default(ConsumerConfig, "isolation_level")
    value = str(raw).strip().lower()
    if value not in ISOLATION_LEVELS:
        raise SourceOptionError(f"option 'isolationLevel' must be one of {', '.join(ISOLATION_LEVELS)}, "
                                f"got {raw!r}")
    return value


def _boolean(raw: str, name: str) -> bool:
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise SourceOptionError(f"option {name!r} must be 'true' or 'false', got {raw!r}")
    return text == "true"
