"""Messages of the coordinator protocol against known-good bytes, round trips,
strict parsing of bad bodies, error codes, and docs/PROTOCOL.md's examples."""

import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from zkcoord import wire
from zkcoord.errors import ZkcoordError
from zkcoord.wire.codec import layout_of
from zkcoord.wire import (
    ClusterMetadataRequest, ClusterMetadataResponse, Endpoint, ErrorCode,
    ErrorResponse, LeaveGroupRequest, LeaveGroupResponse, PingRequest, PingResponse, RegisterConsumerRequest,
    RegisterConsumerResponse, ResetOffsetsRequest, ResetOffsetsResponse, RestartFetcherResponse, StartRequest,
    StopRequest, StopResponse, TopicPartition, TopicPartitionOffset as TPO,
    decode, encode,
)

# One table of known-good frames, written out by hand from docs/PROTOCOL.md:
# (message, version, hex with spaces between fields). Correlation id is 7.
TOPIC_COUNT = '{"pattern":"static","subscription":{"t":1}}'
SAMPLES = [
    (ClusterMetadataRequest(), 0, "00000008 03e8 0000 00000007"),
    (ClusterMetadataRequest(), 1, "00000008 03e8 0001 00000007"),
    (ClusterMetadataRequest(group_id="g1", known_epoch=5, max_wait_ms=3000), 2,
     "00000014 03e8 0002 00000007 0002 6731 00000005 00000bb8"),
    (ClusterMetadataResponse(coordinator_id=2,
                             servers=(Endpoint(2, "zk1", 9000),)), 0,
     "0000001b 03e9 0000 00000007 0000 0002 0001"
     " 00000002 0003 7a6b31 00002328"),
    (ClusterMetadataResponse(coordinator_id=2, coordinator_epoch=5,
                             servers=(Endpoint(2, "zk1", 9000),),
                             brokers=(Endpoint(1, "b1", 9092),)), 1,
     "00000033 03e9 0001 00000007 0000 00000002 00000005"
     " 00000001 00000002 0003 7a6b31 00002328"
     " 00000001 00000001 0002 6231 00002384"),
    (ClusterMetadataResponse(coordinator_id=2, coordinator_epoch=5,
                             servers=(Endpoint(2, "zk1", 9000),),
                             brokers=(Endpoint(1, "b1", 9092),), slot=14, slots=16), 2,
     "0000003b 03e9 0002 00000007 0000 00000002 00000005"
     " 00000001 00000002 0003 7a6b31 00002328"
     " 00000001 00000001 0002 6231 00002384 0000000e 00000010"),
    (RegisterConsumerRequest(group_id="g1", consumer_id="c1", topics=("t",),
                             auto_commit=True, auto_offset_reset="smallest",
                             session_timeout_ms=10000), 0,
     "0000004c 03ea 0000 00000007 0002 6731 0002 6331"
     f" {len(TOPIC_COUNT):04x} {TOPIC_COUNT.encode().hex()}"
     " 01 0008 736d616c6c657374 00002710"),
    (RegisterConsumerRequest(group_id="g1", consumer_id="c1",
                             topics=("a", "b"), auto_commit=False,
                             auto_offset_reset="largest",
                             session_timeout_ms=30000,
                             max_poll_interval_ms=300000, is_static=True,
                             assignment_strategies=("range", "sticky")), 1,
     "00000042 03ea 0001 00000007 0002 6731 0002 6331"
     " 00000002 0001 61 0001 62 0000 00 0007 6c617267657374 00007530"
     " 000493e0 01 00000002 0005 72616e6765 0006 737469636b79"),
    (RegisterConsumerRequest(group_id="g1", consumer_id="c1", topics=("a",),
                             auto_offset_reset="smallest", session_timeout_ms=10000,
                             offsets=(TPO("a", 3, 42),)), 2,
     "0000004b 03ea 0002 00000007 0002 6731 0002 6331"
     " 00000001 0001 61 0000 01 0008 736d616c6c657374 00002710"
     " 000493e0 00 00000001 0005 72616e6765"
     " 00000001 0001 61 00000003 000000000000002a"),
    (RegisterConsumerResponse(error_code=ErrorCode.CONSUMER_ID_IN_USE), 0,
     "0000000a 03eb 0000 00000007 0005"),
    (RegisterConsumerResponse(error_code=ErrorCode.SESSION_TIMEOUT_TOO_LOW,
                              error_message="low", coordinator_epoch=5), 1,
     "00000013 03eb 0001 00000007 0006 0003 6c6f77 00000005"),
    (PingRequest(num_retries=2), 0, "0000000a 03ec 0000 00000007 0002"),
    (PingRequest(num_retries=1, coordinator_epoch=3, generation=7), 1,
     "00000012 03ec 0001 00000007 0001 00000003 00000007"),
    (PingResponse(), 0, "00000008 03ed 0000 00000007"),
    (PingResponse(offsets=(TPO("t", 12, 100),)), 0,
     "00000019 03ed 0000 00000007 0001 0001 74 0002 3132 0000000000000064"),
    (PingResponse(offsets=(TPO("t", 12, 100),), last_poll_ms_ago=1000), 1,
     "00000022 03ed 0001 00000007 0000 01 00000001 0001 74 0000000c"
     " 0000000000000064 000003e8"),
    (PingResponse(), 1, "0000000f 03ed 0001 00000007 0000 00 ffffffff"),
    (StopRequest(), 0, "00000008 03ee 0000 00000007"),
    (StopRequest(coordinator_epoch=3, generation=7, revoke_all=False,
                 partitions=(TopicPartition("t", 2),)), 1,
     "0000001c 03ee 0001 00000007 00000003 00000007 00"
     " 00000001 0001 74 00000002"),
    (StopResponse(coordinator_epoch=3, generation=7,
                  offsets=(TPO("t", 2, 255),)), 1,
     "00000025 03ef 0001 00000007 0000 00000003 00000007"
     " 00000001 0001 74 00000002 00000000000000ff"),
    (StartRequest(partitions=(TPO("t", 0, 42),)), 0,
     "00000018 03f0 0000 00000007 0001 0001 74 0001 30 000000000000002a"),
    (StartRequest(coordinator_epoch=3, generation=7, strategy="range",
                  partitions=(TPO("t", 0, -1), TPO("t", 1, 42))), 1,
     "00000039 03f0 0001 00000007 00000003 00000007 0005 72616e6765"
     " 00000002 0001 74 00000000 ffffffffffffffff"
     " 0001 74 00000001 000000000000002a"),
    (RestartFetcherResponse(error_code=ErrorCode.ILLEGAL_STATE), 0,
     "0000000a 03f1 0000 00000007 000c"),
    (RestartFetcherResponse(coordinator_epoch=3, generation=7), 1,
     "00000012 03f1 0001 00000007 0000 00000003 00000007"),
    (ErrorResponse(error_code=ErrorCode.MALFORMED_FRAME, message="bad"), 1,
     "0000000f 03f2 0001 00000007 0001 0003 626164"),
    (LeaveGroupRequest(offsets=(TPO("t", 1, 42),)), 1,
     "0000001b 03f3 0001 00000007 00000001 0001 74 00000001 000000000000002a"),
    (LeaveGroupResponse(), 1,
     "0000000a 03f4 0001 00000007 0000"),
    (ResetOffsetsRequest(group_id="g", execute=True, offsets=(TPO("t", 1, 5),)), 1,
     "00000020 03f5 0001 00000007 0001 67 01 00 00000001 0001 74 00000001 0000000000000005"),
    (ResetOffsetsResponse(error_code=ErrorCode.GROUP_NOT_EMPTY, error_message="busy", members=("c1",),
                          previous=(TPO("t", 1, 42),)), 1,
     "0000002b 03f6 0001 00000007 0010 0004 62757379 00000001 0002 6331"
     " 00000001 0001 74 00000001 000000000000002a"),
]


