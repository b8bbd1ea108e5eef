"""BrokerConfig validation and the protocol version table (no sockets)."""

from __future__ import annotations

import pytest
from kafka.protocol.broker_version_data import BROKER_API_VERSIONS
from kafka.protocol.metadata import ApiVersionsResponse

from zkcoord.broker.config import BrokerConfig, LogConfig
from zkcoord.broker.protocol import ProtocolError, SUPPORTED, api_versions_response, decode_request
from zkcoord.errors import ConfigError


def test_defaults_bind_loopback_and_validate():
    config = BrokerConfig(broker_id=0, data_dir="d")
    assert (config.host, config.port, config.advertised) == ("127.0.0.1", 0, "127.0.0.1")
    assert config.log == LogConfig()


@pytest.mark.parametrize("bad", [
    {"broker_id": -1}, {"broker_id": 2**31}, {"data_dir": ""}, {"host": "localhost"},
    {"port": 70000}, {"max_request_bytes": 10}, {"max_connections": 0},
    {"sendfile_threshold": -1}, {"log": None}, {"broker_id": True}, {"advertised_host": ""},
])
def test_bad_values_raise_config_error(bad):
    with pytest.raises(ConfigError):
        BrokerConfig(**{"broker_id": 1, "data_dir": "d", **bad})


@pytest.mark.parametrize("bad", [
    {"segment_bytes": 100}, {"flush_ms": 0}, {"flush_messages": 0}, {"retention_bytes": -2}, {"retention_ms": -2},
    {"index_interval_bytes": 0},
])
def test_bad_log_values_raise_config_error(bad):
    with pytest.raises(ConfigError):
        LogConfig(**bad)


def test_config_is_frozen():
    config = BrokerConfig(broker_id=0, data_dir="d")
    with pytest.raises(Exception):
        config.port = 5


def test_advertised_versions_are_decodable_by_the_library():
    for api in SUPPORTED.values():
        assert api.request.max_version >= api.max_version
    encoded = api_versions_response(3).encode(version=3)
    decoded = ApiVersionsResponse.decode(encoded, version=3)
    assert {k.api_key for k in decoded.api_keys} == set(SUPPORTED)


# Produce, Fetch, ListOffsets, Metadata, ApiVersions, CreateTopics, DescribeConfigs, DescribeCluster
KAFKA_2_8_APIS = (0, 1, 2, 3, 18, 19, 32, 60)


def test_every_version_a_kafka_2_8_broker_accepts_is_offered():
    """Kafka 2.8's own ranges, as kafka-python records them from a 2.8 broker's ApiVersions answer."""
    kafka_2_8 = BROKER_API_VERSIONS[(2, 8)]
    for key in KAFKA_2_8_APIS:
        low, high = kafka_2_8[key]
        assert SUPPORTED[key].min_version <= low and SUPPORTED[key].max_version >= high, key


@pytest.mark.parametrize("frame", [b"", b"\x00\x12", b"\x00\x63\x00\x00\x00\x00\x00\x01",
                                   b"\x00\x01\x00\x0d\x00\x00\x00\x01"])
def test_undecodable_frames_raise_protocol_error(frame):
    with pytest.raises(ProtocolError):
        decode_request(frame)
