"""The broker's protocol edges, over raw sockets with kafka-python's message
classes: bad frames, unknown APIs and versions, oversized requests, unknown
topics, corrupt batches, out-of-range fetches, long polls and large fetches.
After each abuse the broker must still serve and the log must be intact."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse

from kafka.record.legacy_records import LegacyRecordBatchBuilder

from tests.broker.batches import make_batch, read_values
from zkcoord.testing import wait_until
from zkcoord.broker import handlers


class Raw:
    """A blocking Kafka-protocol connection for tests."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.correlation = 0
        self.sent = 0  # requests fully handed to the kernel

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(len(payload).to_bytes(4, "big") + payload)

    def recv_frame(self) -> bytes:
        size = int.from_bytes(self._exact(4), "big")
        return self._exact(size)

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by broker")
            buf += chunk
        return buf

    def call(self, request, response_class, version: int):
        self.correlation += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self.correlation, client_id="raw")
        self.sock.sendall(request.encode(header=True, framed=True))
        self.sent += 1
        frame = self.recv_frame()
        response = response_class.decode(frame, version=version, header=True)
        assert response.header.correlation_id == self.correlation
        return response

    def closed_by_peer(self, timeout: float = 10.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self):
        self.sock.close()


def produce(raw: Raw, topic: str, partition: int, records: bytes, version: int = 9):
    Topic = ProduceRequest.TopicProduceData
    request = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        Topic(name=topic, partition_data=[Topic.PartitionProduceData(index=partition, records=records)])])
    response = raw.call(request, ProduceResponse, version)
    return response.responses[0].partition_responses[0]


def fetch(raw: Raw, topic: str, partition: int, offset: int, version: int = 12, max_wait_ms=0,
          min_bytes=1, max_bytes=50 << 20, partition_max_bytes=10 << 20):
    Topic = FetchRequest.FetchTopic
    request = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                           max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
                           topics=[Topic(topic=topic, partitions=[Topic.FetchPartition(
                               partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                               last_fetched_epoch=-1, log_start_offset=-1,
                               partition_max_bytes=partition_max_bytes)])],
                           forgotten_topics_data=[], rack_id="")
    response = raw.call(request, FetchResponse, version)
    return response.responses[0].partitions[0]


@pytest.fixture(scope="module")
def topic(shared_cluster):
    name = f"proto-{uuid.uuid4().hex[:8]}"
    shared_cluster.create_topic(name, 2)
    raw = Raw(shared_cluster.brokers[0].port)
    for i in range(5):
        batch = make_batch([b"seed-%d-%d" % (i, j) for j in range(4)], timestamp=SEED_TIMESTAMP)
        assert produce(raw, name, 0, batch).error_code == 0
    raw.close()
    return name


SEED_TIMESTAMP = int(time.time() * 1000)  # every seed batch: records at +0 .. +3 ms


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:  # closed meanwhile
        return ""


def expected_seed():
    return [(4 * i + j, b"seed-%d-%d" % (i, j)) for i in range(5) for j in range(4)]


def assert_intact(cluster, topic):
    """The broker still serves and partition 0 still holds exactly the seed."""
    broker = cluster.brokers[0]
    assert broker.alive
    raw = Raw(broker.port)
    part = fetch(raw, topic, 0, 0)
    raw.close()
    assert part.error_code == 0
    assert read_values(part.records)[:20] == expected_seed()


@pytest.mark.parametrize("payload", [
    b"\x00",                                   # shorter than a header
    b"\xff" * 64,                              # garbage
    (0).to_bytes(2, "big") + (99).to_bytes(2, "big") + b"\x00" * 20,   # Produce v99
    (99).to_bytes(2, "big") + (0).to_bytes(2, "big") + b"\x00" * 20,   # unknown API key
    (1).to_bytes(2, "big") + (12).to_bytes(2, "big") + b"\x00\x00\x00\x01" + b"\xff" * 40,  # bad body
])
def test_bad_frames_close_the_connection(shared_cluster, topic, payload):
    raw = Raw(shared_cluster.brokers[0].port)
    raw.send_frame(payload)
    assert raw.closed_by_peer()
    raw.close()
    assert_intact(shared_cluster, topic)


