"""The ZooKeeper layout: paths, and codecs checked against bytes Kafka brokers wrote.

Every sample marked KAFKA below is a node's content exactly as a Kafka broker of
the named era left it in ZooKeeper (Scala 2.12 and 2.13 builds order keys
differently; we write the 2.13 order and read both).
"""

import dataclasses
import json
import zlib
from functools import partial

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zkcoord.errors import ConfigError, ZkcoordError
from zkcoord.zk import layout as L
from zkcoord.zk.layout import (
    BrokerRegistration,
    ListenerEndpoint,
    GroupState,
    LayoutError,
    PartitionState,
    ServerInfo,
    TopicAssignment,
)
from zkcoord.zk.layout import zkcoord_nodes
from zkcoord.zk.layout.names import _ZK_BAD_CHARS

PLAIN = "PLAINTEXT"

# --- brokers ----------------------------------------------------------------


def _one_plaintext_listener(host, jmx_port, timestamp_ms, version, rack=None):
    """Broker 7 as every sample below registers it: one PLAINTEXT listener on port 9092."""
    return BrokerRegistration(
        7, host, 9092, (ListenerEndpoint(PLAIN, PLAIN, host, 9092),), rack, jmx_port, timestamp_ms, version
    )


# (kafka era, bytes, expected registration, written by us byte for byte?)
BROKERS = [
    (
        "0.8/0.9 v1",
        b'{"jmx_port":-1,"timestamp":"1447157138058","host":"192.168.3.5","version":1,"port":9092}',
        _one_plaintext_listener("192.168.3.5", -1, 1447157138058, 1),
        False,
    ),
    (
        "0.9 v2",
        b'{"jmx_port":-1,"timestamp":"1453969745721","endpoints":["PLAINTEXT://localhost:9092"],'
        b'"host":"localhost","version":2,"port":9092}',
        _one_plaintext_listener("localhost", -1, 1453969745721, 2),
        False,
    ),
    (
        "0.10.0 v3",
        b'{"jmx_port":9999,"timestamp":"1576064681798","endpoints":["PLAINTEXT://10.10.10.100:9092"],'
        b'"host":"10.10.10.100","version":3,"port":9092}',
        _one_plaintext_listener("10.10.10.100", 9999, 1576064681798, 3),
        False,
    ),
    (
        "2.x scala 2.12 v4 with rack",
        b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
        b'"endpoints":["PLAINTEXT://172.21.52.195:9092"],"rack":"us-east-1a","jmx_port":9999,'
        b'"host":"172.21.52.195","timestamp":"1519911707766","port":9092,"version":4}',
        _one_plaintext_listener("172.21.52.195", 9999, 1519911707766, 4, rack="us-east-1a"),
        False,
    ),
    (
        "2.x scala 2.13 v4",
        b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
        b'"endpoints":["PLAINTEXT://localhost:9092"],"jmx_port":-1,"port":9092,"host":"localhost",'
        b'"version":4,"timestamp":"1603608218902"}',
        _one_plaintext_listener("localhost", -1, 1603608218902, 4),
        True,
    ),
    (
        "3.x scala 2.12 v5",
        b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
        b'"endpoints":["PLAINTEXT://node01:9092"],"jmx_port":-1,"features":{},"host":"node01",'
        b'"timestamp":"1643692590218","port":9092,"version":5}',
        _one_plaintext_listener("node01", -1, 1643692590218, 5),
        False,
    ),
    (
        "3.x scala 2.13 v5",
        b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
        b'"endpoints":["PLAINTEXT://macro-VirtualBox:9092"],"jmx_port":-1,"port":9092,'
        b'"host":"macro-VirtualBox","version":5,"timestamp":"1692025259506"}',
        _one_plaintext_listener("macro-VirtualBox", -1, 1692025259506, 5),
        True,
    ),
]


@pytest.mark.parametrize("era,data,expected,exact", BROKERS, ids=[b[0] for b in BROKERS])
def test_broker_samples_decode(era, data, expected, exact):
    assert L.decode_broker(7, data) == expected
    if exact:
        assert L.encode_broker(expected) == data


def test_broker_v5_with_rack_listeners_and_features_is_kafka_order():
    # Kafka writes the rack right after the endpoints in both Scala builds (see the
    # 2.12 v4 sample); the listener map keeps endpoint order; a feature range is
    # min_version then max_version.
    reg = BrokerRegistration.for_endpoints(
        3,
        [ListenerEndpoint("INTERNAL", "SASL_SSL", "b3.example", 9094), ListenerEndpoint("CLIENT", PLAIN, "::1", 9092)],
        timestamp_ms=1700000000000,
        rack="r1",
        features={"metadata.version": (1, 7)},
    )
    assert L.encode_broker(reg) == (
        b'{"features":{"metadata.version":{"min_version":1,"max_version":7}},'
        b'"listener_security_protocol_map":{"INTERNAL":"SASL_SSL","CLIENT":"PLAINTEXT"},'
        b'"endpoints":["INTERNAL://b3.example:9094","CLIENT://[::1]:9092"],"rack":"r1",'
        b'"jmx_port":-1,"port":9092,"host":"::1","version":5,"timestamp":"1700000000000"}'
    )
    assert L.decode_broker(3, L.encode_broker(reg)) == reg
    assert reg.plaintext_address() == ("::1", 9092)


def test_broker_without_plaintext_listener():
    reg = BrokerRegistration.for_endpoints(
        1, [ListenerEndpoint("SECURE", "SSL", "h", 9093)], timestamp_ms=5, version=4
    )
    data = L.encode_broker(reg)
    assert json.loads(data)["host"] is None and json.loads(data)["port"] == -1
    assert L.decode_broker(1, data) == reg
    # No PLAINTEXT listener: the first one is the address to use.
    assert reg.plaintext_address() == ("h", 9093)


@pytest.mark.parametrize("tls, sasl, address", [
    (True, True, ("b", 9094)),    # SASL_SSL, the secured listener beside the plaintext one
    (False, False, ("a", 9092)),  # PLAINTEXT
    (True, False, ("a", 9092)),   # no SSL listener: the PLAINTEXT one, as before listeners were told apart
])
def test_a_client_is_given_the_listener_that_speaks_what_it_speaks(tls, sasl, address):
    reg = BrokerRegistration.for_endpoints(
        1, [ListenerEndpoint("INTERNAL", PLAIN, "a", 9092), ListenerEndpoint("CLIENTS", "SASL_SSL", "b", 9094)], timestamp_ms=5)
    assert reg.address_for(L.client_protocol(tls, sasl)) == address