def sample_bytes(text):
    return bytes.fromhex(text.replace(" ", ""))


def ids(samples):
    return [f"{type(m).__name__}-v{v}" for m, v, _ in samples]


def test_table_covers_every_message_and_version():
    covered = {(type(m), v) for m, v, _ in SAMPLES}
    wanted = {(cls, v) for cls in wire.REGISTRY.values() for v in cls.LAYOUTS}
    assert covered == wanted


@pytest.mark.parametrize("message,version,text", SAMPLES, ids=ids(SAMPLES))
def test_build(message, version, text):
    assert encode(message, 7, version).hex() == sample_bytes(text).hex()


@pytest.mark.parametrize("message,version,text", SAMPLES, ids=ids(SAMPLES))
def test_parse(message, version, text):
    frame = decode(sample_bytes(text)[4:])
    assert frame.type == message.TYPE
    assert frame.version == version
    assert frame.correlation_id == 7
    assert frame.message == message


def test_default_version_is_latest():
    frame = decode(encode(PingRequest(num_retries=1), 9)[4:])
    assert frame.version == 1
    assert frame.correlation_id == 9


def test_lists_become_tuples():
    msg = StartRequest(partitions=[TPO("t", 0, 1)])
    assert msg.partitions == (TPO("t", 0, 1),)
    assert hash(msg) == hash(StartRequest(partitions=(TPO("t", 0, 1),)))