@pytest.mark.parametrize("size", [200 * 1024 * 1024, -5])
def test_oversized_or_negative_size_closes_without_reading(shared_cluster, topic, size):
    raw = Raw(shared_cluster.brokers[0].port)
    raw.sock.sendall(size.to_bytes(4, "big", signed=True) + b"\x00" * 100)
    assert raw.closed_by_peer()
    raw.close()
    assert_intact(shared_cluster, topic)


def test_api_versions_newer_than_ours_gets_a_v0_answer(shared_cluster):
    raw = Raw(shared_cluster.brokers[0].port)
    # header: api key 18, version 9, correlation 77, client id "x"
    raw.send_frame((18).to_bytes(2, "big") + (9).to_bytes(2, "big") + (77).to_bytes(4, "big")
                   + b"\x00\x01x" + b"\x00")
    response = ApiVersionsResponse.decode(raw.recv_frame(), version=0, header=True)
    assert response.header.correlation_id == 77
    assert response.error_code == 35
    keys = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert keys[1] == (0, 12) and keys[2] == (0, 8) and keys[18] == (0, 3)
    # and the connection goes on: a supported version now works
    ok = raw.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                  ApiVersionsResponse, 3)
    assert ok.error_code == 0
    raw.close()


def test_unknown_topic_everywhere(shared_cluster, topic):
    raw = Raw(shared_cluster.brokers[0].port)
    missing = "no-such-topic"
    meta = raw.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=missing)],
                                    allow_auto_topic_creation=True), MetadataResponse, 9)
    assert meta.topics[0].error_code == handlers.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(raw, missing, 0, make_batch([b"x"])).error_code == handlers.UNKNOWN_TOPIC_OR_PARTITION
    assert fetch(raw, missing, 0, 0).error_code == handlers.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(raw, topic, 7, make_batch([b"x"])).error_code == handlers.UNKNOWN_TOPIC_OR_PARTITION
    raw.close()
    assert_intact(shared_cluster, topic)


def test_corrupt_and_misplaced_old_format_batches_are_refused(shared_cluster, topic):
    raw = Raw(shared_cluster.brokers[0].port)
    bad = bytearray(make_batch([b"evil"]))
    bad[-1] ^= 0x55
    assert produce(raw, topic, 0, bytes(bad)).error_code == handlers.CORRUPT_MESSAGE
    # a batch whose magic byte says 1 reads as an old-format message whose CRC fails
    old = bytearray(make_batch([b"old"]))
    old[16] = 1
    assert produce(raw, topic, 0, bytes(old), version=2).error_code == handlers.CORRUPT_MESSAGE
    # old-format messages in Produce v3+: refused as Kafka 2.8 refuses them
    message = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    message.append(0, timestamp=SEED_TIMESTAMP, key=None, value=b"old")
    assert produce(raw, topic, 0, bytes(message.build()), version=3).error_code == handlers.INVALID_RECORD
    answer = produce(raw, topic, 0, bytes(message.build()), version=9)  # v8+ carry a message
    assert answer.error_code == handlers.INVALID_RECORD and "magic 2" in answer.error_message
    assert produce(raw, topic, 0, b"\x00" * 30).error_code == handlers.CORRUPT_MESSAGE
    raw.close()
    assert_intact(shared_cluster, topic)


def test_fetch_out_of_range_and_list_offsets(shared_cluster, topic):
    raw = Raw(shared_cluster.brokers[0].port)
    part = fetch(raw, topic, 0, 10_000)
    assert part.error_code == handlers.OFFSET_OUT_OF_RANGE and part.high_watermark >= 20
    at_end = fetch(raw, topic, 0, part.high_watermark)
    assert at_end.error_code == 0 and not at_end.records
    Topic = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[Topic(name=topic, partitions=[
        Topic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=t)
        for t in (-2, -1, -3, -4)])])
    response = raw.call(request, ListOffsetsResponse, 8)
    offsets = [p.offset for p in response.topics[0].partitions]
    assert offsets[0] == 0 and offsets[1] == part.high_watermark and offsets[3] == 0
    # every seed batch has records at SEED_TIMESTAMP + 0 .. 3: the first at +3
    assert (offsets[2], response.topics[0].partitions[2].timestamp) == (3, SEED_TIMESTAMP + 3)
    raw.close()


