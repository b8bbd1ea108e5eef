"""Messages of the coordinator protocol beyond the fixed vectors of wire/
(tests/unit/test_wire_vectors.py): the version a peer is spoken to in, values
no field can hold, error classes, round trips of generated messages, and the
compiled layouts against their declarations."""

import dataclasses

import pytest
from hypothesis import given, strategies as st

from zkcoord import wire
from zkcoord.errors import ZkcoordError
from zkcoord.wire import fast
from zkcoord.wire.codec import layout_of
from zkcoord.wire import (
    ClusterMetadataRequest, ClusterMetadataResponse, DescribeGroupRequest, DescribeGroupResponse, NodeAddress,
    ErrorCode, MemberDescription,
    ErrorResponse, LeaveGroupRequest, LeaveGroupResponse, PingRequest, PingResponse, RegisterConsumerRequest,
    RegisterConsumerResponse, ResetOffsetsRequest, ResetOffsetsResponse, RestartFetcherResponse, StartRequest,
    StopRequest, StopResponse, TopicPartition, TopicPartitionOffset as TPO,
    decode, encode,
)


def test_default_version_is_latest():
    frame = decode(encode(PingRequest(num_retries=1), 9)[4:])
    assert frame.version == 1
    assert frame.correlation_id == 9


def test_lists_become_tuples():
    msg = StartRequest(partitions=[TPO("t", 0, 1)])
    assert msg.partitions == (TPO("t", 0, 1),)
    assert hash(msg) == hash(StartRequest(partitions=(TPO("t", 0, 1),)))


def test_a_peer_is_spoken_to_in_the_highest_version_not_above_its_own():
    assert ClusterMetadataResponse.version_for(None) == 2  # a peer of unknown level: the latest
    assert [ClusterMetadataResponse.version_for(v) for v in (0, 1, 2, 9)] == [0, 1, 2, 2]
    assert [PingRequest.version_for(v) for v in (0, 1, 2)] == [0, 1, 1]  # registered at v2: pinged at v1
    assert StopResponse.version_for(0) == 1  # no version 0: the lowest there is


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


# --- error codes ------------------------------------------------------------

@pytest.mark.parametrize("code", [c for c in ErrorCode if c != ErrorCode.NONE])
def test_every_error_code_has_a_class(code):
    exc = wire.error_for(code, "why")
    assert isinstance(exc, wire.WireError)
    assert isinstance(exc, ZkcoordError)
    assert str(exc) == "why"
    assert wire.code_for(exc) == code


def test_none_is_not_an_error_and_foreign_exceptions_are_unknown():
    with pytest.raises(wire.InvalidMessage):
        wire.error_for(ErrorCode.NONE)
    assert wire.code_for(KeyError("x")) == ErrorCode.UNKNOWN


def test_a_code_this_side_does_not_know_is_unknown():
    exc = wire.error_for(0x7FFF, "why")
    assert isinstance(exc, wire.UnknownError)
    assert str(exc) == "unknown error code 32767: why"


# --- round trips ------------------------------------------------------------

int16 = st.integers(-2**15, 2**15 - 1)
int32 = st.integers(-2**31, 2**31 - 1)
int64 = st.integers(-2**63, 2**63 - 1)
text = st.text(max_size=20)
codes = st.one_of(st.sampled_from(ErrorCode), int16)
endpoints = st.builds(NodeAddress, int32, text, int32)
tps = st.builds(TopicPartition, text, int32)
tpos = st.builds(TPO, text, int32, int64)
tpos_v0 = st.builds(TPO, text, st.integers(0, 2**31 - 1), int64)  # version 0 writes the partition as digits


def tuples(elements):
    return st.lists(elements, max_size=5).map(tuple)


_REGISTER_V1 = dict(group_id=text, consumer_id=text, topics=tuples(text), pattern=text, auto_commit=st.booleans(),
                    auto_offset_reset=text, session_timeout_ms=int32, max_poll_interval_ms=int32,
                    is_static=st.booleans(), assignment_strategies=tuples(text))