def test_broker_v2_listener_name_is_the_protocol():
    data = (
        b'{"jmx_port":-1,"timestamp":"1","endpoints":["SSL://a:9093","PLAINTEXT://a:9092"],'
        b'"host":"a","version":2,"port":9092}'
    )
    reg = L.decode_broker(2, data)
    assert [e.security_protocol for e in reg.endpoints] == ["SSL", PLAIN]
    assert reg.plaintext_address() == ("a", 9092)


def test_broker_encodes_only_versions_kafka_still_writes():
    reg = L.decode_broker(7, BROKERS[0][1])
    with pytest.raises(LayoutError):
        L.encode_broker(reg)


BAD_BROKERS = [
    (b"", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b"[1,2]", "JSON object"),
    (b'{"version":6,"jmx_port":-1,"endpoints":[]}', "'version'"),
    (b'{"version":0,"jmx_port":-1,"host":"a","port":1}', "'version'"),
    (b'{"version":"5","jmx_port":-1,"endpoints":[]}', "'version'"),
    (b'{"version":true,"jmx_port":-1,"host":"a","port":1}', "'version'"),
    (b'{"version":1,"host":"a","port":1}', "'jmx_port'"),
    (b'{"version":1,"jmx_port":-1,"port":1}', "'host'"),
    (b'{"version":1,"jmx_port":-1,"host":"a","port":70000}', "'port'"),
    (b'{"version":1,"jmx_port":-1,"host":"a","port":NaN}', "not JSON"),
    (b'{"version":4,"jmx_port":-1}', "'endpoints'"),
    (b'{"version":4,"jmx_port":-1,"endpoints":"PLAINTEXT://a:1"}', "'endpoints'"),
    (b'{"version":4,"jmx_port":-1,"endpoints":["a:1"]}', "'endpoints'"),
    (b'{"version":4,"jmx_port":-1,"endpoints":["X://a:1"],"listener_security_protocol_map":{}}',
     "listener 'X'"),
    (b'{"version":4,"jmx_port":-1,"endpoints":[],"listener_security_protocol_map":{"X":"TLS"}}',
     "unknown 'TLS'"),
    (b'{"version":3,"jmx_port":-1,"endpoints":["TLS://a:1"]}', "'TLS'"),
    (b'{"version":5,"jmx_port":-1,"endpoints":[],"features":{"f":1}}', "'features'"),
    (b'{"version":5,"jmx_port":-1,"endpoints":[],"features":{"f":{"min_version":1}}}', "max_version"),
    (b'{"version":5,"jmx_port":-1,"endpoints":[],"features":{"f":{"min_version":3,"max_version":1}}}',
     "feature"),
    (b'{"version":4,"jmx_port":-1,"endpoints":[],"timestamp":"soon"}', "'timestamp'"),
    (b'{"version":4,"jmx_port":-1,"endpoints":[],"rack":7}', "'rack'"),
    (b'{"version":2,"jmx_port":-1,"endpoints":["PLAINTEXT://a:1","PLAINTEXT://b:2"]}', "repeat"),
]


# --- topics -----------------------------------------------------------------

TOPICS = [
    ("0.8-2.3 v1", b'{"version":1,"partitions":{"0":[0]}}', TopicAssignment({0: (0,)}), True),
    (
        "0.8-2.3 v1, three partitions",
        b'{"version":1,"partitions":{"2":[5,4],"1":[4,3],"0":[3,5]}}',
        TopicAssignment({0: (3, 5), 1: (4, 3), 2: (5, 4)}),
        False,
    ),
    (
        "2.4-2.7 v2",
        b'{"version":2,"partitions":{"0":[0]},"adding_replicas":{},"removing_replicas":{}}',
        TopicAssignment({0: (0,)}, 2),
        True,
    ),
    (
        "2.7 scala 2.12 v2",
        b'{"version":2,"partitions":{"2":[3,2],"1":[2,1],"0":[1,3],"3":[1,2]},'
        b'"adding_replicas":{},"removing_replicas":{}}',
        TopicAssignment({0: (1, 3), 1: (2, 1), 2: (3, 2), 3: (1, 2)}, 2),
        False,
    ),
    (
        "3.x scala 2.12 v3",
        b'{"removing_replicas":{},"partitions":{"2":[2,1],"1":[1,3],"0":[3,2]},'
        b'"topic_id":"RSZ--odYRlSOPGRgukKnAQ","adding_replicas":{},"version":3}',
        TopicAssignment({0: (3, 2), 1: (1, 3), 2: (2, 1)}, 3, "RSZ--odYRlSOPGRgukKnAQ"),
        False,
    ),
    (
        "3.x scala 2.13 v3",
        b'{"partitions":{"0":[2,3,1],"1":[3,1,2],"2":[1,2,3]},"topic_id":"cMr3GpVESX2L3byPGf93lQ",'
        b'"adding_replicas":{},"removing_replicas":{},"version":3}',
        TopicAssignment({0: (2, 3, 1), 1: (3, 1, 2), 2: (1, 2, 3)}, 3, "cMr3GpVESX2L3byPGf93lQ"),
        True,
    ),
]


@pytest.mark.parametrize("era,data,expected,exact", TOPICS, ids=[t[0] for t in TOPICS])
def test_topic_samples_decode(era, data, expected, exact):
    assert L.decode_topic("demo", data) == expected
    if exact:
        assert L.encode_topic(expected) == data


def test_topic_partition_order_follows_kafkas_hash_map():
    # With twelve partitions Kafka's map has grown to 32 buckets, where "11"
    # hashes to bucket 0 ahead of "0".
    data = L.encode_topic(TopicAssignment({p: (1,) for p in range(12)}))
    assert list(json.loads(data)["partitions"]) == ["11"] + [str(p) for p in range(11)]


def test_topic_in_reassignment_reads_current_replicas():
    data = (
        b'{"version":2,"partitions":{"0":[1,2,3]},"adding_replicas":{"0":[3]},'
        b'"removing_replicas":{"0":[1]}}'
    )
    assert L.decode_topic("t", data) == TopicAssignment({0: (1, 2, 3)}, 2)


