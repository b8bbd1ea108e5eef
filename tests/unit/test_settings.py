"""Each setting is defined once: its default, its check and its help live in
its config dataclass, and every command-line option either stands for such a
setting (and agrees with it) or is one of a command's own process options."""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

import zkcoord
from zkcoord import settings
from zkcoord.broker.cli import KAFKA_PORT, STANDALONE_SESSION_TIMEOUT_MS
from zkcoord.broker.cli import config_from as broker_config_from
from zkcoord.broker.config import BrokerConfig, LogConfig
from zkcoord.cli import build_parser
from zkcoord.console.config import ConsoleConfig
from zkcoord.consumer.cli import config_from as consumer_config_from
from zkcoord.consumer.config import ConsumerConfig
from zkcoord.coordinator.cli import config_from as server_config_from
from zkcoord.coordinator.config import CoordinatorConfig, ServerConfig
from zkcoord.drill.cli import settings_from as drill_settings_from
from zkcoord.drill.config import DrillSettings
from zkcoord.drill.schedule import parse_kinds
from zkcoord.errors import ConfigError
from zkcoord.member.config import MemberConfig
from zkcoord.metrics.config import MetricsConfig
from zkcoord.security.config import TlsConfig
from zkcoord.zk.config import ZooKeeperConfig
from zkcoord.zk.ensemble import EnsembleConfig

CONFIGS = (BrokerConfig, LogConfig, MetricsConfig, ConsumerConfig, MemberConfig, CoordinatorConfig, ServerConfig,
           DrillSettings, EnsembleConfig, TlsConfig, ConsoleConfig, ZooKeeperConfig)

# Options that are not settings of a config but of the command's own run:
# where to write, what to wait for, how to reach ZooKeeper before anything.
PROCESS_OPTIONS = {
    ("broker",): {"--zookeeper", "--port-file", "--zk-timeout", "--zk-session-timeout", "--bridge-password-file"},
    ("server",): {"--no-broker", "--port-file", "--bridge-password-file"},
    ("consume",): {"--bootstrap", "--max-messages", "--output", "--status", "--events", "--slow-ms", "--kafka-brokers",
                   "--password-file", "--process-ms", "--kafka-client"},
    ("drill",): {"--seed", "--kinds", "--dir", "--zookeeper", "--bootstrap"},
    ("console",): {"--zookeeper", "--no-lag", "--port-file", "--user", "--password-file", "--password-without-tls",
                   "--kafka-bootstrap"},
    ("zk", "up"): {"--dir", "--timeout"},
}
# Where a command's default differs from the program's, on purpose.
COMMAND_DEFAULTS = {(("broker",), "--port"): KAFKA_PORT,
                    (("broker",), "--zk-session-timeout-ms"): STANDALONE_SESSION_TIMEOUT_MS}


def subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from subcommands(sub, path + (name,))
    if path:
        yield path, parser


def options(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if action.option_strings and not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            yield max(action.option_strings, key=len), action


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.__name__)
def test_every_field_of_a_config_is_a_setting_with_help(config):
    names = {f.name for f, _, _ in settings.fields(config)}
    assert names == {f.name for f in dataclasses.fields(config)}
    assert all(spec.help for _, spec, _ in settings.fields(config))


def test_every_option_of_a_settings_command_matches_its_setting():
    checked = 0
    for path, parser in subcommands(build_parser()):
        if path not in PROCESS_OPTIONS:
            continue
        for flag, action in options(parser):
            if not hasattr(action, "setting"):
                assert flag in PROCESS_OPTIONS[path], f"{' '.join(path)} {flag} is neither a setting nor declared"
                assert action.help, f"{' '.join(path)} {flag} has no help"
                continue
            cls, name = action.setting
            f = next(f for f in dataclasses.fields(cls) if f.name == name)
            spec = f.metadata["zkcoord.setting"]
            default = COMMAND_DEFAULTS.get((path, flag), settings.default_of(f))
            if action.nargs is None and action.const is None and not isinstance(action, argparse._AppendAction):
                expected = None if default is dataclasses.MISSING else default
                assert action.default == expected, f"{' '.join(path)} {flag}: {action.default!r} != {expected!r}"
            assert action.help.startswith(spec.help), f"{' '.join(path)} {flag}"
            if spec.choices is not None:
                assert tuple(action.choices) == spec.choices
            checked += 1
    assert checked >= 40  # the settings commands really were walked


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_a_minimal_server_command_line_gives_the_default_configs(tmp_path):
    config = server_config_from(parse("server", "--id", "3", "--zookeeper", "zk:2181", "--data-dir", "d"))
    assert config == ServerConfig(server_id=3, zookeeper="zk:2181",
                                  broker=BrokerConfig(broker_id=3, data_dir="d"))
    assert server_config_from(parse("server", "--id", "3", "--zookeeper", "zk:2181", "--no-broker")).broker is None


