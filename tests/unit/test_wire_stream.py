"""FrameDecoder: frames split at any boundary, the size checks made before the
body is kept, and a fuzz run of mutated frames that must each end in frames or
a typed WireError with the decoder's buffer bounded."""

import random
import time

import pytest
from hypothesis import given, settings, strategies as st

from zkcoord import wire
from zkcoord.wire import FrameDecoder, PingRequest, StopRequest, encode

from zkcoord.wire.vectors import message_of

try:
    from test_wire_vectors import VALID
except ImportError:  # tests/unit imported as a package
    from .test_wire_vectors import VALID

# The valid frames of the contract (wire/vectors.json), one after another.
STREAM = b"".join(bytes.fromhex(v["frame"]) for v in VALID)
EXPECTED = [(message_of(v["message"], v["fields"]), v["version"], v["correlation_id"]) for v in VALID]


def feed_all(decoder, data, cuts):
    frames = []
    start = 0
    for end in sorted(set(cuts)) + [len(data)]:
        frames += decoder.feed(data[start:end])
        start = end
    return frames


@given(st.lists(st.integers(0, len(STREAM)), max_size=40))
def test_any_chunking_gives_the_same_frames(cuts):
    frames = feed_all(FrameDecoder(), STREAM, cuts)
    assert [(f.message, f.version, f.correlation_id) for f in frames] == EXPECTED


def test_one_byte_at_a_time():
    decoder = FrameDecoder()
    frames = []
    for i in range(len(STREAM)):
        frames += decoder.feed(STREAM[i:i + 1])
        assert decoder.buffered <= wire.MAX_FRAME_SIZE
    assert [(f.message, f.version, f.correlation_id) for f in frames] == EXPECTED
    assert decoder.buffered == 0


def test_partial_frame_waits_for_the_rest():
    data = encode(PingRequest(num_retries=1), 3)
    decoder = FrameDecoder()
    assert decoder.feed(data[:-1]) == []
    assert decoder.buffered == len(data) - 5
    [frame] = decoder.feed(data[-1:])
    assert frame.message == PingRequest(num_retries=1)


def test_too_large_is_refused_on_the_size_alone():
    decoder = FrameDecoder(max_frame_size=100)
    with pytest.raises(wire.FrameTooLarge):
        decoder.feed((101).to_bytes(4, "big"))
    assert decoder.buffered == 0


@pytest.mark.parametrize("size", [-1, -2**31, 0, 7])
def test_negative_or_headerless_sizes_are_malformed(size):
    with pytest.raises(wire.MalformedFrame):
        FrameDecoder().feed(size.to_bytes(4, "big", signed=True))


def test_an_error_ends_the_stream_and_keeps_earlier_frames():
    good = encode(StopRequest(), 1)
    bad = (8).to_bytes(4, "big") + bytes.fromhex("7fff000100000002")
    decoder = FrameDecoder()
    with pytest.raises(wire.UnknownMessageType) as info:
        decoder.feed(good + bad + good)
    assert [f.message for f in info.value.frames] == [StopRequest()]
    assert info.value.correlation_id == 2
    with pytest.raises(wire.UnknownMessageType):
        decoder.feed(good)


# --- fuzz -------------------------------------------------------------------

SEEDS = [bytes.fromhex(v["frame"]) for v in VALID]
# As deep as the property tests search (the Hypothesis profile, tests/conftest.py):
# 20,000 frames by default, 800,000 in the deep profile.
FUZZ_FRAMES = 800 * settings().max_examples
MAX = 4096


def mutate(rng, data):
    data = bytearray(data)
    kind = rng.randrange(8)
    if kind == 0:  # bit flips
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncation, size prefix kept
        del data[rng.randrange(len(data)):]
    elif kind == 2:  # truncation with a consistent size prefix
        cut = rng.randrange(4, len(data) + 1)
        del data[cut:]
        data[:4] = (cut - 4).to_bytes(4, "big")
    elif kind == 3:  # a new size prefix
        size = rng.choice([rng.randint(-2**31, 2**31 - 1),
                           len(data) - 4 + rng.randint(-8, 8), MAX + 1, -1])
        data[:4] = size.to_bytes(4, "big", signed=True)
    elif kind == 4:  # splice two frames, size fixed up
        other = rng.choice(SEEDS)
        data = data[:rng.randrange(4, len(data) + 1)] + other[
            rng.randrange(4, len(other) + 1):]
        data[:4] = (len(data) - 4).to_bytes(4, "big")
    elif kind == 5:  # a forged length or count somewhere in the body
        if len(data) > 12:
            i = rng.randrange(12, len(data))
            width = rng.choice([2, 4])
            value = rng.choice([0x7FFF, -1, 0xFFFF, 0x7FFFFFFF, 1000])
            data[i:i + width] = (value % (1 << 8 * width)).to_bytes(width, "big")
            data[:4] = (len(data) - 4).to_bytes(4, "big")
    elif kind == 6:  # random bytes after a plausible header
        body = rng.randbytes(rng.randrange(40))
        data = data[4:12] + body
        data = (len(data)).to_bytes(4, "big") + data
    else:  # pure noise
        data = bytearray(rng.randbytes(rng.randrange(1, 64)))
    return bytes(data)


def test_fuzz_mutated_frames_give_frames_or_typed_errors():
    rng = random.Random(20240601)
    outcomes = {}
    started = time.monotonic()
    for _ in range(FUZZ_FRAMES):
        data = mutate(rng, rng.choice(SEEDS))
        decoder = FrameDecoder(max_frame_size=MAX)
        cuts = sorted(rng.randrange(len(data) + 1)
                      for _ in range(rng.randrange(4)))
        frames = []
        try:
            start = 0
            for end in cuts + [len(data)]:
                frames += decoder.feed(data[start:end])
                assert decoder.buffered <= MAX + wire.SIZE_BYTES
                start = end
            outcome = "frames" if frames else "incomplete"
        except wire.WireError as exc:
            outcome = type(exc).__name__
            assert decoder.buffered == 0
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    elapsed = time.monotonic() - started
    print(f"{FUZZ_FRAMES} fuzzed frames in {elapsed:.1f}s: {outcomes}")
    assert sum(outcomes.values()) == FUZZ_FRAMES
    # The mutations reach every layer of the decoder, not just the size check.
    assert {"frames", "incomplete", "MalformedFrame", "FrameTooLarge",
            "UnknownMessageType", "UnsupportedVersion"} <= set(outcomes)