def test_init_producer_id(shared_cluster):
    raw = Raw(shared_cluster.brokers[0].port)
    first = raw.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000),
                     InitProducerIdResponse, 4)
    second = raw.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000),
                      InitProducerIdResponse, 4)
    assert first.error_code == second.error_code == 0
    assert first.producer_id >= 0 and first.producer_id != second.producer_id
    txn = raw.call(InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=1000),
                   InitProducerIdResponse, 4)
    assert txn.error_code == handlers.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    raw.close()


def test_long_poll_waits_for_data_and_times_out(shared_cluster, topic):
    raw = Raw(shared_cluster.brokers[0].port)
    end = fetch(raw, topic, 1, 0).high_watermark
    started = time.monotonic()
    empty = fetch(raw, topic, 1, end, max_wait_ms=400)
    assert not empty.records and 0.35 <= time.monotonic() - started < 5

    def later():
        time.sleep(0.3)  # the producer, not the test, is delayed
        other = Raw(shared_cluster.brokers[0].port)
        produce(other, topic, 1, make_batch([b"wake"]))
        other.close()

    thread = threading.Thread(target=later)
    started = time.monotonic()
    thread.start()
    part = fetch(raw, topic, 1, end, max_wait_ms=10_000)
    elapsed = time.monotonic() - started
    thread.join()
    assert read_values(part.records) == [(end, b"wake")]
    assert elapsed < 5
    raw.close()


@pytest.mark.parametrize("version", [4, 11, 12])
def test_large_fetch_is_byte_exact(shared_cluster, version):
    """Large ranges go out with sendfile; the bytes must equal the segment's."""
    name = f"big-{uuid.uuid4().hex[:8]}"
    shared_cluster.create_topic(name, 1)
    raw = Raw(shared_cluster.brokers[0].port)
    values = [bytes([i % 251]) * 1000 + b"%06d" % i for i in range(600)]
    for i in range(0, 600, 50):
        assert produce(raw, name, 0, make_batch(values[i:i + 50])).error_code == 0
    segment = shared_cluster.brokers[0].data_dir / f"{name}-0" / f"{0:020d}.log"
    fd_dir = f"/proc/{shared_cluster.brokers[0].proc.pid}/fd"

    def open_on_segment():
        return sum(1 for fd in os.listdir(fd_dir) if _readlink(f"{fd_dir}/{fd}") == str(segment))
    assert open_on_segment() == 1  # the log's own
    part = fetch(raw, name, 0, 0, version=version)
    for _ in range(3):
        fetch(raw, name, 0, 0, version=version)
    # sendfile uses descriptors of its own and closes them after sending (the
    # broker may be descheduled between its last send and the close)
    wait_until(lambda: open_on_segment() == 1, timeout=5, message="sendfile descriptors to close")
    assert bytes(part.records) == segment.read_bytes()
    assert [v for _, v in read_values(part.records)] == values
    # limits: partition_max_bytes cuts at whole batches but never below one
    small = fetch(raw, name, 0, 120, version=version, partition_max_bytes=10)
    got = read_values(small.records)
    assert got[0][0] == 100 and len(got) == 50
    raw.close()


def test_acks_zero_gets_no_response_and_the_connection_goes_on(shared_cluster, topic):
    raw = Raw(shared_cluster.brokers[0].port)
    Topic = ProduceRequest.TopicProduceData
    request = ProduceRequest(transactional_id=None, acks=0, timeout_ms=5000, topic_data=[
        Topic(name=topic, partition_data=[Topic.PartitionProduceData(index=1, records=make_batch([b"fire"]))])])
    request.API_VERSION = 9
    request.with_header(correlation_id=500, client_id="raw")
    raw.sock.sendall(request.encode(header=True, framed=True))
    raw.correlation = 500
    # the next answer on this connection is the fetch's, and it sees the record
    part = fetch(raw, topic, 1, 0)
    assert b"fire" in [v for _, v in read_values(part.records)]
    raw.close()


