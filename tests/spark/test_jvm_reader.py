"""The JVM reader (zkcoord/spark/jvm) against the Python one: its record
decoder record for record with zkcoord.fetch.records over every codec,
control batches, compacted gaps, LogAppendTime, cut ranges, partial batches,
damaged bytes and read_committed's aborted transactions; and whole reads of real topics on both paths of
format("zkcoord")."""

from __future__ import annotations

import base64
import json
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.test_record_decoder import CODECS, Batch, Rec, batch_runs, build, damaged, simple
from tests.unit.test_read_committed import data, log, marker, transactional_logs
from zkcoord.fetch.records import ABORT_MARKER, COMMIT_MARKER, CorruptRecordsError, decode_batches
from zkcoord.spark import PYTHON_SOURCE_NAME
from zkcoord.spark.jvm import built_jar


def test_the_jvm_reader_is_built():
    # CI installs a JDK: the JVM path must be the one under test.
    assert built_jar() is not None, "zkcoord/spark/jvm's jar is not built (python -m zkcoord.spark.jvm)"


def jvm_decode(spark, data: bytes, start: int = 0, end: int = -1, check_crcs: bool = True,
               aborted=None) -> dict:
    return json.loads(spark._jvm.zkcoord.spark.Decoding.describe(
        bytearray(data), start, end, check_crcs, None if aborted is None else json.dumps(aborted)))


def python_decode(data: bytes, start: int = 0, end: int = -1, check_crcs: bool = True, aborted=None) -> dict:
    """The Python decoder's answer in Decoding.describe's form."""
    try:
        columns = decode_batches(data, start=start, end=None if end < 0 else end, check_crcs=check_crcs,
                                 aborted_transactions=aborted, compiled=False)
    except CorruptRecordsError as exc:
        return {"error": str(exc)}
    types = struct.unpack(f"<{columns.rows}i", columns.timestamp_types)

    def b64(blob):
        return None if blob is None else base64.b64encode(blob).decode()
    return {"rows": [[r.offset, r.timestamp, t, b64(r.key), b64(r.value)]
                     for r, t in zip(columns.records("t", 0), types)],
            "next": columns.next_offset, "consumed": columns.consumed}


def same_on_both(spark, data: bytes, **kwargs) -> dict:
    jvm, python = jvm_decode(spark, data, **kwargs), python_decode(data, **kwargs)
    if "error" in jvm and "error" in python and "cannot decompress" in python["error"]:
        # Each codec library words its own complaint: the codec named is what must agree.
        jvm["error"], python["error"] = (e["error"].split(" records:")[0] for e in (jvm, python))
    assert jvm == python
    return jvm


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_every_codec_decodes_as_the_python_decoder_does(spark, codec):
    batches = [
        Batch(0, CODECS[codec], [Rec(0, 0, None, b"first", []), Rec(1, 5, b"", None, []),
                                 Rec(2, 9, b"key", b"x" * 300, [("h1", b"a"), ("h2", None), ("", b"")])]),
        simple(50, CODECS[codec], base=3),
    ]
    data = b"".join(build(b) for b in batches)
    answer = same_on_both(spark, data)
    assert len(answer["rows"]) == 53 and answer["next"] == 53 and answer["consumed"] == len(data)


def test_markers_gaps_log_append_time_ranges_and_partial_batches(spark):
    data = b"".join([
        build(simple(3)),
        build(Batch(3, 0, [Rec(0, 0, None, None, [])], control=True, transactional=True)),
        build(Batch(4, 1, [Rec(0, 0, b"a", b"b", []), Rec(5, 1, b"c", b"d", [])])),  # 5..8 compacted away
        build(simple(4, codec=3, base=10, log_append_time=1_800_000_000_000)),
    ])
    for start, end in ((0, -1), (2, 11), (4, 9), (9, 10), (3, 4), (14, -1), (0, 0)):
        same_on_both(spark, data, start=start, end=end)
    for cut in (1, 20, 61, len(build(simple(4, codec=3, base=10))) - 1):
        answer = same_on_both(spark, data[:-cut])
        assert answer["next"] == 10, "a partial last batch is left for the next fetch"