# --- version 0 keeps its meaning ------------------------------------------

@pytest.mark.parametrize("message", [
    StopRequest(revoke_all=False, partitions=(TopicPartition("t", 0),)),
    PingResponse(error_code=ErrorCode.ILLEGAL_STATE),
    RegisterConsumerRequest(group_id="g", consumer_id="c", topics=("a",),
                            pattern="b.*"),
    RegisterConsumerRequest(group_id="g", consumer_id="c", topics=("a", "a")),
])
def test_v0_refuses_what_it_cannot_mean(message):
    with pytest.raises(wire.UnsupportedVersion):
        encode(message, 1, 0)


def test_metadata_before_version_2_asks_for_no_group():
    # Versions 0 and 1 ask for the seed's single coordinator (slot 0).
    for version in (0, 1):
        for asks in (dict(group_id="g"), dict(known_epoch=3), dict(max_wait_ms=100)):
            with pytest.raises(wire.UnsupportedVersion):
                encode(ClusterMetadataRequest(**asks), 1, version)
        assert decode(encode(ClusterMetadataRequest(), 1, version)[4:]).message.group_id == ""


def test_a_peer_is_spoken_to_in_the_highest_version_not_above_its_own():
    assert ClusterMetadataResponse.version_for(None) == 2  # a peer of unknown level: the latest
    assert [ClusterMetadataResponse.version_for(v) for v in (0, 1, 2, 9)] == [0, 1, 2, 2]
    assert [PingRequest.version_for(v) for v in (0, 1, 2)] == [0, 1, 1]  # registered at v2: pinged at v1
    assert StopResponse.version_for(0) == 1  # no version 0: the lowest there is


def test_v0_pattern_subscription_round_trips():
    msg = RegisterConsumerRequest(group_id="g", consumer_id="c",
                                  pattern="orders-.*")
    data = encode(msg, 1, 0)
    assert b'{"pattern":"white_list","subscription":{"orders-.*":1}}' in data
    assert decode(data[4:]).message == msg


def test_versions_a_type_lacks_are_refused():
    with pytest.raises(wire.UnsupportedVersion):
        encode(StopResponse(), 1, 0)
    with pytest.raises(wire.UnsupportedVersion):
        encode(PingRequest(), 1, 2)


@pytest.mark.parametrize("message,correlation_id", [
    (PingRequest(num_retries=40000), 1),
    (PingRequest(num_retries="1"), 1),
    (ClusterMetadataResponse(coordinator_id=70000), 1),
    (StopRequest(revoke_all=1), 1),
    (StartRequest(partitions=(("t", 0, 1),)), 1),
    (ErrorResponse(message="x" * 40000), 1),
    (ErrorResponse(message="\ud800"), 1),
    (PingRequest(), 2**31),
])
def test_unencodable_values_are_invalid_message(message, correlation_id):
    version = 0 if isinstance(message, ClusterMetadataResponse) else None
    with pytest.raises(wire.InvalidMessage):
        encode(message, correlation_id, version)


def test_encode_rejects_non_messages():
    with pytest.raises(wire.InvalidMessage):
        encode(TopicPartition("t", 0), 1)


# --- strict parsing ---------------------------------------------------------

def frame(type_id, version, body_hex, correlation_id=5):
    return (type_id.to_bytes(2, "big") + version.to_bytes(2, "big")
            + correlation_id.to_bytes(4, "big") + bytes.fromhex(body_hex))