BAD_TOPICS = [
    (b"null", "JSON object"),
    (b'{"version":4,"partitions":{}}', "'version'"),
    (b'{"version":1}', "'partitions'"),
    (b'{"version":1,"partitions":[]}', "'partitions'"),
    (b'{"version":1,"partitions":{"-1":[0]}}', "'-1'"),
    (b'{"version":1,"partitions":{"01":[0]}}', "'01'"),
    (b'{"version":1,"partitions":{"x":[0]}}', "'x'"),
    (b'{"version":1,"partitions":{"0":0}}', "'partitions'"),
    (b'{"version":1,"partitions":{"0":[-1]}}', "'partitions'"),
    (b'{"version":1,"partitions":{"0":[1.5]}}', "'partitions'"),
    (b'{"version":1,"partitions":{"0":[1]},"adding_replicas":{"0":["a"]}}', "'adding_replicas'"),
    (b'{"version":3,"partitions":{"0":[1]},"topic_id":"nope"}', "'topic_id'"),
    (b'{"version":3,"partitions":{"0":[1]},"topic_id":5}', "'topic_id'"),
]


# (node path, its decoder, bad bytes, what the error names besides the path)
BAD_KAFKA_NODES = [
    *[("/brokers/ids/4", partial(L.decode_broker, 4), data, needle) for data, needle in BAD_BROKERS],
    *[("/brokers/topics/orders", partial(L.decode_topic, "orders"), data, needle) for data, needle in BAD_TOPICS],
]


@pytest.mark.parametrize(
    "path,decode,data,needle",
    BAD_KAFKA_NODES,
    ids=[f"broker-{i}" for i in range(len(BAD_BROKERS))] + [f"topic-{i}" for i in range(len(BAD_TOPICS))],
)
def test_bad_broker_registration_or_topic_is_a_layout_error_naming_the_node(path, decode, data, needle):
    with pytest.raises(LayoutError) as info:
        decode(data)
    assert path in str(info.value)
    assert needle in str(info.value)


def test_topic_id_needs_version_3():
    with pytest.raises(LayoutError):
        TopicAssignment({0: (1,)}, 2, "cMr3GpVESX2L3byPGf93lQ")


# --- partition state ----------------------------------------------------------

PARTITION_STATES = [
    (b'{"controller_epoch":1,"leader":203,"version":1,"leader_epoch":0,"isr":[203,204,202]}',
     PartitionState(203, 0, 1, (203, 204, 202))),
    (b'{"controller_epoch":6,"leader":0,"version":1,"leader_epoch":4,"isr":[0]}',
     PartitionState(0, 4, 6, (0,))),
    (b'{"controller_epoch":2,"leader":-1,"version":1,"leader_epoch":3,"isr":[]}',
     PartitionState(-1, 3, 2, ())),
]


@pytest.mark.parametrize("data,expected", PARTITION_STATES)
def test_partition_state_samples(data, expected):
    assert L.decode_partition_state(data) == expected
    assert L.encode_partition_state(expected) == data


def test_partition_state_reads_leader_recovery_state():
    data = b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":2,"isr":[1],"leader_recovery_state":1}'
    assert L.decode_partition_state(data) == PartitionState(1, 2, 1, (1,))


@pytest.mark.parametrize(
    "data",
    [
        b'{"controller_epoch":1,"leader":1,"version":2,"leader_epoch":0,"isr":[1]}',
        b'{"controller_epoch":1,"leader":1,"version":1,"isr":[1]}',
        b'{"controller_epoch":1,"leader":"1","version":1,"leader_epoch":0,"isr":[1]}',
        b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[-3]}',
        b'{"controller_epoch":-1,"leader":1,"version":1,"leader_epoch":0,"isr":[1]}',
        b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1],"leader_recovery_state":5}',
        b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":99999999999,"isr":[1]}',
    ],
)
def test_bad_partition_state_is_a_layout_error(data):
    path = L.partition_state_path("t", 3)
    with pytest.raises(LayoutError, match="/brokers/topics/t/partitions/3/state"):
        L.decode_partition_state(data, path)


# --- 0.8 consumer offsets and owners ---------------------------------------------


def test_offsets_are_decimal_strings():
    assert L.encode_offset(0) == b"0"
    assert L.encode_offset(1234567) == b"1234567"
    assert L.decode_offset(b"1234567") == 1234567
    assert L.decode_offset(b"9223372036854775807") == 2**63 - 1


@pytest.mark.parametrize(
    "data", [b"", b"-1", b"+1", b" 1", b"1\n", b"1.0", b"0x10", b"abc", b"9223372036854775808", "5"]
)
def test_bad_offset_is_a_layout_error(data):
    with pytest.raises(LayoutError):
        L.decode_offset(data)


@pytest.mark.parametrize("offset", [-1, 2**63, True, 1.0, "1"])
def test_unwritable_offset_is_a_layout_error(offset):
    with pytest.raises(LayoutError):
        L.encode_offset(offset)


def test_owner_is_the_consumer_thread_id():
    owner = "group1_host-1423456789012-ab12cd34-0"
    assert L.encode_owner(owner) == owner.encode()
    assert L.decode_owner(owner.encode()) == owner
    for bad in (b"", b"\xff", b"a\x00b"):
        with pytest.raises(LayoutError):
            L.decode_owner(bad)


# --- paths and names -------------------------------------------------------------


def test_paths():
    assert L.broker_path(3) == "/brokers/ids/3"
    assert L.topic_path("t.1") == "/brokers/topics/t.1"
    assert L.partitions_path("t") == "/brokers/topics/t/partitions"
    assert L.partition_state_path("t", 0) == "/brokers/topics/t/partitions/0/state"
    assert L.group_path("g") == "/consumers/g"
    assert L.owners_path("g") == "/consumers/g/owners"
    assert L.owners_path("g", "t") == "/consumers/g/owners/t"
    assert L.owner_path("g", "t", 2) == "/consumers/g/owners/t/2"
    assert L.offsets_path("g") == "/consumers/g/offsets"
    assert L.offsets_path("g", "t") == "/consumers/g/offsets/t"
    assert L.offset_path("g", "t", 2) == "/consumers/g/offsets/t/2"
    assert L.server_path("s1") == "/zkcoord/servers/s1"
    assert L.group_state_path("g") == "/zkcoord/groups/g/state"
    assert L.COORDINATOR_PATH == "/consumers/coordinator"
    assert L.COORDINATOR_EPOCH_PATH == "/zkcoord/coordinator_epoch"


@pytest.mark.parametrize(
    "name", ["", ".", "..", "a" * 250, "a/b", "a b", "é", "a:b", None, 5]
)
def test_bad_topic_names(name):
    with pytest.raises(L.InvalidTopicName) as info:
        L.topic_path(name)
    assert isinstance(info.value, ConfigError) and isinstance(info.value, ZkcoordError)


