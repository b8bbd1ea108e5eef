"""The gateway's decisions (zkcoord/broker/gateway.py), without a network:
what a relay sends on and what it answers itself, what Kafka answers, and
how Kafka's Metadata becomes the gateway's."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest

from zkcoord.broker import gateway
from zkcoord.broker.handlers import BrokerAddress, PartitionInfo


def frame(request, version: int, client_id: str = "member-7") -> bytes:
    """A request as a client sends it, without the size."""
    request.with_header(correlation_id=3, client_id=client_id)
    return request.encode(version=version, header=True, framed=False)


def produce(acks: int):
    Topic = ProduceRequest.TopicProduceData
    return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=1000, topic_data=[
        Topic(name="t", partition_data=[Topic.PartitionProduceData(index=0, records=b"")])])


def fetch():
    Topic = FetchRequest.FetchTopic
    return FetchRequest(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1024, isolation_level=0,
                        session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                        topics=[Topic(topic="t", partitions=[Topic.FetchPartition(
                            partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                            log_start_offset=-1, partition_max_bytes=1024)])])


@pytest.mark.parametrize("version", [4, 12])  # header v1, and v2 (flexible) with its tagged fields after
def test_a_fetch_is_relayed_and_its_client_id_read_from_the_header(version):
    sent = frame(fetch(), version)
    assert gateway.api_key(sent) == FetchRequest.API_KEY
    assert gateway.client_id(sent) == "member-7"
    assert gateway.relayed(sent) and gateway.answered(sent)


def test_metadata_and_the_group_apis_are_answered_by_the_gateway():
    metadata = MetadataRequest(topics=None, allow_auto_topic_creation=False)
    coordinator = FindCoordinatorRequest(key="g", key_type=0)
    assert not gateway.relayed(frame(metadata, 1))
    assert not gateway.relayed(frame(coordinator, 1))


def test_kafkas_own_group_apis_are_never_relayed():
    describe_kafka_group = (69).to_bytes(2, "big") + (0).to_bytes(2, "big") + (1).to_bytes(4, "big") + b"\x00\x00"
    assert not gateway.relayed(describe_kafka_group)


@pytest.mark.parametrize("acks, answered", [(0, False), (1, True), (-1, True)])
def test_kafka_answers_a_produce_unless_its_acks_are_0(acks, answered):
    sent = frame(produce(acks), 9)
    assert gateway.relayed(sent)
    assert gateway.answered(sent) is answered


def test_kafkas_metadata_becomes_the_gateways_cache():
    Broker = MetadataResponse.MetadataResponseBroker
    Topic = MetadataResponse.MetadataResponseTopic
    topic_id = uuid.uuid4()
    response = MetadataResponse(
        version=12, throttle_time_ms=0, cluster_id="kafka-cluster", controller_id=2,
        brokers=[Broker(node_id=1, host="k1", port=9092, rack="r1"),
                 Broker(node_id=2, host="k2", port=9092, rack=None)],
        topics=[
            Topic(error_code=0, name="t", topic_id=topic_id, is_internal=False, partitions=[
                Topic.MetadataResponsePartition(error_code=0, partition_index=0, leader_id=2, leader_epoch=5,
                                                replica_nodes=[2, 1], isr_nodes=[2], offline_replicas=[])]),
            Topic(error_code=3, name="gone", topic_id=uuid.UUID(int=0), is_internal=False, partitions=[])])
    cache = gateway.cache_of_response(response)
    assert cache.brokers == {1: BrokerAddress("k1", 9092, "r1"), 2: BrokerAddress("k2", 9092, None)}
    assert cache.topics == {"t": {0: PartitionInfo(2, 5, (2, 1), (2,))}}
    assert set(cache.topic_ids) == {"t"}
    assert cache.cluster_id == "kafka-cluster" and cache.controller_id(own_id=9) == 2

    seen = gateway.with_gateway(cache, 9, BrokerAddress("gw", 9000, None),
                                {1: BrokerAddress("gw", 9001, "r1"), 2: BrokerAddress("gw", 9002, None)})
    assert {node: a.port for node, a in seen.brokers.items()} == {1: 9001, 2: 9002, 9: 9000}
    assert seen.topics == cache.topics and seen.controller_id(own_id=9) == 2


def test_describe_cluster_is_answered_by_the_gateway():
    from kafka.protocol.admin import DescribeClusterRequest

    describe = DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=1)
    assert not gateway.relayed(frame(describe, 1))  # Kafka's answer would name its brokers' own addresses


def api_versions(offered: dict):
    """An ApiVersions answer (version 3) offering {API key: (min, max)}."""
    from zkcoord.broker.protocol import api_versions_response

    response = api_versions_response(3)
    Entry = type(response.api_keys[0])
    response.api_keys = [Entry(api_key=key, min_version=low, max_version=high)
                         for key, (low, high) in sorted(offered.items())]
    return response


def offered(response) -> dict:
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


def test_no_listener_offers_a_produce_or_fetch_version_whose_refusals_name_kafkas_brokers():
    """KIP-951: Produce from 10 and Fetch from 16 answer NOT_LEADER_OR_FOLLOWER
    with the new leader's endpoint, Kafka's own address, which a relay would
    pass on unread: the client would then ask Kafka for its coordinator."""
    kafka = api_versions({ProduceRequest.API_KEY: (3, 12), FetchRequest.API_KEY: (4, 17), 23: (0, 4)})
    kafka.with_header(correlation_id=5)
    kafka_answer = bytes(kafka.encode(header=True))
    ours = {ProduceRequest.API_KEY: (0, 11), FetchRequest.API_KEY: (0, 12), 18: (0, 3)}
    relayed = offered(gateway.relay_api_versions(api_versions(ours), kafka_answer))
    assert relayed[ProduceRequest.API_KEY] == (3, 9) and relayed[FetchRequest.API_KEY] == (4, 15)
    assert relayed[23] == (0, 4) and relayed[18] == (0, 3)  # the rest as Kafka (relayed) and we (answered) say
    # No Kafka broker answered: the gateway's own versions, capped all the same.
    alone = offered(gateway.relay_api_versions(api_versions(ours), None))
    assert alone[ProduceRequest.API_KEY] == (0, 9) and alone[FetchRequest.API_KEY] == (0, 12)