BAD = [
    # (why, payload without size prefix, error)
    ("short header", bytes.fromhex("03ec0001"), wire.MalformedFrame),
    ("unknown type", frame(7, 0, ""), wire.UnknownMessageType),
    ("unknown version", frame(1004, 9, "0001"), wire.UnsupportedVersion),
    ("truncated int", frame(1004, 1, "0001000000"), wire.MalformedFrame),
    ("trailing bytes", frame(1004, 0, "000100"), wire.MalformedFrame),
    ("bool 2", frame(1006, 1, "00000001000000010200000000"),
     wire.MalformedFrame),
    ("negative string", frame(1010, 1, "0001ffff"), wire.MalformedFrame),
    ("string past end", frame(1010, 1, "0001000561"), wire.MalformedFrame),
    ("bad utf-8", frame(1010, 1, "00010002c328"), wire.MalformedFrame),
    ("negative count", frame(1008, 1, "000000010000000100000fffffffff"),
     wire.MalformedFrame),
    ("huge count", frame(1008, 1, "0000000100000001000070000000"),
     wire.MalformedFrame),
    ("v0 partition not decimal", frame(1008, 0, "0001 0001 74 0003 312d30"
                                       " 0000000000000001".replace(" ", "")),
     wire.MalformedFrame),
    ("v0 topic_count not JSON", frame(1002, 0, "0001 67 0001 63 0001 7b"
                                      " 01 0007 6c617267657374 00007530"
                                      .replace(" ", "")),
     wire.MalformedFrame),
]


@pytest.mark.parametrize("why,payload,error", BAD, ids=[b[0] for b in BAD])
def test_bad_bodies_get_typed_errors(why, payload, error):
    with pytest.raises(error) as info:
        decode(payload)
    if error is not wire.MalformedFrame or why != "short header":
        assert info.value.correlation_id == 5


def test_unknown_error_codes_pass_through():
    frame_ = decode(frame(1009, 0, "7fff"))
    assert frame_.message.error_code == 0x7FFF
    assert isinstance(wire.error_for(0x7FFF), wire.UnknownError)


# --- error codes ------------------------------------------------------------

@pytest.mark.parametrize("code", [c for c in ErrorCode if c != ErrorCode.NONE])
def test_every_error_code_has_a_class(code):
    exc = wire.error_for(code, "why")
    assert isinstance(exc, wire.WireError)
    assert isinstance(exc, ZkcoordError)
    assert str(exc) == "why"
    assert wire.code_for(exc) == code


def test_retriable_flags():
    retriable = {c for c in ErrorCode if c != ErrorCode.NONE
                 and wire.error_for(c).retriable}
    assert retriable == {ErrorCode.CONSUMER_ID_IN_USE,
                         ErrorCode.NOT_COORDINATOR,
                         ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         ErrorCode.REBALANCE_IN_PROGRESS,
                         ErrorCode.MAX_POLL_INTERVAL_EXCEEDED}


def test_none_is_not_an_error_and_foreign_exceptions_are_unknown():
    with pytest.raises(wire.InvalidMessage):
        wire.error_for(ErrorCode.NONE)
    assert wire.code_for(KeyError("x")) == ErrorCode.UNKNOWN


# --- round trips ------------------------------------------------------------

int16 = st.integers(-2**15, 2**15 - 1)
int32 = st.integers(-2**31, 2**31 - 1)
int64 = st.integers(-2**63, 2**63 - 1)
text = st.text(max_size=20)
codes = st.one_of(st.sampled_from(ErrorCode), int16)
endpoints = st.builds(Endpoint, int32, text, int32)
tps = st.builds(TopicPartition, text, int32)
tpos = st.builds(TPO, text, int32, int64)
tpos_v0 = st.builds(TPO, text, st.integers(0, 2**31 - 1), int64)  # version 0 writes the partition as digits


def tuples(elements):
    return st.lists(elements, max_size=5).map(tuple)