_REGISTER_V2 = dict(_REGISTER_V1, offsets=tuples(tpos))
_REGISTER_V3 = dict(_REGISTER_V2, user=text, password=text, on_behalf_of=text)

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
        # Each version from 1 on carries the fields of the one before, and more.
        1: st.builds(RegisterConsumerRequest, **_REGISTER_V1),
        2: st.builds(RegisterConsumerRequest, **_REGISTER_V2),
        3: st.builds(RegisterConsumerRequest, **_REGISTER_V3),
        4: st.builds(RegisterConsumerRequest, **_REGISTER_V3, incarnation=text),
        5: st.builds(RegisterConsumerRequest, **_REGISTER_V3, incarnation=text, client_kind=text, client_id=text),
        6: st.builds(RegisterConsumerRequest, **_REGISTER_V3, incarnation=text, client_kind=text, client_id=text,
                     held=tuples(tps), held_epoch=int32, held_generation=int32),
    },
    RegisterConsumerResponse: {
        0: st.builds(RegisterConsumerResponse, error_code=codes),
        1: st.builds(RegisterConsumerResponse, error_code=codes,
                     error_message=text, coordinator_epoch=int32),
        6: st.builds(RegisterConsumerResponse, error_code=codes,
                     error_message=text, coordinator_epoch=int32, refused=tuples(tps)),
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
                                       force=st.booleans(), offsets=tuples(tpos)),
                          2: st.builds(ResetOffsetsRequest, group_id=text, execute=st.booleans(),
                                       force=st.booleans(), offsets=tuples(tpos), user=text, password=text)},
    ResetOffsetsResponse: {1: st.builds(ResetOffsetsResponse, error_code=codes, error_message=text,
                                        members=tuples(text), previous=tuples(tpos))},
    DescribeGroupRequest: {1: st.builds(DescribeGroupRequest, group_id=text, user=text, password=text)},
    DescribeGroupResponse: {1: st.builds(
        DescribeGroupResponse, error_code=codes, error_message=text, coordinator_epoch=int32, generation=int32,
        phase=text, members=tuples(st.builds(MemberDescription, text, text, text, text, st.booleans(), int32,
                                              int32, tuples(tps), text)))},
}

CASES = [(cls, v) for cls in MESSAGES for v in MESSAGES[cls]]


def test_round_trip_strategies_cover_every_message_and_version():
    assert set(CASES) == {(cls, v) for cls in wire.REGISTRY.values()
                          for v in cls.LAYOUTS}


@pytest.mark.parametrize("cls,version", CASES,
                         ids=[f"{c.__name__}-v{v}" for c, v in CASES])
def test_round_trip(cls, version):
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


def test_a_registration_of_version_4_still_reads_and_says_no_kind():
    """An older member registers as before: its kind and client id read as not said."""
    older = RegisterConsumerRequest(group_id="g", consumer_id="c", topics=("t",), incarnation="i")
    frame = decode(encode(older, 7, 4)[4:])
    assert frame.version == 4
    assert frame.message == older
    assert (frame.message.client_kind, frame.message.client_id) == ("", "")


def test_a_registration_of_version_5_carries_what_the_client_is():
    request = RegisterConsumerRequest(group_id="g", consumer_id="c", topics=("t",), client_kind=wire.THIN,
                                      client_id="app-1")
    message = decode(encode(request, 7)[4:]).message
    assert (message.client_kind, message.client_id) == (wire.THIN, "app-1")
    # Written for an older coordinator, the two are left out, and nothing else changes.
    assert decode(encode(request, 7, 4)[4:]).message == dataclasses.replace(request, client_kind="", client_id="")


# -- the fast paths (zkcoord/wire/fast.py) against construct, their definition ----------------------

FAST_ENCODED = sorted(((cls, v) for cls, v in CASES if (cls, v) in fast.fixed_encoders()),
                      key=lambda case: (case[0].__name__, case[1]))


def test_the_ping_request_is_encoded_by_its_fast_path():
    # Derived from the layouts: a change to PingRequest's fields that made them
    # other than fixed-size integers would silently drop the fast path.
    assert [(cls.__name__, v) for cls, v in FAST_ENCODED] == [("PingRequest", 0), ("PingRequest", 1)]
    assert (PingResponse.TYPE.value, 1) in fast.DECODERS