def test_good_topic_names():
    for name in ("a", "a" * 249, "Orders_2024-01.v2", "__consumer_offsets"):
        assert L.validate_topic_name(name) == name


@pytest.mark.parametrize("group", ["", ".", "..", "a/b", "a\x00", "coordinator", None])
def test_bad_group_ids(group):
    with pytest.raises(L.InvalidGroupId):
        L.offset_path(group, "t", 0)


@pytest.mark.parametrize("call", [
    lambda: L.broker_path(-1),
    lambda: L.broker_path("3"),
    lambda: L.partition_state_path("t", -1),
    lambda: L.owner_path("g", "t", True),
    lambda: L.server_path("a/b"),
])
def test_bad_path_arguments(call):
    with pytest.raises(LayoutError):
        call()


# --- our own nodes ---------------------------------------------------------------


def test_group_state_bytes():
    # c-1 is still stopping u-0, which the new generation gives to c-2.
    state = GroupState(7, "range", {"c-1": (("t", 0), ("t", 1)), "c-2": (("u", 0),)}, lease_ms=6000,
                       running={"c-1": (("t", 0), ("u", 0))})
    data = L.encode_group_state(state)
    assert data == (  # only members that do not run exactly their assignment are in "running"
        b'{"version":2,"generation":7,"strategy":"range",'
        b'"assignment":{"c-1":{"t":[0,1]},"c-2":{"u":[0]}},"lease_ms":6000,'
        b'"running":{"c-1":{"t":[0],"u":[0]},"c-2":{}}}'
    )
    assert L.decode_group_state(data) == state
    as_assigned = GroupState(7, "range", state.assignment, running=state.assignment)
    assert b'"running":{}' in L.encode_group_state(as_assigned)
    assert L.decode_group_state(L.encode_group_state(as_assigned)) == as_assigned


def test_group_state_clients_are_an_optional_field_of_version_2():
    state = GroupState(4, "range", {"c-1": (("t", 0),), "c-2": ()}, lease_ms=6000, running={"c-1": (("t", 0),)},
                       clients={"c-1": L.MemberClient("127.0.0.1", "app-1"), "c-2": L.MemberClient("10.0.0.2")})
    data = L.encode_group_state(state)
    assert data == (
        b'{"version":2,"generation":4,"strategy":"range","assignment":{"c-1":{"t":[0]},"c-2":{}},'
        b'"lease_ms":6000,"running":{},'
        b'"clients":{"c-1":{"host":"127.0.0.1","client_id":"app-1"},"c-2":{"host":"10.0.0.2","client_id":""}}}'
    )
    assert L.decode_group_state(data) == state
    # Written by a server that does not know the field: read as no clients.
    without = L.encode_group_state(dataclasses.replace(state, clients={}))
    assert b"clients" not in without and L.decode_group_state(without).clients == {}
    # Read by such a server: it passes by fields it does not know, as it
    # passes by this one (the same decoder, asked for the same fields).
    assert L.decode_group_state(data.replace(b'"clients"', b'"future"')) == dataclasses.replace(state, clients={})


def test_a_clients_static_flag_and_session_timeout_are_written_only_when_set():
    state = GroupState(4, "range", {"s-1": (("t", 0),)},
                       clients={"s-1": L.MemberClient("127.0.0.1", "app", static=True, session_timeout_ms=45_000)})
    data = L.encode_group_state(state)
    assert b'"s-1":{"host":"127.0.0.1","client_id":"app","static":true,"session_timeout_ms":45000}' in data
    assert L.decode_group_state(data) == state
    for bad in (data.replace(b'"static":true', b'"static":"yes"'), data.replace(b"45000", b"-1")):
        with pytest.raises(L.LayoutError, match="client of member 's-1'"):
            L.decode_group_state(bad)


def test_a_clients_kind_is_written_only_when_said():
    state = GroupState(4, "range", {"c-1": (("t", 0),)},
                       clients={"c-1": L.MemberClient("127.0.0.1", "rdkafka", kind="classic-cooperative")})
    data = L.encode_group_state(state)
    assert b'"c-1":{"host":"127.0.0.1","client_id":"rdkafka","kind":"classic-cooperative"}' in data
    assert L.decode_group_state(data) == state
    assert b'"kind"' not in L.encode_group_state(GroupState(4, "range", {}, clients={"c": L.MemberClient("h")}))
    with pytest.raises(L.LayoutError, match="client of member 'c-1'"):
        L.decode_group_state(data.replace(b'"kind":"classic-cooperative"', b'"kind":7'))


@pytest.mark.parametrize("clients", [b'[]', b'{"c":"127.0.0.1"}', b'{"c":{"client_id":"x"}}',
                                     b'{"c":{"host":1}}', b'{"c":{"host":"h","client_id":2}}'])
def test_group_state_refuses_a_bad_client(clients):
    with pytest.raises(L.LayoutError, match="clients"):
        L.decode_group_state(b'{"version":2,"generation":2,"strategy":"range","assignment":{},"running":{},'
                             b'"clients":' + clients + b'}')


def test_group_state_version_1_still_reads():
    data = (b'{"version":1,"generation":7,"strategy":"range",'
            b'"assignment":{"c-1":[["t",0],["t",1]],"c-2":[["u",0]]},"lease_ms":6000,'
            b'"running":{"c-1":[["t",0],["u",0]]}}')
    assert L.decode_group_state(data) == GroupState(
        7, "range", {"c-1": (("t", 0), ("t", 1)), "c-2": (("u", 0),)}, lease_ms=6000,
        running={"c-1": (("t", 0), ("u", 0))})


def test_group_state_v2_writes_a_member_that_runs_nothing_of_its_assignment_and_one_that_left():
    state = GroupState(3, "range", {"new": (("t", 0),), "same": (("t", 1),)},
                       running={"gone": (("t", 2),), "same": (("t", 1),)})
    data = L.encode_group_state(state)
    assert b'"running":{"gone":{"t":[2]},"new":{}}' in data
    assert L.decode_group_state(data) == state