MESSAGES = {
    ClusterMetadataRequest: {0: st.builds(ClusterMetadataRequest),
                             1: st.builds(ClusterMetadataRequest),
                             2: st.builds(ClusterMetadataRequest, group_id=text, known_epoch=int32,
                                          max_wait_ms=int32)},
    ClusterMetadataResponse: {
        0: st.builds(ClusterMetadataResponse, error_code=codes,
                     coordinator_id=int16, servers=tuples(endpoints)),
        1: st.builds(ClusterMetadataResponse, error_code=codes,
                     coordinator_id=int32, coordinator_epoch=int32,
                     servers=tuples(endpoints), brokers=tuples(endpoints)),
        2: st.builds(ClusterMetadataResponse, error_code=codes,
                     coordinator_id=int32, coordinator_epoch=int32,
                     servers=tuples(endpoints), brokers=tuples(endpoints),
                     slot=int32, slots=int32),
    },
    RegisterConsumerRequest: {
        0: st.builds(RegisterConsumerRequest, group_id=text,
                     consumer_id=text,
                     topics=st.lists(text, max_size=5, unique=True).map(tuple),
                     auto_commit=st.booleans(), auto_offset_reset=text,
                     session_timeout_ms=int32)
        | st.builds(RegisterConsumerRequest, group_id=text, consumer_id=text,
                    pattern=text.filter(bool), auto_commit=st.booleans(),
                    auto_offset_reset=text, session_timeout_ms=int32),
        1: st.builds(RegisterConsumerRequest, group_id=text, consumer_id=text,
                     topics=tuples(text), pattern=text,
                     auto_commit=st.booleans(), auto_offset_reset=text,
                     session_timeout_ms=int32, max_poll_interval_ms=int32,
                     is_static=st.booleans(),
                     assignment_strategies=tuples(text)),
        2: st.builds(RegisterConsumerRequest, group_id=text, consumer_id=text,
                     topics=tuples(text), pattern=text,
                     auto_commit=st.booleans(), auto_offset_reset=text,
                     session_timeout_ms=int32, max_poll_interval_ms=int32,
                     is_static=st.booleans(),
                     assignment_strategies=tuples(text), offsets=tuples(tpos)),
    },
    RegisterConsumerResponse: {
        0: st.builds(RegisterConsumerResponse, error_code=codes),
        1: st.builds(RegisterConsumerResponse, error_code=codes,
                     error_message=text, coordinator_epoch=int32),
    },
    PingRequest: {
        0: st.builds(PingRequest, num_retries=int16),
        1: st.builds(PingRequest, num_retries=int16, coordinator_epoch=int32,
                     generation=int32),
    },
    PingResponse: {
        0: st.builds(PingResponse, offsets=st.none() | tuples(tpos)),
        1: st.builds(PingResponse, error_code=codes,
                     offsets=st.none() | tuples(tpos),
                     last_poll_ms_ago=int32),
    },
    StopRequest: {
        0: st.builds(StopRequest),
        1: st.builds(StopRequest, coordinator_epoch=int32, generation=int32,
                     revoke_all=st.booleans(), partitions=tuples(tps)),
    },
    StopResponse: {
        1: st.builds(StopResponse, error_code=codes, coordinator_epoch=int32,
                     generation=int32, offsets=tuples(tpos)),
    },
    StartRequest: {
        0: st.builds(StartRequest, partitions=tuples(tpos)),
        1: st.builds(StartRequest, coordinator_epoch=int32, generation=int32,
                     strategy=text, partitions=tuples(tpos)),
    },
    RestartFetcherResponse: {
        0: st.builds(RestartFetcherResponse, error_code=codes),
        1: st.builds(RestartFetcherResponse, error_code=codes,
                     coordinator_epoch=int32, generation=int32),
    },
    ErrorResponse: {1: st.builds(ErrorResponse, error_code=codes,
                                 message=text)},
    LeaveGroupRequest: {1: st.builds(LeaveGroupRequest, offsets=tuples(tpos))},
    LeaveGroupResponse: {1: st.builds(LeaveGroupResponse, error_code=codes)},
    ResetOffsetsRequest: {1: st.builds(ResetOffsetsRequest, group_id=text, execute=st.booleans(),
                                       force=st.booleans(), offsets=tuples(tpos))},
    ResetOffsetsResponse: {1: st.builds(ResetOffsetsResponse, error_code=codes, error_message=text,
                                        members=tuples(text), previous=tuples(tpos))},
}

CASES = [(cls, v) for cls in MESSAGES for v in MESSAGES[cls]]


