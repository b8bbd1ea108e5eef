"""Request handlers and response framing without sockets: real partition logs
in a temporary directory, requests built with kafka-python's classes."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from tests.broker.batches import make_batch, read_values
from zkcoord.broker import handlers, protocol
from zkcoord.broker.handlers import BrokerAddress, Handlers, MetadataCache, PartitionInfo
from zkcoord.broker.log import LogConfig, PartitionLog


@pytest.fixture
def state(tmp_path):
    cache = MetadataCache(
        brokers={1: BrokerAddress("127.0.0.1", 9001, None), 2: BrokerAddress("127.0.0.1", 9002, "r2")},
        topics={"t": {0: PartitionInfo(1, 0, (1,), (1,)), 1: PartitionInfo(1, 0, (1,), (1,)),
                      2: PartitionInfo(2, 3, (2,), (2,)), 3: PartitionInfo(7, 0, (7,), (7,))}})
    logs = {("t", p): PartitionLog(str(tmp_path / f"t-{p}"), LogConfig(), time.time) for p in (0, 1)}
    ids = iter(range(100, 200))
    yield Handlers(1, cache, logs, lambda: next(ids), sendfile_threshold=1000), logs
    for plog in logs.values():
        plog.close()


def fetch_request(partitions, max_bytes=1 << 20, partition_max_bytes=1 << 20, version=12):
    Topic = FetchRequest.FetchTopic
    request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes,
                           isolation_level=0, session_id=0, session_epoch=-1,
                           topics=[Topic(topic="t", partitions=[
                               Topic.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=o,
                                                    last_fetched_epoch=-1, log_start_offset=-1,
                                                    partition_max_bytes=partition_max_bytes)
                               for p, o in partitions])],
                           forgotten_topics_data=[], rack_id="")
    request.API_VERSION = version
    return request


def joined(parts) -> bytes:
    out = b""
    for part in parts:
        if isinstance(part, protocol.FileRange):
            out += os.pread(part.fd, part.count, part.offset)
            os.close(part.fd)
        else:
            out += part
    return out


def test_fetch_budget_first_batch_always_then_whole_batches(state):
    h, logs = state
    big = make_batch([b"x" * 3000])
    logs["t", 0].append(big)
    logs["t", 1].append(make_batch([b"y" * 10]))
    outcome = h.fetch(fetch_request([(0, 0), (1, 0)], max_bytes=100))
    first, second = outcome.response.responses[0].partitions
    assert outcome.slices and outcome.bytes_ready == len(big)  # over the limit, still sent
    assert second.records == b"" and second.error_code == 0  # the budget is spent
    encoded = joined(protocol.encode_response(outcome.response, 7, outcome.slices))
    decoded = FetchResponse.decode(encoded, version=12, header=True, framed=True)
    assert read_values(decoded.responses[0].partitions[0].records) == [(0, b"x" * 3000)]


@pytest.mark.parametrize("version", [4, 11, 12])
def test_sendfile_framing_equals_inline_encoding(state, version):
    h, logs = state
    for i in range(5):
        logs["t", 0].append(make_batch([bytes([i]) * 700] * 3))
    logs["t", 1].append(make_batch([b"small"]))
    outcome = h.fetch(fetch_request([(0, 0), (1, 0), (3, 0)], version=version))
    assert len(outcome.slices) == 1
    spliced = protocol.encode_response(outcome.response, 9, outcome.slices)
    # the same response with the bytes put inline by the library itself
    inline = outcome.response
    for part in inline.responses[0].partitions:
        if part.records in outcome.slices:
            part.records = outcome.slices[part.records].read()
    assert joined(spliced) == bytes(protocol.encode_response(inline, 9)[0])
    errors = [p.error_code for p in inline.responses[0].partitions]
    assert errors == [0, 0, handlers.NOT_LEADER_OR_FOLLOWER]


def test_metadata_reports_leaders_and_dead_ones(state):
    h, _ = state
    request = MetadataRequest(topics=None)
    request.API_VERSION = 9
    response = h.metadata(request)
    assert {(b.node_id, b.rack) for b in response.brokers} == {(1, None), (2, "r2")}
    parts = {p.partition_index: p for p in response.topics[0].partitions}
    assert (parts[2].leader_id, parts[2].leader_epoch, parts[2].error_code) == (2, 3, 0)
    assert (parts[3].leader_id, parts[3].error_code, parts[3].offline_replicas) == (
        -1, handlers.LEADER_NOT_AVAILABLE, [7])


def produce_request(partition, records, transactional_id=None, acks=-1):
    Topic = ProduceRequest.TopicProduceData
    request = ProduceRequest(transactional_id=transactional_id, acks=acks, timeout_ms=100, topic_data=[
        Topic(name="t", partition_data=[Topic.PartitionProduceData(index=partition, records=records)])])
    request.API_VERSION = 9
    return request


def test_produce_errors_and_acks_zero(state):
    h, logs = state

    def code(request):
        return h.produce(request).responses[0].partition_responses[0].error_code
    assert code(produce_request(2, make_batch([b"a"]))) == handlers.NOT_LEADER_OR_FOLLOWER
    assert code(produce_request(9, make_batch([b"a"]))) == handlers.UNKNOWN_TOPIC_OR_PARTITION
    assert code(produce_request(0, make_batch([b"a"]), transactional_id="tx")) == handlers.INVALID_TXN_STATE
    assert code(produce_request(0, None)) == handlers.CORRUPT_MESSAGE
    assert logs["t", 0].log_end_offset == 0
    assert h.produce(produce_request(0, make_batch([b"a", b"b"]), acks=0)) is None
    assert logs["t", 0].log_end_offset == 2


def test_metadata_refuses_a_topic_it_may_not_describe_whether_or_not_it_exists(state):
    """Review finding: a topic asked for by name that did not exist was
    answered UNKNOWN_TOPIC_OR_PARTITION whoever asked, one that existed
    TOPIC_AUTHORIZATION_FAILED with its id, so a client allowed nothing
    learnt which topics exist (and their ids); asked for by id, the refusal
    named the topic. As Kafka: refused first, no id for a name, no name for an id."""
    h, _ = state
    h.metadata_cache.topic_ids["t"] = "AAAAAAAAAAAAAAAAAAAAAQ"
    known, unknown, zero = uuid.UUID(int=1), uuid.UUID(int=9), uuid.UUID(int=0)
    Topic = MetadataRequest.MetadataRequestTopic

    def answer(topics, describable):
        request = MetadataRequest(topics=topics, allow_auto_topic_creation=False)
        request.API_VERSION = 12
        return [(t.error_code, t.name, t.topic_id or zero) for t in h.metadata(request, describable).topics]

    by_name = [Topic(topic_id=zero, name="t"), Topic(topic_id=zero, name="absent")]
    assert answer(by_name, lambda _topic: False) == [(handlers.TOPIC_AUTHORIZATION_FAILED, "t", zero),
                                                     (handlers.TOPIC_AUTHORIZATION_FAILED, "absent", zero)]
    assert answer(by_name, lambda _topic: True) == [(handlers.NONE, "t", known),
                                                    (handlers.UNKNOWN_TOPIC_OR_PARTITION, "absent", zero)]
    by_id = [Topic(topic_id=known, name=None), Topic(topic_id=unknown, name=None)]
    assert answer(by_id, lambda _topic: False) == [(handlers.TOPIC_AUTHORIZATION_FAILED, None, known),
                                                   (handlers.UNKNOWN_TOPIC_ID, None, unknown)]
    assert answer(by_id, lambda _topic: True)[0] == (handlers.NONE, "t", known)