@pytest.mark.parametrize("data", [
    b'{"version":2,"generation":1,"strategy":"range","assignment":{"m":[["t",0]]}}',
    b'{"version":2,"generation":1,"strategy":"range","assignment":{"m":{"t":[0,"1"]}}}',
    b'{"version":2,"generation":1,"strategy":"range","assignment":{"m":{"t":0}}}',
    b'{"version":2,"generation":1,"strategy":"range","assignment":{},"running":{"m":{"t":[-1]}}}',
    b'{"version":2,"generation":1,"strategy":"range","assignment":{"m":{"a/b":[0]}}}',
])
def test_malformed_group_states_are_refused_with_a_layout_error(data):
    with pytest.raises(LayoutError):
        L.decode_group_state(data)


def test_group_state_v2_of_20000_partitions_running_as_assigned_is_a_sixth_of_v1():
    partitions = tuple(("events", p) for p in range(20_000))
    assignment = {f"member-{m:03d}": partitions[m::100] for m in range(100)}
    data = L.encode_group_state(GroupState(1, "range", assignment, lease_ms=10_000, running=assignment))
    assert len(data) < 150_000  # version 1: about 660 KB


def test_group_state_without_a_lease_reads_as_no_lease_and_nothing_running():
    state = L.decode_group_state(b'{"version":1,"generation":2,"strategy":"range","assignment":{}}')
    assert state.lease_ms == 0 and state.generation == 2 and state.running == {}


def test_group_state_refuses_a_bad_running_entry():
    with pytest.raises(L.LayoutError):
        L.decode_group_state(b'{"version":1,"generation":2,"strategy":"range","assignment":{},'
                             b'"running":{"c-1":[["t","zero"]]}}')


@pytest.mark.parametrize(
    "data",
    [
        b'{"version":3,"generation":1,"strategy":"range","assignment":{}}',
        b'{"version":1,"strategy":"range","assignment":{}}',
        b'{"version":1,"generation":1,"strategy":"","assignment":{}}',
        b'{"version":1,"generation":1,"strategy":"range","assignment":{"c":[["t"]]}}',
        b'{"version":1,"generation":1,"strategy":"range","assignment":{"c":[["t",-1]]}}',
        b'{"version":1,"generation":1,"strategy":"range","assignment":{"c":[["t",0]],"d":[["t",0]]}}',
        b'{"version":1,"generation":1,"strategy":"range","assignment":{"c":[["a/b",0]]}}',
    ],
)
def test_bad_group_state_is_a_layout_error(data):
    with pytest.raises(LayoutError):
        L.decode_group_state(data, "/zkcoord/groups/g/state")


# --- a group state split into chunks (version 3) ------------------------------


def big_state(members: int = 40, generation: int = 5) -> GroupState:
    """A state of ``members`` members, one partition each, one of them still
    stopping a partition another now has, each with its client and proof."""
    ids = [f"member-{n:03d}" for n in range(members)]
    assignment = {m: (("t", n),) for n, m in enumerate(ids)}
    running = {**assignment, ids[0]: (("t", 0), ("t", 1))}
    del running[ids[1]]  # it runs nothing yet
    return GroupState(generation, "sticky", assignment, lease_ms=6000, running=running,
                      clients={m: L.MemberClient("10.0.0.1") for m in ids}, proofs={m: "ab" * 32 for m in ids})


def split(state: GroupState, node_bytes: int = 1000, chunk_bytes: int = 1000) -> L.GroupStateNodes:
    return L.encode_group_state_nodes(state, node_bytes=node_bytes, chunk_bytes=chunk_bytes)


def read_back(nodes: L.GroupStateNodes) -> GroupState:
    node = L.decode_group_state_node(nodes.state)
    return node if isinstance(node, GroupState) else L.assemble_group_state(node, nodes.chunks)


def test_a_state_that_fits_one_node_is_written_as_version_2_alone():
    state = big_state()
    nodes = split(state, node_bytes=len(L.encode_group_state(state)))
    assert nodes == L.GroupStateNodes(L.encode_group_state(state), {}) and read_back(nodes) == state


def test_a_state_larger_than_a_node_is_a_manifest_and_chunks_that_read_back_whole():
    state = big_state()
    nodes = split(state)
    manifest = L.decode_group_state_node(nodes.state)
    assert manifest == L.GroupStateManifest(5, "sticky", 6000, tuple(nodes.chunks))
    assert nodes.state == (b'{"version":3,"generation":5,"strategy":"sticky","lease_ms":6000,"chunks":["'
                           + '","'.join(nodes.chunks).encode() + b'"]}')
    assert len(nodes.chunks) > 1 and all(len(chunk) <= 1000 for chunk in nodes.chunks.values())
    assert all(L.chunk_name(chunk) == name for name, chunk in nodes.chunks.items())
    assert read_back(nodes) == state
    # A chunk is version 2's member fields for its members alone.
    holding = next(chunk for chunk in nodes.chunks.values() if b'"member-000"' in chunk)
    assert holding.startswith(b'{"version":3,"assignment":{') and b'"running":{' in holding
    assert b'"member-000":{"t":[0,1]}' in holding and b'"clients":{' in holding and b'"proofs":{' in holding
    with pytest.raises(LayoutError, match="split into"):
        L.decode_group_state(nodes.state)  # a reader of whole states does not take a manifest for one


def test_a_member_keeps_its_chunk_so_a_change_rewrites_only_that_chunk():
    before = big_state()
    member = "member-007"
    running = dict(before.running)
    del running[member]
    after = dataclasses.replace(before, generation=6, assignment={**before.assignment, member: ()}, running=running)
    old, new = split(before), split(after)
    assert len(set(new.chunks) - set(old.chunks)) == 1 and len(new.chunks) == len(old.chunks)
    assert member.encode() in new.chunks[(set(new.chunks) - set(old.chunks)).pop()]


def test_a_member_too_big_for_a_chunk_gets_one_of_its_own():
    state = GroupState(1, "range", {"huge": tuple(("t", p) for p in range(400)), "small": (("u", 0),)})
    nodes = split(state, node_bytes=500, chunk_bytes=500)
    sizes = sorted((len(chunk), b'"huge"' in chunk) for chunk in nodes.chunks.values())
    assert len(sizes) == 2 and sizes[-1][0] > 500 and sizes[-1][1] and read_back(nodes) == state


def test_many_members_split_into_even_chunks():
    state = GroupState(1, "range", {f"c-{n:05d}": (("events", n),) for n in range(5000)})
    whole = len(L.encode_group_state(state))
    nodes = split(state, node_bytes=whole - 1, chunk_bytes=16 * 1024)
    sizes = [len(chunk) for chunk in nodes.chunks.values()]
    # Half full on average at most, so that uneven buckets still fit.
    assert max(sizes) <= 16 * 1024 and 16 * 1024 / 4 < sum(sizes) / len(sizes) <= 16 * 1024 / 2
    assert read_back(nodes) == state