def test_server_options_reach_the_nested_configs():
    config = server_config_from(parse(
        "server", "--id", "3", "--zookeeper", "zk", "--data-dir", "d", "--host", "127.0.0.2", "--broker-port", "7",
        "--rebalance-protocol", "eager", "--segment-bytes", "4096", "--coordinator-slots", "4"))
    assert config.coordinator.rebalance_protocol == "eager" and config.coordinator_slots == 4
    assert (config.broker.host, config.broker.port, config.broker.log.segment_bytes) == ("127.0.0.2", 7, 4096)


def test_the_metrics_options_reach_the_server_and_a_bad_one_names_its_flag():
    config = server_config_from(parse("server", "--id", "3", "--zookeeper", "zk", "--data-dir", "d",
                                      "--metrics-port", "0"))
    assert config.metrics == MetricsConfig(port=0) and config.metrics.enabled
    assert not server_config_from(parse("server", "--id", "3", "--zookeeper", "zk", "--no-broker")).metrics.enabled
    with pytest.raises(ConfigError, match="--metrics-host must be an IP address"):
        settings.from_args(MetricsConfig, parse("broker", "--id", "1", "--zookeeper", "zk", "--data-dir", "d",
                                                "--metrics-host", "localhost"))
    with pytest.raises(ConfigError, match="--metrics-port must be at most 65535"):
        server_config_from(parse("server", "--id", "3", "--zookeeper", "zk", "--no-broker", "--metrics-port", "70000"))


def test_a_minimal_broker_command_line_gives_the_default_config():
    config = broker_config_from(parse("broker", "--id", "1", "--zookeeper", "zk", "--data-dir", "d"))
    assert config == BrokerConfig(broker_id=1, data_dir="d", port=KAFKA_PORT)


def test_a_minimal_consume_command_line_gives_the_default_config():
    config = consumer_config_from(parse("consume", "--bootstrap", "h:1", "--group", "g", "--topic", "t"))
    assert config == ConsumerConfig(group="g", topics=("t",))
    config = consumer_config_from(parse("consume", "--bootstrap", "h:1", "--group", "g", "--topic", "t",
                                        "--topic", "u", "--strategy", "sticky", "--strategy", "range"))
    assert config.topics == ("t", "u") and config.assignment_strategies == ("sticky", "range")


def test_a_minimal_drill_command_line_gives_the_default_settings(tmp_path):
    got = drill_settings_from(parse("drill", "--seed", "5", "--dir", str(tmp_path / "d")))
    assert got == DrillSettings(seed=5, kinds=tuple(parse_kinds("all")), directory=tmp_path / "d")


@pytest.mark.parametrize("argv, message", [
    (("server", "--id", "1", "--zookeeper", "zk", "--data-dir", "d", "--rebalance-timeout-ms", "0"),
     "--rebalance-timeout-ms must be at least 1, not 0"),
    (("server", "--id", "1", "--zookeeper", "zk", "--data-dir", "d", "--host", "localhost"),
     "host must be an IP address"),
    (("server", "--id", "1", "--zookeeper", "zk"), "--data-dir is required"),
    (("broker", "--id", "1", "--zookeeper", "zk"), "--data-dir is required"),
    (("server", "--id", "1", "--zookeeper", "zk", "--gateway", "--no-broker"), "cannot go with --no-broker"),
    (("server", "--id", "1", "--zookeeper", "zk", "--gateway", "--data-dir", "d"), "a gateway holds no partitions"),
    (("server", "--id", "1", "--zookeeper", "zk", "--data-dir", "d", "--kafka-bootstrap", "k:9092"),
     "--no-broker.*--gateway"),
    (("broker", "--id", "-1", "--zookeeper", "zk", "--data-dir", "d"), "--id must be at least 0, not -1"),
    (("broker", "--id", "1", "--zookeeper", "zk", "--data-dir", "d", "--segment-bytes", "10"),
     "--segment-bytes must be at least 1024, not 10"),
    (("consume", "--bootstrap", "h:1", "--group", "", "--topic", "t"), "--group must not be empty"),
    (("consume", "--bootstrap", "h:1", "--group", "g", "--topic", "t", "--max-poll-records", "0"),
     "--max-poll-records must be at least 1"),
])
def test_a_bad_option_is_a_config_error_naming_the_flag(argv, message):
    config_from = {"server": server_config_from, "broker": broker_config_from,
                   "consume": consumer_config_from}[argv[0]]
    with pytest.raises(ConfigError, match=message):
        config_from(parse(*argv))


def test_a_gateway_refuses_the_authorizer_its_relays_would_bypass():
    from zkcoord.broker.config import BrokerConfig
    from zkcoord.security.config import SecurityConfig

    with pytest.raises(ConfigError, match="--gateway with --authorizer on"):
        BrokerConfig(broker_id=1, gateway=True, security=SecurityConfig(authorizer="on"))