def test_round_trip_strategies_cover_every_message_and_version():
    assert set(CASES) == {(cls, v) for cls in wire.REGISTRY.values()
                          for v in cls.LAYOUTS}


@pytest.mark.parametrize("cls,version", CASES,
                         ids=[f"{c.__name__}-v{v}" for c, v in CASES])
def test_round_trip(cls, version):
    @settings(max_examples=60, deadline=None)
    @given(message=MESSAGES[cls][version], correlation_id=int32)
    def check(message, correlation_id):
        data = encode(message, correlation_id, version)
        assert int.from_bytes(data[:4], "big") == len(data) - 4
        frame_ = decode(data[4:])
        assert (frame_.type, frame_.version, frame_.correlation_id) == (
            cls.TYPE, version, correlation_id)
        assert frame_.message == message
        assert encode(frame_.message, correlation_id, version) == data

    check()


@pytest.mark.parametrize("cls,version", CASES,
                         ids=[f"{c.__name__}-v{v}" for c, v in CASES])
def test_compiled_layouts_build_and_parse_as_the_interpreted_ones(cls, version):
    # The codec runs construct's compiled layouts; the declarations are the reference.
    interpreted, compiled = cls.LAYOUTS[version], layout_of(cls, version)

    @settings(max_examples=60, deadline=None)
    @given(message=MESSAGES[cls][version])
    def check(message):
        fields = {name: getattr(message, name) for name in cls.__dataclass_fields__}
        data = interpreted.build(fields)
        assert compiled.build(fields) == data
        parsed, reparsed = interpreted.parse(data), compiled.parse(data)
        assert {k: parsed[k] for k in fields if k in parsed} == {k: reparsed[k] for k in fields if k in reparsed}

    check()


@pytest.mark.parametrize("entry,values", [
    ("ENDPOINT", endpoints), ("TP", tps), ("TPO", tpos), ("TPO_V0", tpos_v0),
])
def test_compiled_array_entries_build_and_parse_as_declared(entry, values):
    # An entry is parsed once per partition of a Start or Stop: it runs compiled.
    from zkcoord.wire import messages

    entry = getattr(messages, entry)
    assert entry.subcon is not entry.declared

    @settings(max_examples=100, deadline=None)
    @given(value=values)
    def check(value):
        fields = {name: getattr(value, name) for name in entry.names}
        data = entry.declared.build(fields)
        assert entry.subcon.build(fields) == data
        parsed, reparsed = entry.declared.parse(data), entry.subcon.parse(data)
        assert {k: parsed[k] for k in entry.names} == {k: reparsed[k] for k in entry.names}

    check()


def test_nearly_every_layout_is_compiled():
    # The hot ones must be: Ping, Stop, Start and their answers go out thousands of times a second.
    left_interpreted = {(cls.__name__, v) for cls, v in CASES if layout_of(cls, v) is cls.LAYOUTS[v]}
    assert left_interpreted <= {("RegisterConsumerRequest", 0)}  # its topic_count is computed by lambdas


# --- the document -------------------------------------------------------------

DOC = Path(__file__).resolve().parents[2] / "docs" / "PROTOCOL.md"
EXAMPLE = re.compile(
    r"^Example: `(?P<expr>[^`]+)`, version (?P<version>\d+), "
    r"correlation id (?P<cid>\d+):\n\n```\n(?P<dump>.*?)```", re.M | re.S)


def doc_examples():
    return [(m["expr"], int(m["version"]), int(m["cid"]),
             "".join(line.split("  ")[0].replace(" ", "")
                     for line in m["dump"].splitlines()))
            for m in EXAMPLE.finditer(DOC.read_text())]


def test_doc_has_an_example_for_every_message_and_version():
    names = {vars(wire)[e.split("(")[0]] for e, _, _, _ in doc_examples()}
    seen = {(vars(wire)[e.split("(")[0]], v) for e, v, _, _ in doc_examples()}
    assert names == set(wire.REGISTRY.values())
    assert seen == {(cls, v) for cls in wire.REGISTRY.values()
                    for v in cls.LAYOUTS}


def test_doc_examples_match_encode():
    namespace = dict(vars(wire), TPO=TPO)
    for expr, version, cid, dump in doc_examples():
        message = eval(expr, namespace)  # the document's own examples
        assert encode(message, cid, version).hex() == dump, expr
