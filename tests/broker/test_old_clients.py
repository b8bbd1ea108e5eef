"""Clients older than Kafka 0.11 against a real broker process: they produce
and fetch the old message formats (magic 0 and 1) and list offsets with
ListOffsets v0. kcat (librdkafka told the broker is 0.8.2 or 0.9.0, with no
ApiVersions request: Produce and Fetch v0 or v1, magic 0, ListOffsets v0) and
kafka-python (``api_version=(0, 8, 2)``, ``(0, 9)``, ``(0, 10)``: up to
Produce and Fetch v2, magic 1) speak those versions for real; raw requests
pin down the details.
What old clients write, new clients read back exactly, and the other way."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, ListOffsetsResponse
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kafka.structs import TopicPartition as KpTopicPartition

from tests.broker.batches import make_batch, read_values
from tests.broker.test_clients import CODECS, confluent_produce, confluent_read, stored_codecs, unique_topic
from tests.broker.test_protocol import Raw, fetch, produce
from zkcoord.broker import handlers

# Recent, or the broker's time-based retention would delete the records under the test.
NOW_MS = int(time.time() * 1000)

# librdkafka's fallback versions that keep it from asking ApiVersions (from
# 0.10.0 on it asks, and then speaks current versions)
KCAT_ERAS = ("0.8.2", "0.9.0")


def legacy_set(values, magic: int, codec: int = 0, timestamp: int = 0) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 30)
    for i, value in enumerate(values):
        builder.append(i, timestamp=timestamp + i, key=b"k%d" % i, value=value)
    return bytes(builder.build())


def legacy_messages(data: bytes) -> list[tuple[int, int, object, bytes]]:
    """(magic, offset, timestamp, value) of every old-format message in a fetched message set."""
    records = MemoryRecords(data)
    out = []
    while records.has_next():
        batch = records.next_batch()
        assert batch.magic in (0, 1) and batch.validate_crc()
        out.extend((batch.magic, r.offset, r.timestamp, r.value) for r in batch)
    return out


def list_offsets_v0(raw: Raw, topic: str, partition: int, timestamp: int, max_offsets: int):
    Topic = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest(replica_id=-1, topics=[Topic(name=topic, partitions=[
        Topic.ListOffsetsPartition(partition_index=partition, timestamp=timestamp, max_num_offsets=max_offsets)])])
    answer = raw.call(request, ListOffsetsResponse, 0).topics[0].partitions[0]
    return answer.error_code, list(answer.old_style_offsets)


def kcat(bootstrap: str, era: str, *args: str, data: bytes = None) -> bytes:
    return subprocess.run(["kcat", "-b", bootstrap, "-X", "api.version.request=false",
                           "-X", f"broker.version.fallback={era}", *args],
                          input=data, check=True, timeout=60, capture_output=True).stdout


# -- raw requests ----------------------------------------------------------------------


@pytest.mark.parametrize("version, magic, codec", [(0, 0, 0), (1, 0, 1), (2, 1, 0), (2, 1, 2), (2, 0, 3)])
def test_old_format_produce_is_stored_up_converted(shared_cluster, version, magic, codec):
    topic = unique_topic("up")
    shared_cluster.create_topic(topic, 1)
    raw = Raw(shared_cluster.brokers[0].port)
    assert produce(raw, topic, 0, make_batch([b"first"]), version=9).base_offset == 0
    values = [b"old-%d-" % i + os.urandom(4).hex().encode() * 30 for i in range(20)]
    answer = produce(raw, topic, 0, legacy_set(values, magic, codec, timestamp=NOW_MS), version)
    assert (answer.error_code, answer.base_offset) == (0, 1)
    assert produce(raw, topic, 0, make_batch([b"last"]), version=9).base_offset == 21
    # stored as one v2 batch, with the producer's codec, read back by a v12 fetch and by librdkafka
    part = fetch(raw, topic, 0, 0)
    assert read_values(part.records) == [(0, b"first")] + [(1 + i, v) for i, v in enumerate(values)] + [(21, b"last")]
    assert CODECS["none"] in stored_codecs(shared_cluster, topic, 0)
    if codec:
        assert codec in stored_codecs(shared_cluster, topic, 0)
    raw.close()
    got = confluent_read(shared_cluster.brokers[0].bootstrap, topic, 0, 1, 20)
    assert [v for _, _, v in got] == values


def test_old_format_timestamps_are_kept_or_none_as_kafka_stores_them(shared_cluster):
    topic = unique_topic("ts")
    shared_cluster.create_topic(topic, 1)
    raw = Raw(shared_cluster.brokers[0].port)
    produce(raw, topic, 0, legacy_set([b"a", b"b"], magic=1, timestamp=NOW_MS), version=2)
    produce(raw, topic, 0, legacy_set([b"c"], magic=0), version=0)
    raw.close()
    consumer = KafkaConsumer(bootstrap_servers=shared_cluster.brokers[0].bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=10_000)
    tp = KpTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got = [(m.offset, m.timestamp, m.value) for _, m in zip(range(3), consumer)]
    consumer.close()
    assert got == [(0, NOW_MS, b"a"), (1, NOW_MS + 1, b"b"), (2, -1, b"c")]


@pytest.mark.parametrize("data, code", [
    (legacy_set([b"x"], 1)[:-3], handlers.CORRUPT_MESSAGE),                          # truncated
    (legacy_set([b"x"], 1)[:20] + b"\xff" + legacy_set([b"x"], 1)[21:], handlers.CORRUPT_MESSAGE),  # CRC
    (legacy_set([b"x"], 1) + make_batch([b"v2"]), handlers.INVALID_RECORD),          # formats mixed
])
def test_old_format_that_cannot_be_converted_is_refused_and_nothing_is_written(shared_cluster, data, code):
    topic = unique_topic("bad")
    shared_cluster.create_topic(topic, 1)
    raw = Raw(shared_cluster.brokers[0].port)
    assert produce(raw, topic, 0, data, version=2).error_code == code
    assert produce(raw, topic, 0, make_batch([b"ok"]), version=9).base_offset == 0
    raw.close()


def test_a_codec_the_old_formats_do_not_define_is_refused(shared_cluster):
    topic = unique_topic("codec")
    shared_cluster.create_topic(topic, 1)
    message = bytearray(legacy_set([b"x"], 1))
    message[17] = 4  # attributes: codec 4 (zstd exists only for record batches)
    raw = Raw(shared_cluster.brokers[0].port)
    assert produce(raw, topic, 0, bytes(fix_crc(message)), version=2).error_code == handlers.UNSUPPORTED_COMPRESSION_TYPE
    assert fetch(raw, topic, 0, 0).high_watermark == 0
    raw.close()


def fix_crc(message: bytearray) -> bytearray:
    from kafka.record.util import calc_crc32
    message[12:16] = calc_crc32(bytes(message[16:])).to_bytes(4, "big")
    return message


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_old_fetches_get_the_old_format_from_any_stored_codec(shared_cluster, version):
    topic = unique_topic("down")
    shared_cluster.create_topic(topic, 1)
    raw = Raw(shared_cluster.brokers[0].port)
    values = [b"value-%03d" % i for i in range(40)]
    for i, codec in enumerate((0, 1, 2, 3, 4)):  # none, gzip, snappy, lz4, zstd
        batch = make_batch(values[8 * i:8 * i + 8], timestamp=NOW_MS + 8 * i, compression=codec)
        assert produce(raw, topic, 0, batch, version=9).error_code == 0
    magic = 0 if version < 2 else 1
    part = fetch(raw, topic, 0, 5, version=version)
    got = legacy_messages(part.records)
    assert [(m, o, v) for m, o, _, v in got] == [(magic, 5 + i, v) for i, v in enumerate(values[5:])]
    expected_ts = [None] * 35 if magic == 0 else [NOW_MS + 5 + i for i in range(35)]
    assert [t for _, _, t, _ in got] == expected_ts
    assert part.high_watermark == 40
    # the byte limit cuts between messages, but never below one message
    small = legacy_messages(fetch(raw, topic, 0, 12, version=version, partition_max_bytes=60).records)
    assert [o for _, o, _, _ in small] == [12]
    raw.close()


def test_list_offsets_v0_answers_with_segment_boundaries(cluster):
    broker = cluster.start_broker(0, "--segment-bytes", "1024")
    cluster.create_topic("seg", 1)
    raw = Raw(broker.port)
    for i in range(3):  # each batch fills most of a segment: segments start at 0, 4 and 8
        assert produce(raw, "seg", 0, make_batch([os.urandom(150) for _ in range(4)]), version=9).error_code == 0
    segments = sorted((broker.data_dir / "seg-0").glob("*.log"))
    assert [int(p.stem) for p in segments] == [0, 4, 8]
    # Kafka dates a segment by when its file was last written
    now = time.time()
    for age, path in zip((3000, 2000, 1000), segments):
        os.utime(path, (now - age, now - age))
    ms = int(now * 1000)
    assert list_offsets_v0(raw, "seg", 0, -1, 10) == (0, [12, 8, 4, 0])   # latest, then segment bases
    assert list_offsets_v0(raw, "seg", 0, -1, 1) == (0, [12])
    assert list_offsets_v0(raw, "seg", 0, -2, 10) == (0, [0])             # earliest
    assert list_offsets_v0(raw, "seg", 0, ms - 1_500_000, 10) == (0, [4, 0])
    assert list_offsets_v0(raw, "seg", 0, ms - 1_500_000, 1) == (0, [4])
    assert list_offsets_v0(raw, "seg", 0, ms - 5_000_000, 10) == (0, [])  # before any segment
    assert list_offsets_v0(raw, "seg", 0, ms + 60_000, 10) == (0, [12, 8, 4, 0])
    assert list_offsets_v0(raw, "seg", 3, -1, 1) == (handlers.UNKNOWN_TOPIC_OR_PARTITION, [])
    assert list_offsets_v0(raw, "nope", 0, -1, 1) == (handlers.UNKNOWN_TOPIC_OR_PARTITION, [])
    raw.close()


@pytest.mark.parametrize("api", ["ListOffsets", "Fetch", "Produce"])
def test_truncated_old_version_frames_close_the_connection_and_hurt_nothing(shared_cluster, api):
    topic = unique_topic("trunc")
    shared_cluster.create_topic(topic, 1)
    raw = Raw(shared_cluster.brokers[0].port)
    produce(raw, topic, 0, make_batch([b"kept"]), version=9)
    if api == "ListOffsets":
        Topic = ListOffsetsRequest.ListOffsetsTopic
        request = ListOffsetsRequest(replica_id=-1, topics=[Topic(name=topic, partitions=[
            Topic.ListOffsetsPartition(partition_index=0, timestamp=-1, max_num_offsets=3)])])
    elif api == "Fetch":
        Topic = FetchRequest.FetchTopic
        request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, topics=[Topic(topic=topic, partitions=[
            Topic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    else:
        from kafka.protocol.producer import ProduceRequest
        Topic = ProduceRequest.TopicProduceData
        request = ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[Topic(name=topic, partition_data=[
            Topic.PartitionProduceData(index=0, records=legacy_set([b"lost"], 0))])])
    request.API_VERSION = 0
    request.with_header(correlation_id=9, client_id="cut")
    frame = bytes(request.encode(header=True))
    raw.send_frame(frame[:-3])
    assert raw.closed_by_peer()
    raw.close()
    again = Raw(shared_cluster.brokers[0].port)
    assert read_values(fetch(again, topic, 0, 0).records) == [(0, b"kept")]
    again.close()


# -- real clients ----------------------------------------------------------------------


@pytest.mark.parametrize("era", KCAT_ERAS)
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_kcat_of_an_old_era_produces_and_consumes(shared_cluster, era, codec):
    topic = unique_topic("kcat-old")
    shared_cluster.create_topic(topic, 1)
    bootstrap = shared_cluster.brokers[0].bootstrap
    lines = [b"line-%d-%s" % (i, os.urandom(6).hex().encode()) for i in range(300)]
    kcat(bootstrap, era, "-P", "-t", topic, "-p", "0", "-z", codec, data=b"\n".join(lines) + b"\n")
    # -o beginning asks ListOffsets v0 (earliest); the messages come in the era's format
    out = kcat(bootstrap, era, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-c", str(len(lines)),
               "-e", "-f", "%o %s\n")
    assert out.splitlines() == [b"%d %s" % (i, line) for i, line in enumerate(lines)]
    # the end, from ListOffsets v0 (latest): two messages before it
    tail = kcat(bootstrap, era, "-C", "-t", topic, "-p", "0", "-o", "-2", "-e", "-f", "%s\n")
    assert tail.splitlines() == lines[-2:]
    # and a current client reads what the old one wrote
    assert [v for _, _, v in confluent_read(bootstrap, topic, 0, 0, len(lines))] == lines
    if codec != "none":
        assert CODECS[codec] in stored_codecs(shared_cluster, topic, 0)


@pytest.mark.parametrize("era", KCAT_ERAS)
def test_kcat_of_an_old_era_reads_what_a_current_client_wrote(shared_cluster, era):
    topic = unique_topic("kcat-new")
    shared_cluster.create_topic(topic, 1)
    bootstrap = shared_cluster.brokers[0].bootstrap
    values = [b"v%04d" % i for i in range(200)]
    confluent_produce(bootstrap, topic, 0, values, **{"compression.type": "zstd"})
    out = kcat(bootstrap, era, "-C", "-t", topic, "-p", "0", "-o", "150", "-e", "-f", "%o %k %s\n")
    assert out.splitlines() == [b"%d k%d %s" % (i, i, values[i]) for i in range(150, 200)]


@pytest.mark.parametrize("api_version", [(0, 8, 2), (0, 9), (0, 10)])
def test_kafka_python_of_an_old_era_produces_and_consumes(shared_cluster, api_version):
    topic = unique_topic("kp-old")
    shared_cluster.create_topic(topic, 1)
    bootstrap = shared_cluster.brokers[0].bootstrap
    values = [b"kp-%d-" % i + os.urandom(8) for i in range(150)]
    producer = KafkaProducer(bootstrap_servers=bootstrap, api_version=api_version, compression_type="gzip")
    futures = [producer.send(topic, value=v, key=b"k", partition=0) for v in values]
    producer.flush(20)
    assert [f.get(timeout=10).offset for f in futures] == list(range(len(values)))
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, api_version=api_version, enable_auto_commit=False,
                             consumer_timeout_ms=10_000)
    tp = KpTopicPartition(topic, 0)
    consumer.assign([tp])
    assert consumer.beginning_offsets([tp]) == {tp: 0}   # ListOffsets v0 for these eras
    assert consumer.end_offsets([tp]) == {tp: len(values)}
    consumer.seek_to_beginning(tp)
    got = [(m.offset, m.value) for _, m in zip(range(len(values)), consumer)]
    consumer.close()
    assert got == list(enumerate(values))
    assert [v for _, _, v in confluent_read(bootstrap, topic, 0, 0, len(values))] == values