@pytest.mark.parametrize("damage", ["crc", "magic", "codec", "zstd", "count+", "count-", "offset", "timestamp"])
def test_damaged_bytes_give_the_same_error(spark, damage):
    data = bytearray(build(simple(3)))
    check = damage == "crc"
    if damage == "crc":
        data[-2] ^= 0xFF
    elif damage == "magic":
        data[16] = 1
    elif damage in ("codec", "zstd"):
        data[22] = (data[22] & ~0x07) | (5 if damage == "codec" else 4)
    elif damage.startswith("count"):
        struct.pack_into(">i", data, 57, 4 if damage == "count+" else 2)
    elif damage == "offset":
        struct.pack_into(">q", data, 0, 2**63 - 2)
    else:
        struct.pack_into(">q", data, 27, 2**63 - 1)
    answer = same_on_both(spark, bytes(data), check_crcs=check)
    assert "error" in answer


def zigzag(value: int) -> bytes:
    """A Kafka varint of any size (the bytes a lying producer could write)."""
    v = (value << 1) ^ (value >> 200) if value < 0 else value << 1
    out = bytearray()
    while True:
        byte, v = v & 0x7F, v >> 7
        out.append(byte | (0x80 if v else 0))
        if not v:
            return bytes(out)


def raw_batch(base: int, attributes: int, count: int, body: bytes, first_timestamp: int = 0,
              last_delta: int = 0) -> bytes:
    from crc32c import crc32c

    after_crc = struct.pack(">hiqqqhii", attributes, last_delta, first_timestamp, first_timestamp, -1, -1, -1,
                            count) + body
    head = struct.pack(">qiib", base, len(after_crc) + 9, 0, 2)
    return head + struct.pack(">I", crc32c(after_crc)) + after_crc


def one_record(timestamp_delta: bytes) -> bytes:
    inner = b"\0" + timestamp_delta + zigzag(0) + zigzag(-1) + zigzag(1) + b"v" + zigzag(0)
    return zigzag(len(inner)) + inner