def test_mutated_requests_never_hurt_the_broker(shared_cluster, topic):
    """Valid frames with random bytes changed, each on its own connection."""
    import random
    rnd = random.Random(4)
    Topic = ProduceRequest.TopicProduceData
    produce_request = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
        Topic(name=topic, partition_data=[Topic.PartitionProduceData(index=1, records=make_batch([b"m"] * 3))])])
    fetch_request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                                 isolation_level=0, session_id=0, session_epoch=-1, topics=[
                                     FetchRequest.FetchTopic(topic=topic, partitions=[
                                         FetchRequest.FetchTopic.FetchPartition(
                                             partition=0, current_leader_epoch=-1, fetch_offset=0,
                                             last_fetched_epoch=-1, log_start_offset=-1,
                                             partition_max_bytes=1 << 20)])],
                                 forgotten_topics_data=[], rack_id="")
    frames = []
    for request, version in ((produce_request, 9), (produce_request, 3), (fetch_request, 12),
                             (fetch_request, 4), (MetadataRequest(topics=None), 12)):
        request.API_VERSION = version
        request.with_header(correlation_id=1, client_id="fuzz")
        frames.append(bytes(request.encode(header=True, framed=False)))
    for i in range(150):
        frame = bytearray(rnd.choice(frames))
        for _ in range(rnd.randint(1, 4)):
            frame[rnd.randrange(len(frame))] = rnd.randrange(256)
        if i % 5 == 0:
            frame = frame[: rnd.randrange(len(frame))]
        raw = Raw(shared_cluster.brokers[0].port)
        raw.sock.settimeout(5)
        raw.send_frame(bytes(frame))
        try:
            raw.recv_frame()  # an answer (maybe an error) or a closed connection
        except (ConnectionError, OSError):
            pass
        raw.close()
    assert_intact(shared_cluster, topic)


def _null_field_requests():
    """Requests whose arrays are null (a length of -1) where Kafka's schema allows none; the fuzz found each
    reaching a handler, which failed on it."""
    from kafka.protocol.consumer import LeaveGroupRequest

    fetch_null_topics = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, topics=None)
    fetch_null_partitions = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, topics=[
        FetchRequest.FetchTopic(topic="t", partitions=None)])
    leave_null_members = LeaveGroupRequest(group_id="g", members=None)
    return [(fetch_null_topics, 4), (fetch_null_partitions, 11), (leave_null_members, 3)]


@pytest.mark.parametrize("request_version", _null_field_requests(),
                         ids=["fetch-topics", "fetch-partitions", "leave-group-members"])
def test_a_null_where_the_schema_allows_none_is_a_protocol_error(request_version):
    from zkcoord.broker import protocol

    request, version = request_version
    request.API_VERSION = version
    request.with_header(correlation_id=1, client_id="null")
    with pytest.raises(protocol.ProtocolError, match="is null, which its type does not allow"):
        protocol.decode_request(bytes(request.encode(header=True)))


def test_a_nullable_field_may_still_be_null():
    from zkcoord.broker import protocol

    request = MetadataRequest(topics=None)  # null: every topic, from version 1
    request.API_VERSION = 1
    request.with_header(correlation_id=1, client_id="null")
    assert protocol.decode_request(bytes(request.encode(header=True))).topics is None


@pytest.mark.parametrize("request_version", _null_field_requests(),
                         ids=["fetch-topics", "fetch-partitions", "leave-group-members"])
def test_null_fields_close_the_connection_without_an_unexpected_error(shared_cluster, topic, request_version):
    request, version = request_version
    broker = shared_cluster.brokers[0]
    errors_before = broker.log_tail(1 << 20).count("unexpected error")
    raw = Raw(broker.port)
    request.API_VERSION = version
    request.with_header(correlation_id=1, client_id="null")
    raw.send_frame(bytes(request.encode(header=True)))
    assert raw.closed_by_peer()
    raw.close()
    assert_intact(shared_cluster, topic)
    assert broker.log_tail(1 << 20).count("unexpected error") == errors_before