def _with_chunks(nodes: L.GroupStateNodes, chunks: dict) -> GroupState:
    return L.assemble_group_state(L.decode_group_state_node(nodes.state), chunks, "/zkcoord/groups/g/state")


def test_a_manifest_is_read_only_with_every_chunk_it_names_as_it_was_written():
    nodes = split(big_state())
    first = next(iter(nodes.chunks))
    with pytest.raises(LayoutError, match=f"/zkcoord/groups/g/state: chunk {first} is missing"):
        _with_chunks(nodes, {**nodes.chunks, first: None})
    other = nodes.chunks[first].replace(b'"t":[', b'"u":[', 1)
    with pytest.raises(LayoutError, match="does not hold the bytes it was named by"):
        _with_chunks(nodes, {**nodes.chunks, first: other})
    # Chunks the manifest does not name (a later write that never reached
    # its manifest) change nothing.
    later = split(big_state(generation=6))
    assert _with_chunks(nodes, {**later.chunks, **nodes.chunks}) == big_state()


def _manifest_of(*chunks: bytes) -> tuple[bytes, dict]:
    named = {L.chunk_name(c): c for c in chunks}
    return (b'{"version":3,"generation":2,"strategy":"range","lease_ms":0,"chunks":'
            + json.dumps(list(named)).replace(" ", "").encode() + b"}"), named


@pytest.mark.parametrize("chunks, problem", [
    ((b'{"version":3,"assignment":{"a":{"t":[0]}}}', b'{"version":3,"assignment":{"a":{"t":[1]}}}'),
     "names member"),
    ((b'{"version":3,"assignment":{"a":{"t":[0]}}}', b'{"version":3,"assignment":{"b":{"t":[0]}}}'),
     "assigned twice"),
    ((b'{"version":3,"assignment":{},"proofs":{"a":"x"}}', b'{"version":3,"assignment":{},"running":{"a":{"t":[0]}}}'),
     "names member"),
    ((b'{"version":2,"generation":1,"strategy":"range","assignment":{}}',), "of a chunk must be 3"),
    ((b'{"version":3}',), "'assignment' is missing"),
    ((b'{"version":3,"assignment":{"a":[["t",0]]}}',), "must be {topic: \\[partition, ...\\]}"),
])
def test_chunks_that_do_not_add_up_to_one_state_are_refused(chunks, problem):
    manifest, named = _manifest_of(*chunks)
    with pytest.raises(LayoutError, match=problem):
        L.assemble_group_state(L.decode_group_state_node(manifest), named)


@pytest.mark.parametrize("data", [
    b'{"version":3,"generation":1,"strategy":"range","lease_ms":0}',
    b'{"version":3,"generation":1,"strategy":"range","lease_ms":0,"chunks":"x"}',
    b'{"version":3,"generation":1,"strategy":"range","lease_ms":0,"chunks":["ABC"]}',
    b'{"version":3,"generation":1,"strategy":"range","lease_ms":0,"chunks":["' + b"a" * 32 + b'","' + b"a" * 32
    + b'"]}',
    b'{"version":3,"generation":1,"strategy":"range","chunks":[]}',
    b'{"version":4,"generation":1,"strategy":"range","lease_ms":0,"chunks":[]}',
])
def test_a_bad_manifest_is_a_layout_error(data):
    with pytest.raises(LayoutError):
        L.decode_group_state_node(data)


def test_old_whole_states_read_as_they_did():
    v1 = (b'{"version":1,"generation":7,"strategy":"range","assignment":{"c-1":[["t",0]]},"lease_ms":6000}')
    v2 = L.encode_group_state(big_state())
    assert L.decode_group_state_node(v1) == L.decode_group_state(v1)
    assert L.decode_group_state_node(v2) == L.decode_group_state(v2) == big_state()


def test_chunk_paths():
    name = "0123456789abcdef" * 2
    assert L.group_state_chunks_path("g") == "/zkcoord/groups/g/chunks"
    assert L.group_state_chunk_path("g", name) == f"/zkcoord/groups/g/chunks/{name}"
    for bad in ("0123", name.upper(), name + "0", "../state", 7):
        with pytest.raises(LayoutError):
            L.group_state_chunk_path("g", bad)


def test_server_coordinator_and_epoch_nodes():
    info = ServerInfo("s1", "127.0.0.1", 9400)
    assert L.encode_server(info) == b'{"version":1,"host":"127.0.0.1","port":9400}'
    assert L.decode_server("s1", L.encode_server(info)) == info
    assert L.decode_coordinator(L.encode_coordinator("s1")) == "s1"
    assert L.encode_coordinator_epoch(12) == b'{"version":1,"epoch":12}'
    assert L.decode_coordinator_epoch(b'{"version":1,"epoch":12}') == 12
    for bad in (b'{"version":1,"host":"h","port":0}', b'{"version":1,"port":1}', b"{}"):
        with pytest.raises(LayoutError, match="/zkcoord/servers/s1"):
            L.decode_server("s1", bad)
    with pytest.raises(LayoutError):
        L.decode_coordinator(b"a/b")
    with pytest.raises(LayoutError):
        L.decode_coordinator_epoch(b'{"version":1,"epoch":-1}')


def test_a_server_says_which_slots_it_has_withdrawn_from_and_only_when_it_has():
    info = ServerInfo("s1", "127.0.0.1", 9400, withdrawn=(1, 5))
    assert L.encode_server(info) == b'{"version":1,"host":"127.0.0.1","port":9400,"withdrawn":[1,5]}'
    assert L.decode_server("s1", L.encode_server(info)) == info
    assert b"withdrawn" not in L.encode_server(ServerInfo("s1", "127.0.0.1", 9400))  # as older servers wrote it
    for bad in ((5, 1), (1, 1), (-1,), [1]):
        with pytest.raises(LayoutError):
            ServerInfo("s1", "127.0.0.1", 9400, withdrawn=bad)
    with pytest.raises(LayoutError, match="/zkcoord/servers/s1"):
        L.decode_server("s1", b'{"version":1,"host":"h","port":1,"withdrawn":[3,2]}')


# --- properties ------------------------------------------------------------------