def test_what_only_a_lying_producer_writes_is_read_alike(spark):
    # Bytes Kafka never writes, where the two decoders could part ways.
    cases = [
        raw_batch(0, 1, 0, b""),  # gzip with an empty body: no records
        raw_batch(0, 4, 0, b""),  # zstd likewise
        raw_batch(0, 2, 0, b""),  # snappy: an error on both
        raw_batch(-2**63, 0, 0, b"", last_delta=-1),  # a last offset below any
        raw_batch(5, 0, 1, one_record(zigzag(2**63)), first_timestamp=-1),  # a 70-bit delta that fits the sum
        raw_batch(5, 0, 1, one_record(zigzag(2**63)), first_timestamp=1),  # ... and one that does not
        raw_batch(5, 0, 1, one_record(zigzag(-(2**63) - 5)), first_timestamp=10),
    ]
    for data in cases:
        same_on_both(spark, data)
        same_on_both(spark, data + build(simple(2, base=7)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(batch_runs(), st.integers(0, 1200), st.one_of(st.just(-1), st.integers(0, 1400)), st.integers(0, 200))
def test_any_run_of_batches_decodes_identically(spark, run, start, end, cut):
    batches, _ = run
    data = b"".join(build(b) for b in batches)
    data = data[:max(0, len(data) - cut)] if cut < 50 else data
    same_on_both(spark, data, start=start, end=end)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(batch_runs(), st.data())
def test_any_damage_gives_the_same_answer_or_error(spark, run, data_strategy):
    same_on_both(spark, damaged(run, data_strategy), check_crcs=False)


def test_read_committed_leaves_out_aborted_transactions_alike(spark):
    records = log(data(0, 1, 2), data(2, 2, 2), data(4, 1), marker(5, 2, COMMIT_MARKER), marker(6, 1, ABORT_MARKER),
                  data(7, 9, 2, transactional=False), data(9, 1), marker(10, 1, COMMIT_MARKER))
    answer = same_on_both(spark, records, aborted=[[1, 0]])
    assert [row[0] for row in answer["rows"]] == [2, 3, 7, 8, 9] and answer["next"] == 11
    assert len(same_on_both(spark, records)["rows"]) == 8
    gzipped = log(data(0, 1), marker(1, 1, ABORT_MARKER, CODECS["gzip"]), data(2, 1), marker(3, 1, COMMIT_MARKER))
    assert [row[0] for row in same_on_both(spark, gzipped, aborted=[[1, 0]])["rows"]] == [2]
    malformed = log(data(0, 1), Batch(1, 0, [Rec(0, 0, b"\0", b"", [])], control=True, transactional=True,
                                      producer_id=1))
    assert "transaction marker is malformed" in same_on_both(spark, malformed, aborted=[[1, 0]])["error"]
    emptied = log(data(0, 1), marker(1, 1, ABORT_MARKER), Batch(2, 0, [], control=True, transactional=True,
                                                                 producer_id=1), data(3, 1))
    assert [row[0] for row in same_on_both(spark, emptied, aborted=[[1, 0]])["rows"]] == [3], \
        "an empty control batch (the cleaner's) is no marker"
    other = log(data(0, 1), marker(1, 1, -2), data(2, 1), marker(3, 1, ABORT_MARKER), data(4, 1, transactional=False))
    assert [row[0] for row in same_on_both(spark, other, aborted=[[1, 0]])["rows"]] == [4], \
        "a control record of type 0xFFFE is no abort marker, and no error"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(transactional_logs(), st.integers(0, 60), st.one_of(st.just(-1), st.integers(0, 60)))
def test_any_transactional_log_reads_committed_alike(spark, case, start, end):
    records, aborted, committed, _ = case
    answer = same_on_both(spark, records, start=start, end=end, aborted=[list(a) for a in aborted])
    assert [row[0] for row in answer["rows"]] == [o for o in committed if o >= start and (end < 0 or o < end)]


# -- whole reads on both paths ----------------------------------------------------------------

def test_both_paths_have_the_same_columns(spark, shared_cluster):
    def schema(source):
        return (spark.read.format(source).option("zookeeper", shared_cluster.zookeeper)
                .option("subscribe", "any").load().schema)
    assert schema("zkcoord") == schema(PYTHON_SOURCE_NAME)


def read_rows(spark, source: str, zookeeper: str, topic: str, **options):
    reader = spark.read.format(source).option("zookeeper", zookeeper).option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted((tuple(r) for r in reader.load().collect()), key=lambda r: (r[3], r[4]))


def test_both_paths_read_every_codec_and_null_alike(spark, shared_cluster):
    from kafka import KafkaProducer

    topic = f"jvm-{uuid.uuid4().hex[:8]}"
    shared_cluster.create_topic(topic, 4)
    for partition, codec in enumerate(("gzip", "snappy", "lz4", "zstd")):
        producer = KafkaProducer(bootstrap_servers=shared_cluster.broker_list, compression_type=codec,
                                 linger_ms=5, batch_size=4096)
        for i in range(700):
            producer.send(topic, key=None if i % 11 == 0 else b"k%d" % i,
                          value=None if i % 13 == 0 and i % 11 else b"v" * (i % 200), partition=partition)
        producer.flush()
        producer.close()
    jvm = read_rows(spark, "zkcoord", shared_cluster.zookeeper, topic)
    python = read_rows(spark, PYTHON_SOURCE_NAME, shared_cluster.zookeeper, topic)
    assert len(jvm) == 2800 and jvm == python
    ranged = {"startingOffsets": json.dumps({topic: {"0": 100, "1": 0, "2": 699, "3": 3}}),
              "endingOffsets": json.dumps({topic: {"0": 650, "1": 1, "2": 700, "3": -1}}), "minPartitions": "7"}
    jvm = read_rows(spark, "zkcoord", shared_cluster.zookeeper, topic, **ranged)
    assert len(jvm) == 550 + 1 + 1 + 697
    assert jvm == read_rows(spark, PYTHON_SOURCE_NAME, shared_cluster.zookeeper, topic, **ranged)


def test_planning_errors_reach_the_query_with_their_name(spark, shared_cluster):
    reader = spark.read.format("zkcoord").option("zookeeper", shared_cluster.zookeeper)
    with pytest.raises(Exception, match="SourceOptionError: give exactly one of the options"):
        reader.load().collect()


def test_which_path_register_takes(spark):
    from zkcoord.spark import bridge, register
    from zkcoord.spark.errors import SparkSourceError

    class ConnectSession:  # what pyspark's Spark Connect session does when asked for its JVM
        @property
        def _jvm(self):
            raise RuntimeError("[JVM_ATTRIBUTE_NOT_SUPPORTED] Attribute `_jvm` is not supported in Spark Connect")

    assert not bridge.jvm_source_loaded(ConnectSession())
    assert register(spark) is True  # again: the JVM path, the planner kept
    with pytest.raises(SparkSourceError, match="zkcoord-python"):
        register(spark, jvm=False)  # "zkcoord" is the JVM source's name in this session