# -- the checks themselves -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Example:
    count: int = settings.setting(1, "a count", minimum=0, maximum=9)
    ratio: float = settings.setting(0.5, "a ratio")
    name: Optional[str] = settings.setting(None, "a name", non_empty=True)
    kinds: tuple[str, ...] = settings.setting(("a",), "kinds", choices=("a", "b"))
    path: Path = settings.setting(Path("."), "a path")
    flag: bool = settings.setting(False, "a flag")

    def __post_init__(self):
        settings.check(self)


@pytest.mark.parametrize("bad, message", [
    ({"count": -1}, "count must be at least 0, not -1"),
    ({"count": 10}, "count must be at most 9, not 10"),
    ({"count": True}, "count must be an integer, not True"),
    ({"count": "1"}, "count must be an integer"),
    ({"ratio": "x"}, "ratio must be a number"),
    ({"name": ""}, "name must not be empty"),
    ({"kinds": ("c",)}, r"kinds must be one of \('a', 'b'\), not 'c'"),
    ({"kinds": "ab"}, "kinds must be a sequence of strings"),
    ({"path": "."}, "path must be a path"),
    ({"flag": 1}, "flag must be true or false"),
])
def test_a_bad_value_is_refused_with_the_setting_named(bad, message):
    with pytest.raises(ConfigError, match=message):
        Example(**bad)


def test_a_sequence_given_as_a_list_is_kept_as_a_tuple():
    assert Example(kinds=["a", "b"]).kinds == ("a", "b")
    assert Example(ratio=1).ratio == 1  # an integer is a number


def test_a_setting_without_help_is_a_programming_error():
    with pytest.raises(TypeError):
        settings.setting(1)


def test_options_and_back():
    parser = argparse.ArgumentParser()
    settings.add_options(parser, Example, exclude=("path",))
    assert settings.from_args(Example, parser.parse_args([])) == Example()
    args = parser.parse_args(["--count", "3", "--kinds", "b", "--kinds", "a", "--flag", "--name", "n"])
    assert settings.from_args(Example, args) == Example(count=3, kinds=("b", "a"), flag=True, name="n")
    with pytest.raises(ConfigError, match="--count must be at most 9"):
        settings.from_args(Example, parser.parse_args(["--count", "30"]))


def test_a_message_naming_two_settings_names_both_flags():
    with pytest.raises(ConfigError, match="--min-session-timeout-ms exceeds --max-session-timeout-ms"):
        server_config_from(parse("server", "--id", "1", "--zookeeper", "zk", "--no-broker",
                                 "--min-session-timeout-ms", "9000", "--max-session-timeout-ms", "8000"))


def test_a_config_or_its_settings_or_both():
    base = ConsumerConfig(group="g", topics=("t",))
    assert ConsumerConfig.of(base) is base
    assert ConsumerConfig.of(base, max_poll_records=7) == ConsumerConfig(group="g", topics=("t",), max_poll_records=7)
    assert ConsumerConfig.of(group="g", topics=["t"]) == base
    with pytest.raises(TypeError, match="expected a ConsumerConfig"):
        ConsumerConfig.of("g")
    with pytest.raises(ConfigError):
        ConsumerConfig.of(base, max_poll_records=0)


def test_building_the_parser_loads_nothing_gevent_must_patch_first():
    # `zkcoord server` and `zkcoord broker` patch the process with gevent
    # once their command runs; what the parser imports before that must not
    # have loaded ssl or a networking client.
    script = ("import sys\nfrom zkcoord.cli import build_parser\nbuild_parser()\n"
              "print(' '.join(m for m in ('ssl', 'kazoo.client', 'kafka', 'gevent', 'pyspark') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(zkcoord.__file__).resolve().parent.parent)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []


def test_a_brokers_zookeeper_session_is_asked_in_ms_and_its_older_seconds_spelling_still_works():
    from zkcoord.broker.cli import zookeeper_session

    base = ("broker", "--id", "1", "--zookeeper", "zk", "--data-dir", "d")
    assert zookeeper_session(parse(*base)) == ZooKeeperConfig(STANDALONE_SESSION_TIMEOUT_MS)
    assert zookeeper_session(parse(*base, "--zk-session-timeout-ms", "2500")) == ZooKeeperConfig(2500)
    assert zookeeper_session(parse(*base, "--zk-session-timeout", "1.5")) == ZooKeeperConfig(1500)
    with pytest.raises(ConfigError):
        zookeeper_session(parse(*base, "--zk-session-timeout", "0.1"))  # below the setting's minimum


def test_a_servers_zookeeper_session_reaches_its_config():
    config = server_config_from(parse("server", "--id", "3", "--zookeeper", "zk", "--no-broker",
                                      "--zk-session-timeout-ms", "4000"))
    assert config.zk_session == ZooKeeperConfig(4000)
