"""Every request our Kafka client sends, in a version Kafka 4 accepts
(KIP-896 removed every version older than Kafka 2.1's), that Kafka 3.9 and
our embedded broker accept too; and a broker too old for us said so."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from zkcoord.broker.protocol import SUPPORTED
from zkcoord.fetch import connection
from zkcoord.fetch.connection import SPOKEN, BrokerConnection, BrokerTooOld

# The oldest version Kafka 4.0 still accepts of each request we send (KIP-896,
# "Remove broker and tools support for pre-2.1 API request versions").
KIP_896_MINIMUM = {"ApiVersions": 0, "SaslHandshake": 0, "SaslAuthenticate": 0, "Fetch": 4, "ListOffsets": 1,
                   "Metadata": 0}
# What Kafka 4.4.0's and 3.9.1's brokers offer (their ApiVersions answers; the
# validVersions of kafka-clients' message definitions).
KAFKA_4_4 = {"ApiVersions": (0, 5), "SaslHandshake": (0, 1), "SaslAuthenticate": (0, 2), "Fetch": (4, 18),
             "ListOffsets": (1, 11), "Metadata": (0, 13)}
KAFKA_3_9 = {"ApiVersions": (0, 4), "SaslHandshake": (0, 1), "SaslAuthenticate": (0, 2), "Fetch": (0, 17),
             "ListOffsets": (0, 9), "Metadata": (0, 12)}
EMBEDDED = {api.request.__name__.removesuffix("Request"): (api.min_version, api.max_version)
            for api in SUPPORTED.values()}


def test_every_request_the_connection_builds_is_in_the_table_of_versions():
    source = Path(connection.__file__).read_text()
    built = set(re.findall(r"\b(\w+)Request\(", source))
    assert built and built <= set(SPOKEN), f"requests sent without a declared version: {built - set(SPOKEN)}"


@pytest.mark.parametrize("request_name", sorted(KIP_896_MINIMUM))
def test_every_version_we_may_send_is_one_kafka_4_accepts(request_name):
    low, high = SPOKEN[request_name]
    assert low >= KIP_896_MINIMUM[request_name]
    for broker in (KAFKA_4_4, KAFKA_3_9, EMBEDDED):
        offered_low, offered_high = broker[request_name]
        assert max(low, offered_low) <= min(high, offered_high)


def test_kip_896_table_names_every_request_we_send():
    assert set(SPOKEN) == set(KIP_896_MINIMUM)


def _unopened() -> BrokerConnection:
    connection = BrokerConnection.__new__(BrokerConnection)  # no socket: only its version choice is asked
    connection.address = "kafka:9092"
    return connection


def test_a_broker_offering_only_versions_below_ours_is_too_old_and_not_retried():
    connection = _unopened()
    with pytest.raises(BrokerTooOld, match=r"offers Fetch versions 0\.\.3; this client speaks 4\.\.") as raised:
        connection._pick({1: (0, 3)}, 1, SPOKEN["Fetch"], "Fetch")
    assert not raised.value.retriable


def test_the_highest_version_both_speak_is_sent():
    connection = _unopened()
    assert connection._pick({3: KAFKA_4_4["Metadata"]}, 3, SPOKEN["Metadata"], "Metadata") == SPOKEN["Metadata"][1]
    assert connection._pick({3: (0, 9)}, 3, SPOKEN["Metadata"], "Metadata") == 9
