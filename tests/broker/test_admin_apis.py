"""The admin APIs against real broker processes, through the admin clients
of confluent-kafka (librdkafka) and kafka-python: DescribeCluster (and the
cluster id Metadata carries), CreateTopics and CreatePartitions with their
errors, DescribeConfigs of topics and brokers, IncrementalAlterConfigs
refused. Every answer is checked against ZooKeeper or the
broker's settings; a truncated frame of each API closes only its connection."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewPartitions, NewTopic, ResourceType,
)
from kafka.admin import KafkaAdminClient
from kafka.errors import InvalidPartitionsError, TopicAlreadyExistsError
from kafka.protocol.admin import CreateTopicsRequest, DescribeClusterRequest, DescribeConfigsRequest

from tests.broker.batches import make_batch, read_values
from tests.broker.test_clients import confluent_produce, confluent_read
from tests.broker.test_protocol import Raw, fetch, produce
from zkcoord.broker import handlers, kafka_configs
from zkcoord.testing.process import ProcessExited
from zkcoord.zk import layout

SEGMENT_BYTES = 4 << 20  # broker 0 runs with it set; everything else is left at the defaults


@pytest.fixture
def two_brokers(cluster):
    cluster.start_broker(0, "--segment-bytes", str(SEGMENT_BYTES))
    cluster.start_broker(1)
    cluster.wait_for_brokers()
    return cluster


def stored_cluster_id(cluster) -> str:
    return layout.decode_cluster_id(cluster.zk.get(layout.CLUSTER_ID_PATH)[0])


def describe_cluster_in_a_process(bootstrap: str) -> dict:
    """confluent-kafka's describe_cluster(), in a process of its own: it used
    to crash the client (a null cluster id), which must fail this test, not
    end the test run."""
    script = textwrap.dedent(f"""
        import json
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({{"bootstrap.servers": "{bootstrap}"}})
        result = admin.describe_cluster(request_timeout=20).result()
        print(json.dumps({{"cluster_id": result.cluster_id, "controller": result.controller.id,
                           "nodes": sorted([n.id, n.host, n.port] for n in result.nodes)}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return json.loads(done.stdout)


# -- DescribeCluster and the cluster id ------------------------------------------------


def test_describe_cluster_answers_with_the_stored_cluster_id_brokers_and_controller(two_brokers):
    cluster_id = stored_cluster_id(two_brokers)
    assert len(cluster_id) == 22
    nodes = sorted([b.broker_id, "127.0.0.1", b.port] for b in two_brokers.brokers)
    for broker in two_brokers.brokers:  # every broker answers alike
        assert describe_cluster_in_a_process(broker.bootstrap) == {
            "cluster_id": cluster_id, "controller": 0, "nodes": nodes}
    admin = KafkaAdminClient(bootstrap_servers=two_brokers.brokers[1].bootstrap)
    described = admin.describe_cluster()  # kafka-python reads it from Metadata
    admin.close()
    assert (described["cluster_id"], described["controller_id"]) == (cluster_id, 0)
    assert sorted(b["broker_id"] for b in described["brokers"]) == [0, 1]


def test_describe_cluster_request_is_answered_directly(two_brokers):
    raw = Raw(two_brokers.brokers[1].port)
    from kafka.protocol.admin import DescribeClusterResponse
    answer = raw.call(DescribeClusterRequest(include_cluster_authorized_operations=False),
                      DescribeClusterResponse, 0)
    controllers = raw.call(DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=2),
                           DescribeClusterResponse, 1)
    raw.close()
    assert (answer.error_code, answer.cluster_id, answer.controller_id) == (0, stored_cluster_id(two_brokers), 0)
    assert sorted((b.broker_id, b.port) for b in answer.brokers) == sorted(
        (b.broker_id, b.port) for b in two_brokers.brokers)
    # v1 may ask for the controllers' endpoints, which a ZooKeeper-mode cluster has not
    assert (controllers.error_code, controllers.brokers) == (handlers.MISMATCHED_ENDPOINT_TYPE, [])


def test_a_broker_keeps_the_cluster_id_it_finds_and_refuses_one_it_cannot_read(cluster):
    cluster.zk.create(layout.CLUSTER_ID_PATH, layout.encode_cluster_id("yWo4yAVpS2W1tqX3fRKbYQ"), makepath=True)
    cluster.start_broker(0)
    assert describe_cluster_in_a_process(cluster.brokers[0].bootstrap)["cluster_id"] == "yWo4yAVpS2W1tqX3fRKbYQ"
    cluster.zk.set(layout.CLUSTER_ID_PATH, b'{"version":"1","id":"not a uuid"}')
    with pytest.raises(ProcessExited):
        cluster.start_broker(1)
    assert "cluster id" in cluster.brokers[-1].log_tail()
    assert cluster.zk.get(layout.CLUSTER_ID_PATH)[0] == b'{"version":"1","id":"not a uuid"}'


# -- CreateTopics ----------------------------------------------------------------------


def error_codes(futures: dict) -> dict:
    """Each topic's error code (0 when done), from an admin call's futures by topic."""
    out = {}
    for name, future in futures.items():
        try:
            future.result()
            out[name] = 0
        except KafkaException as exc:
            out[name] = exc.args[0].code()
    return out


def create(admin: AdminClient, topics: list[NewTopic], **options) -> dict:
    """Each topic's error code (0 when created)."""
    return error_codes(admin.create_topics(topics, operation_timeout=20, **options))


def test_confluent_create_topics_creates_as_zkcoord_topics_does_and_explains_refusals(two_brokers):
    zk = two_brokers.zk
    bootstrap = two_brokers.brokers[1].bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert create(admin, [NewTopic("made", 4, 1), NewTopic("placed", 3, replica_assignment=[[1], [0], [1]]),
                          NewTopic("kept-config", 1, 1, config={"cleanup.policy": "delete"})]) == {
        "made": 0, "placed": 0, "kept-config": 0}
    assert layout.decode_topic("made", zk.get(layout.topic_path("made"))[0]).partitions == {
        0: (0,), 1: (1,), 2: (0,), 3: (1,)}
    assert layout.decode_topic("placed", zk.get(layout.topic_path("placed"))[0]).partitions == {
        0: (1,), 1: (0,), 2: (1,)}
    # the topic is there for a producer at once
    confluent_produce(bootstrap, "made", 3, [b"at once"])
    assert [v for _, _, v in confluent_read(bootstrap, "made", 3, 0, 1)] == [b"at once"]

    before = sorted(zk.get_children(layout.BROKER_TOPICS))
    assert create(admin, [NewTopic("only-checked", 2, 1)], validate_only=True) == {"only-checked": 0}
    assert create(admin, [
        NewTopic("made", 1, 1),
        NewTopic("bad name!", 1, 1),
        NewTopic("three-copies", 1, 3),
        NewTopic("two-replicas", 1, replica_assignment=[[0, 1]]),
        NewTopic("on-a-ghost", 1, replica_assignment=[[7]]),
        NewTopic("short-retention", 1, 1, config={"retention.ms": "1000"}),
        NewTopic("unknown-config", 1, 1, config={"no.such.config": "1"}),
    ]) == {
        "made": KafkaError.TOPIC_ALREADY_EXISTS,
        "bad name!": KafkaError.TOPIC_EXCEPTION,
        "three-copies": KafkaError.INVALID_REPLICATION_FACTOR,
        "two-replicas": KafkaError.INVALID_REPLICA_ASSIGNMENT,
        "on-a-ghost": KafkaError.INVALID_REPLICA_ASSIGNMENT,
        "short-retention": KafkaError.INVALID_CONFIG,
        "unknown-config": KafkaError.INVALID_CONFIG,
    }
    assert sorted(zk.get_children(layout.BROKER_TOPICS)) == before
    assert layout.decode_topic("made", zk.get(layout.topic_path("made"))[0]).partitions[3] == (1,)


def test_kafka_python_create_topics(two_brokers):
    admin = KafkaAdminClient(bootstrap_servers=two_brokers.brokers[0].bootstrap)
    answer = admin.create_topics({"kp-made": {"num_partitions": 2, "replication_factor": 1}}, timeout_ms=20_000)
    assert [(t["name"], t["error_code"]) for t in answer["topics"]] == [("kp-made", 0)]
    assert layout.decode_topic("kp-made", two_brokers.zk.get(layout.topic_path("kp-made"))[0]).partitions == {
        0: (0,), 1: (1,)}
    # the broker's defaults: one partition, one replica
    admin.create_topics({"kp-default": {}}, timeout_ms=20_000)
    assert len(layout.decode_topic("kp-default", two_brokers.zk.get(layout.topic_path("kp-default"))[0])
               .partitions) == 1
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics({"kp-made": {"num_partitions": 2, "replication_factor": 1}}, timeout_ms=20_000)
    with pytest.raises(InvalidPartitionsError):
        admin.create_topics({"kp-none": {"num_partitions": 0, "replication_factor": 1}}, timeout_ms=20_000)
    answer = admin.create_topics({"kp-a": {"num_partitions": 1, "replication_factor": 1},
                                  "kp-b": {"assignments": {0: [0], 1: [1]}, "num_partitions": 2}},
                                 timeout_ms=20_000, raise_errors=False)
    admin.close()
    errors = {t["name"]: (t["error_code"], t["error_message"]) for t in answer["topics"]}
    assert errors["kp-a"] == (0, None)
    assert errors["kp-b"][0] == handlers.INVALID_REQUEST and "one or the other" in errors["kp-b"][1]


@pytest.mark.parametrize("version", [0, 1, 4, 7])
def test_create_topics_at_every_era_of_the_request(two_brokers, version):
    from kafka.protocol.admin import CreateTopicsResponse
    Topic = CreateTopicsRequest.CreatableTopic
    request = CreateTopicsRequest(topics=[Topic(name=f"v{version}", num_partitions=2, replication_factor=1,
                                                assignments=[], configs=[])], timeout_ms=10_000,
                                  validate_only=False)
    raw = Raw(two_brokers.brokers[0].port)
    result = raw.call(request, CreateTopicsResponse, version).topics[0]
    again = raw.call(request, CreateTopicsResponse, version).topics[0]
    raw.close()
    assert (result.name, result.error_code) == (f"v{version}", 0)
    assert again.error_code == handlers.TOPIC_ALREADY_EXISTS
    if version >= 1:
        assert "already exists" in again.error_message
    if version >= 5:
        assert (result.num_partitions, result.replication_factor) == (2, 1)
        configs = {c.name: c.value for c in result.configs}
        assert configs["segment.bytes"] == str(SEGMENT_BYTES) and configs["cleanup.policy"] == "delete"


# -- CreatePartitions ------------------------------------------------------------------


def grow(admin: AdminClient, growths: list[NewPartitions], **options) -> dict:
    """Each topic's error code (0 when grown)."""
    return error_codes(admin.create_partitions(growths, operation_timeout=20, **options))


def test_create_partitions_grows_topics_as_zkcoord_topics_add_partitions_does(two_brokers):
    zk = two_brokers.zk
    two_brokers.create_topic("grown", 2)
    bootstrap = two_brokers.brokers[1].bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert grow(admin, [NewPartitions("grown", 4)], validate_only=True) == {"grown": 0}
    assert len(layout.decode_topic("grown", zk.get(layout.topic_path("grown"))[0]).partitions) == 2
    assert grow(admin, [NewPartitions("grown", 5)]) == {"grown": 0}
    # placed round robin over the live brokers, continuing where the topic left off
    assert layout.decode_topic("grown", zk.get(layout.topic_path("grown"))[0]).partitions == {
        0: (0,), 1: (1,), 2: (0,), 3: (1,), 4: (0,)}
    # a new partition the answering broker leads is there for a producer at once
    confluent_produce(bootstrap, "grown", 3, [b"at once"])
    assert [v for _, _, v in confluent_read(bootstrap, "grown", 3, 0, 1)] == [b"at once"]
    assert grow(admin, [NewPartitions("grown", 3), NewPartitions("missing", 2),
                        NewPartitions("grown-placed", 2, replica_assignment=[[1]])]) == {
        "grown": KafkaError.INVALID_PARTITIONS, "missing": KafkaError.UNKNOWN_TOPIC_OR_PART,
        "grown-placed": KafkaError.INVALID_REPLICA_ASSIGNMENT}
    assert len(layout.decode_topic("grown", zk.get(layout.topic_path("grown"))[0]).partitions) == 5


# -- DescribeConfigs -------------------------------------------------------------------


def test_confluent_describe_configs_of_a_topic_and_a_broker(two_brokers):
    two_brokers.create_topic("described", 1)
    admin = AdminClient({"bootstrap.servers": two_brokers.brokers[0].bootstrap})
    topic = ConfigResource(ResourceType.TOPIC, "described")
    broker = ConfigResource(ResourceType.BROKER, "0")
    results = admin.describe_configs([topic, broker], request_timeout=20)
    topic_configs = results[topic].result()
    assert topic_configs["segment.bytes"].value == str(SEGMENT_BYTES)
    assert topic_configs["segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert not topic_configs["segment.bytes"].is_default
    assert topic_configs["retention.ms"].value == str(7 * 24 * 3600 * 1000)
    assert topic_configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert topic_configs["cleanup.policy"].value == "delete" and topic_configs["cleanup.policy"].is_read_only
    assert "log.segment.bytes" in topic_configs["segment.bytes"].synonyms
    broker_configs = results[broker].result()
    assert broker_configs["broker.id"].value == "0"
    assert broker_configs["log.segment.bytes"].value == str(SEGMENT_BYTES)
    assert broker_configs["auto.create.topics.enable"].value == "false"
    # librdkafka asks a broker's configs of that broker itself
    other = ConfigResource(ResourceType.BROKER, "1")
    other_configs = admin.describe_configs([other], request_timeout=20)[other].result()
    assert other_configs["broker.id"].value == "1" and other_configs["log.segment.bytes"].is_default
    missing = ConfigResource(ResourceType.TOPIC, "missing")
    with pytest.raises(KafkaException) as info:
        admin.describe_configs([missing], request_timeout=20)[missing].result()
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_configs_synonyms_name_the_broker_setting_then_its_default(two_brokers):
    from kafka.protocol.admin import DescribeConfigsResponse
    two_brokers.create_topic("synonyms", 1)
    Resource = DescribeConfigsRequest.DescribeConfigsResource
    request = DescribeConfigsRequest(resources=[Resource(
        resource_type=kafka_configs.RESOURCE_TOPIC, resource_name="synonyms",
        configuration_keys=["segment.bytes", "retention.ms"])], include_synonyms=True, include_documentation=True)
    raw = Raw(two_brokers.brokers[0].port)
    configs = {c.name: c for c in raw.call(request, DescribeConfigsResponse, 4).results[0].configs}
    raw.close()
    assert [(s.name, s.value, s.source) for s in configs["segment.bytes"].synonyms] == [
        ("log.segment.bytes", str(SEGMENT_BYTES), kafka_configs.STATIC_BROKER_CONFIG),
        ("log.segment.bytes", str(128 << 20), kafka_configs.DEFAULT_CONFIG)]
    assert [(s.name, s.source) for s in configs["retention.ms"].synonyms] == [
        ("log.retention.ms", kafka_configs.DEFAULT_CONFIG)]
    assert configs["retention.ms"].config_type == kafka_configs.LONG and configs["retention.ms"].documentation


def test_describe_configs_v0_and_a_key_filter(two_brokers):
    from kafka.protocol.admin import DescribeConfigsResponse
    two_brokers.create_topic("filtered", 1)
    Resource = DescribeConfigsRequest.DescribeConfigsResource
    request = DescribeConfigsRequest(resources=[
        Resource(resource_type=kafka_configs.RESOURCE_TOPIC, resource_name="filtered",
                 configuration_keys=["retention.bytes", "segment.bytes", "not.a.config"]),
        Resource(resource_type=kafka_configs.RESOURCE_BROKER, resource_name="", configuration_keys=None),
        Resource(resource_type=8, resource_name="0", configuration_keys=None),
        Resource(resource_type=kafka_configs.RESOURCE_BROKER, resource_name="1", configuration_keys=None)])
    raw = Raw(two_brokers.brokers[0].port)
    results = raw.call(request, DescribeConfigsResponse, 0).results
    raw.close()
    assert [(c.name, c.value, c.is_default) for c in results[0].configs] == [
        ("retention.bytes", "-1", True), ("segment.bytes", str(SEGMENT_BYTES), False)]
    assert (results[1].error_code, results[1].configs) == (0, [])       # no cluster-wide dynamic defaults
    assert results[2].error_code == handlers.INVALID_REQUEST and "resource type 8" in results[2].error_message
    assert results[3].error_code == handlers.INVALID_REQUEST and "ask that broker" in results[3].error_message


def test_incremental_alter_configs_is_refused_saying_why_and_changes_nothing(two_brokers):
    two_brokers.create_topic("altered", 1)
    admin = AdminClient({"bootstrap.servers": two_brokers.brokers[0].bootstrap})
    shorter = [ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)]
    resources = [ConfigResource(ResourceType.TOPIC, "altered", incremental_configs=shorter),
                 ConfigResource(ResourceType.TOPIC, "missing", incremental_configs=shorter)]
    errors = {}
    for resource, future in admin.incremental_alter_configs(resources, request_timeout=20).items():
        with pytest.raises(KafkaException) as info:
            future.result()
        errors[resource.name] = info.value.args[0]
    assert errors["altered"].code() == KafkaError.INVALID_CONFIG
    assert "settings this broker was started with" in errors["altered"].str()
    assert errors["missing"].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    topic = ConfigResource(ResourceType.TOPIC, "altered")
    assert admin.describe_configs([topic], request_timeout=20)[topic].result()["retention.ms"].value == \
        str(7 * 24 * 3600 * 1000)


# -- malformed frames ------------------------------------------------------------------


@pytest.mark.parametrize("api", ["CreateTopics", "DescribeConfigs", "DescribeCluster"])
def test_truncated_admin_frames_close_the_connection_and_change_nothing(two_brokers, api):
    if api == "CreateTopics":
        Topic = CreateTopicsRequest.CreatableTopic
        request = CreateTopicsRequest(topics=[Topic(name="never", num_partitions=1, replication_factor=1,
                                                    assignments=[], configs=[])], timeout_ms=1000,
                                      validate_only=False)
        version = 7
    elif api == "DescribeConfigs":
        Resource = DescribeConfigsRequest.DescribeConfigsResource
        request = DescribeConfigsRequest(resources=[Resource(resource_type=2, resource_name="never",
                                                             configuration_keys=None)])
        version = 4
    else:
        request = DescribeClusterRequest(include_cluster_authorized_operations=False)
        version = 0
    request.API_VERSION = version
    request.with_header(correlation_id=3, client_id="cut")
    frame = bytes(request.encode(header=True))
    port = two_brokers.brokers[0].port
    for cut in (1, 2, len(frame) // 2):
        raw = Raw(port)
        raw.send_frame(frame[:-cut])
        assert raw.closed_by_peer(), cut
        raw.close()
    assert two_brokers.zk.exists(layout.topic_path("never")) is None
    two_brokers.create_topic("after", 1)
    raw = Raw(port)
    assert produce(raw, "after", 0, make_batch([b"still"])).error_code == 0
    assert read_values(fetch(raw, "after", 0, 0).records) == [(0, b"still")]
    raw.close()