ids = st.integers(0, 2**31 - 1)
hosts = st.from_regex(r"[a-z0-9][a-z0-9.-]{0,20}", fullmatch=True)
listener_names = st.from_regex(r"[A-Z][A-Z0-9_]{0,10}", fullmatch=True)
endpoints = st.lists(
    st.builds(
        ListenerEndpoint,
        listener_names,
        st.sampled_from(L.SECURITY_PROTOCOLS),
        st.one_of(hosts, st.just(""), st.just("fe80::1")),
        st.integers(0, 65535),
    ),
    max_size=4,
    unique_by=lambda e: e.listener_name,
)
registrations = st.builds(
    BrokerRegistration.for_endpoints,
    ids,
    endpoints,
    timestamp_ms=st.integers(0, 2**63 - 1),
    rack=st.one_of(st.none(), st.text(max_size=10)),
    jmx_port=st.integers(-1, 65535),
    version=st.sampled_from([4, 5]),
    features=st.dictionaries(
        st.text(min_size=1, max_size=10),
        st.tuples(st.integers(0, 10), st.integers(10, 20)),
        max_size=3,
    ),
).map(lambda r: r if r.version == 5 else BrokerRegistration(**{**r.__dict__, "features": {}}))


@given(registrations)
def test_broker_round_trip(reg):
    assert L.decode_broker(reg.broker_id, L.encode_broker(reg)) == reg


topic_names = st.from_regex(r"[a-zA-Z0-9._-]{1,30}", fullmatch=True).filter(
    lambda n: n not in (".", "..")
)
topic_ids = st.binary(min_size=16, max_size=16).map(
    lambda raw: __import__("base64").urlsafe_b64encode(raw).decode().rstrip("=")
)
assignments = st.one_of(
    st.builds(
        TopicAssignment,
        st.dictionaries(st.integers(0, 200), st.lists(ids, max_size=4).map(tuple), max_size=40),
        st.sampled_from([1, 2, 3]),
    ),
    st.builds(
        TopicAssignment,
        st.dictionaries(st.integers(0, 200), st.lists(ids, max_size=4).map(tuple), max_size=40),
        st.just(3),
        topic_ids,
    ),
)


@given(topic_names, assignments)
def test_topic_round_trip(topic, assignment):
    assert L.decode_topic(topic, L.encode_topic(assignment)) == assignment


@given(
    st.builds(
        PartitionState,
        st.integers(-2, 2**31 - 1),
        st.integers(0, 2**31 - 1),
        st.integers(0, 2**31 - 1),
        st.lists(ids, max_size=5).map(tuple),
    ),
    st.integers(0, 2**63 - 1),
    st.text(min_size=1).filter(lambda s: not _ZK_BAD_CHARS.search(s)),
)
def test_partition_state_offset_owner_round_trip(state, offset, owner):
    assert L.decode_partition_state(L.encode_partition_state(state)) == state
    assert L.decode_offset(L.encode_offset(offset)) == offset
    assert L.decode_owner(L.encode_owner(owner)) == owner