@pytest.mark.parametrize("cls,version", FAST_ENCODED, ids=[f"{c.__name__}-v{v}" for c, v in FAST_ENCODED])
def test_fast_encoding_gives_construct_bytes(cls, version):
    @given(message=MESSAGES[cls][version], correlation_id=int32)
    def check(message, correlation_id):
        assert encode(message, correlation_id, version) == encode(message, correlation_id, version, fast_paths=False)

    check()


@pytest.mark.parametrize("value", [2**15, -2**15 - 1, 1.5, "1", None])
def test_fast_encoding_refuses_what_construct_refuses(value):
    for version in (0, 1):
        message = PingRequest(num_retries=value)
        with pytest.raises(wire.InvalidMessage):
            encode(message, 1, version, fast_paths=False)
        with pytest.raises(wire.InvalidMessage):
            encode(message, 1, version)
    with pytest.raises(wire.InvalidMessage):
        encode(PingRequest(generation=2**31), 1, 1)


def decoded_both_ways(payload):
    """(fast, construct): each path's Frame, or the type of the error it raised."""
    results = []
    for fast_paths in (True, False):
        try:
            results.append(decode(payload, fast_paths=fast_paths))
        except wire.WireError as exc:
            results.append(type(exc))
    return results


def same_frame(fast_result, construct_result):
    assert fast_result == construct_result
    if isinstance(construct_result, wire.Frame):  # and of the same types: an ErrorCode, not an int equal to it
        assert type(fast_result.message.error_code) is type(construct_result.message.error_code)
        assert type(fast_result.message.offsets) is type(construct_result.message.offsets)
        assert type(fast_result.type) is type(construct_result.type)


@given(message=MESSAGES[PingResponse][1], correlation_id=int32)
def test_fast_ping_response_decoding_gives_construct_message(message, correlation_id):
    payload = encode(message, correlation_id, 1)[4:]
    assert fast.ping_response_v1(payload) is not None  # a frame construct reads, read by the fast path
    same_frame(*decoded_both_ways(payload))


@given(message=MESSAGES[PingResponse][1], data=st.data())
def test_fast_ping_response_decoding_of_damaged_frames_is_construct_decoding(message, data):
    # Bytes changed, cut or added anywhere after the header: the fast path
    # reads what construct reads, the same, and leaves the rest to it.
    payload = bytearray(encode(message, 7, 1)[4:])
    body = len(payload) - wire.HEADER_BYTES
    for _ in range(data.draw(st.integers(1, 3))):
        kind = data.draw(st.sampled_from(["flip", "cut", "add"]))
        if kind == "flip" and body:
            at = wire.HEADER_BYTES + data.draw(st.integers(0, body - 1))
            payload[at] = data.draw(st.integers(0, 255))
        elif kind == "cut" and body:
            del payload[wire.HEADER_BYTES + data.draw(st.integers(0, body - 1)):]
        else:
            payload += data.draw(st.binary(min_size=1, max_size=6))
        body = len(payload) - wire.HEADER_BYTES
    same_frame(*decoded_both_ways(bytes(payload)))


@pytest.mark.parametrize("body", [
    b"",  # nothing after the header
    b"\x00\x00\x02\x00\x00\x00\x00",  # has_offsets 2: malformed, not true
    b"\x00\x00\x01\xff\xff\xff\xff\x00\x00\x00\x00",  # a negative count
    b"\x00\x00\x01\x00\x00\x00\x01\x00\x01\xff\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",  # a topic that is not UTF-8
    b"\x00\x00\x00\x00\x00\x00\x00\x00",  # a trailing byte
])
def test_fast_ping_response_decoding_leaves_malformed_frames_to_construct(body):
    payload = wire.codec.HEADER.pack(PingResponse.TYPE, 1, 3) + body
    assert fast.ping_response_v1(payload) is None
    fast_result, construct_result = decoded_both_ways(payload)
    assert fast_result is construct_result is wire.MalformedFrame