@given(
    st.integers(0, 2**31 - 1),
    st.sampled_from(["range", "roundrobin", "sticky"]),
    st.lists(st.tuples(topic_names, st.integers(0, 100)), unique=True, max_size=20),
    st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=4, unique=True),
)
def test_group_state_round_trip(generation, strategy, owned, members):
    # Partitions come back sorted; which members run what, as written.
    assignment = {m: tuple(sorted(owned[i :: len(members)])) for i, m in enumerate(members)}
    partly = {m: pairs[: len(pairs) // 2] for m, pairs in list(assignment.items())[:2]}
    for running in ({}, assignment, {**assignment, **partly}):
        state = GroupState(generation, strategy, assignment, running={m: p for m, p in running.items() if p})
        assert L.decode_group_state(L.encode_group_state(state)) == state


@given(
    st.lists(st.tuples(topic_names, st.integers(0, 100)), unique=True, max_size=60),
    st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=30, unique=True),
    st.integers(60, 400),
    st.booleans(),
)
def test_a_split_group_state_round_trip(owned, members, chunk_bytes, partly):
    assignment = {m: tuple(sorted(owned[i:: len(members)])) for i, m in enumerate(members)}
    running = {m: pairs[: len(pairs) // 2] if partly else pairs for m, pairs in assignment.items()}
    state = GroupState(3, "range", assignment, lease_ms=100, running={m: p for m, p in running.items() if p},
                       clients={m: L.MemberClient("h", m) for m in members[::2]},
                       proofs={m: "p" for m in members[1::2]})
    nodes = L.encode_group_state_nodes(state, node_bytes=0, chunk_bytes=chunk_bytes)
    assert read_back(nodes) == state
    # Members are never split across chunks: each over the size holds one,
    # unless its members' hashes agree in every bit the most chunks can use.
    most = zkcoord_nodes._MAX_CHUNKS
    for chunk in nodes.chunks.values():
        if len(chunk) > chunk_bytes:
            names = set().union(*(json.loads(chunk).get(f, {}) for f in ("assignment", "running", "clients", "proofs")))
            assert len(names) == 1 or len({zlib.crc32(n.encode()) & (most - 1) for n in names}) == 1


SAMPLES = [b[1] for b in BROKERS] + [t[1] for t in TOPICS] + [p[0] for p in PARTITION_STATES]
DECODERS = [
    lambda d: L.decode_broker(1, d),
    lambda d: L.decode_topic("t", d),
    L.decode_partition_state,
    L.decode_offset,
    L.decode_owner,
    L.decode_group_state,
    L.decode_group_state_node,
    lambda d: L.assemble_group_state(L.GroupStateManifest(1, "range", 0, (L.chunk_name(d),)), {L.chunk_name(d): d}),
    lambda d: L.decode_server("s", d),
    L.decode_coordinator,
    L.decode_coordinator_epoch,
    L.decode_slot_count,
    L.decode_cluster_id,
]


def _mutate(sample: bytes, edits: list[tuple[int, int]]) -> bytes:
    data = bytearray(sample)
    for pos, byte in edits:
        if data:
            data[pos % len(data)] = byte
    return bytes(data)


@given(
    st.one_of(
        st.binary(max_size=200),
        st.builds(
            _mutate,
            st.sampled_from(SAMPLES),
            st.lists(st.tuples(st.integers(0, 500), st.integers(0, 255)), min_size=1, max_size=3),
        ),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
            max_leaves=10,
        ).map(lambda v: json.dumps(v).encode()),
    )
)
def test_any_bytes_give_a_value_or_a_layout_error(data):
    for decode in DECODERS:
        try:
            decode(data)
        except LayoutError:
            pass


def test_slot_zero_is_the_seeds_single_coordinator_and_other_slots_live_under_zkcoord():
    assert L.slot_coordinator_path(0) == L.COORDINATOR_PATH and L.slot_epoch_path(0) == L.COORDINATOR_EPOCH_PATH
    assert L.slot_coordinator_path(3) == "/zkcoord/slots/3/coordinator"
    assert L.slot_epoch_path(3) == "/zkcoord/slots/3/epoch"
    for bad in (-1, 1.0, "1", None):
        with pytest.raises(LayoutError):
            L.slot_epoch_path(bad)


def test_slot_count_round_trips_and_refuses_what_is_not_a_count():
    assert L.decode_slot_count(L.encode_slot_count(16)) == 16
    assert L.encode_slot_count(3) == b'{"version":1,"slots":3}'
    for bad in (0, -1, True, 2.0, "4"):
        with pytest.raises(LayoutError):
            L.encode_slot_count(bad)
    for data in (b'{"version":1,"slots":0}', b'{"version":2,"slots":4}', b'{"version":1}', b"16"):
        with pytest.raises(LayoutError):
            L.decode_slot_count(data)


@pytest.mark.parametrize("decode, data, where", [
    (L.decode_partition_state, b'{"version":1,"leader_epoch":0,"controller_epoch":0,"isr":[]}', "partition state"),
    (partial(L.decode_server, "7"), b'{"version":1,"port":5}', "/zkcoord/servers/7"),
    (L.decode_group_state, b'{"version":2,"strategy":"range","assignment":{}}', "group state"),
])
def test_a_missing_field_is_reported_naming_the_node_once(decode, data, where):
    with pytest.raises(LayoutError) as info:
        decode(data)
    assert str(info.value).count(where) == 1 and "is missing" in str(info.value), str(info.value)


# --- /cluster/id ------------------------------------------------------------

# The node in the form Kafka's ClusterIdZNode writes (the version a string).
KAFKA_CLUSTER_ID = b'{"version":"1","id":"yWo4yAVpS2W1tqX3fRKbYQ"}'


def test_cluster_id_is_read_and_written_as_kafka_does():
    assert L.decode_cluster_id(KAFKA_CLUSTER_ID) == "yWo4yAVpS2W1tqX3fRKbYQ"
    assert L.encode_cluster_id("yWo4yAVpS2W1tqX3fRKbYQ") == KAFKA_CLUSTER_ID
    made = L.kafka_uuid(bytes(range(16)))
    assert made == "AAECAwQFBgcICQoLDA0ODw" and L.decode_cluster_id(L.encode_cluster_id(made)) == made
    # the version as a number reads too (Kafka itself ignores it)
    assert L.decode_cluster_id(b'{"version":1,"id":"AAECAwQFBgcICQoLDA0ODw"}') == made


@pytest.mark.parametrize("data", [
    b"", b"yWo4yAVpS2W1tqX3fRKbYQ", b'{"version":"1"}', b'{"id":"yWo4yAVpS2W1tqX3fRKbYQ"}',
    b'{"version":"2","id":"yWo4yAVpS2W1tqX3fRKbYQ"}', b'{"version":true,"id":"yWo4yAVpS2W1tqX3fRKbYQ"}',
    b'{"version":"1","id":null}', b'{"version":"1","id":"short"}', b'{"version":"1","id":"yWo4yAVpS2W1tqX3fRKbY="}',
    b'{"version":"1","id":"yWo4yAVpS2W1tqX3fRKbY/"}',
])
def test_bad_cluster_id_is_a_layout_error_naming_the_node(data):
    with pytest.raises(LayoutError, match="/cluster/id"):
        L.decode_cluster_id(data)


@pytest.mark.parametrize("bad", ["", "short", "yWo4yAVpS2W1tqX3fRKbY=", None])
def test_only_a_kafka_uuid_is_written_as_cluster_id(bad):
    with pytest.raises(LayoutError):
        L.encode_cluster_id(bad)
    with pytest.raises(LayoutError):
        L.kafka_uuid(b"\x00" * 15)


# -- /latest_producer_id_block --------------------------------------------------------


def test_producer_id_blocks_follow_one_another_as_kafka_claims_them():
    first = L.next_producer_id_block(None, 2)
    assert first == L.ProducerIdBlock(2, 0, 999)
    assert L.encode_producer_id_block(first) == b'{"version":1,"broker":2,"block_start":"0","block_end":"999"}'
    after = L.next_producer_id_block(L.decode_producer_id_block(b'{"version":1,"broker":0,"block_start":"5000",'
                                                                b'"block_end":"5999"}'), 7)
    assert after == L.ProducerIdBlock(7, 6000, 6999)
    assert L.decode_producer_id_block(L.encode_producer_id_block(after)) == after
    # the last block that fits below 2**63 - 1, and then no more
    last = L.next_producer_id_block(L.ProducerIdBlock(0, 0, 2**63 - 1 - 1000), 0)
    assert last.last == 2**63 - 1
    with pytest.raises(L.ProducerIdsExhausted, match="every producer id has been handed out"):
        L.next_producer_id_block(last, 0)


@pytest.mark.parametrize("data, problem", [
    (b'{"version":1,"broker":0,"block_start":0,"block_end":"999"}', "must be a string"),
    (b'{"version":1,"broker":0,"block_start":"-1","block_end":"999"}', "decimal id"),
    (b'{"version":1,"broker":0,"block_start":"0","block_end":"9223372036854775808"}', "decimal id"),
    (b'{"version":1,"broker":0,"block_start":"10","block_end":"9"}', "before block_start"),
    (b'{"version":1,"block_start":"0","block_end":"9"}', "'broker' is missing"),
])
def test_bad_producer_id_blocks_are_refused(data, problem):
    with pytest.raises(L.LayoutError, match=problem):
        L.decode_producer_id_block(data)


@pytest.mark.parametrize("partitions", [{("t", 3)}, {("t", 3), ("t", 1), ("u", 0)}], ids=["one", "several"])
def test_a_fetch_fence_round_trips_whatever_its_partition_count(partitions):
    # A fence's partitions are a frozenset: one partition once broke the
    # encoder's fast path (indexing), and the broker's fence writer with it.
    fence = L.FetchFence("g", "m", "10.0.0.7", "c", frozenset(partitions))
    assert L.decode_fetch_fence(L.encode_fetch_fence(fence), "/f") == fence
