"""Pure planning logic of the Spark source: offset JSON, range splitting,
admission control, option parsing, positions. No Spark, no sockets."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zkcoord.errors import UnknownPartitionError
from zkcoord.spark.errors import DataLossError, OffsetFormatError, SourceOptionError
from zkcoord.spark.offsets import (
    OffsetRange,
    StreamOffset,
    batch_ranges,
    limit_offsets,
    offsets_to_json,
    parse_offsets_json,
    split_ranges,
)
from zkcoord.spark.options import parse_options
from zkcoord.spark.plan import resolve


def test_offset_json_is_canonical_whatever_the_insertion_order():
    a = {("b", 10): 1, ("a", 2): 5, ("b", 2): 7}
    b = dict(reversed(list(a.items())))
    assert offsets_to_json(a) == offsets_to_json(b) == '{"a":{"2":5},"b":{"10":1,"2":7}}'
    assert parse_offsets_json(offsets_to_json(a)) == a
    # Spark serialises the dict without sorting: insertion order must already be sorted
    assert json.dumps(StreamOffset(a).to_dict()) == json.dumps(StreamOffset(b).to_dict())


@pytest.mark.parametrize("text", ['[1]', '{"t": 3}', '{"t": {"x": 1}}', '{"t": {"0": -1}}',
                                  '{"t": {"0": 1.5}}', '{"t": {"0": true}}', "{"])
def test_bad_offset_json_is_refused(text):
    with pytest.raises(OffsetFormatError):
        parse_offsets_json(text)


def test_stream_offset_round_trip_and_checks():
    offset = StreamOffset({("t", 0): 9, ("t", 1): 3}, {("t", 1): 0})
    assert StreamOffset.from_dict(json.loads(json.dumps(offset.to_dict()))) == offset
    with pytest.raises(OffsetFormatError):
        StreamOffset.from_dict({"offsets": {"t": {"0": 1}}, "starts": {"t": {"0": 2}}})
    with pytest.raises(OffsetFormatError):
        StreamOffset.from_dict({"t": {"0": 1}})


def test_batch_ranges_continue_jump_and_drop():
    start = StreamOffset({("t", 0): 5, ("t", 1): 7, ("t", 2): 1})
    end = StreamOffset({("t", 0): 9, ("t", 1): 20, ("t", 3): 4}, {("t", 1): 15, ("t", 3): 0})
    # t-1 was handed over at 15, t-2 was revoked, t-3 is new
    assert batch_ranges(start, end) == [OffsetRange("t", 0, 5, 9), OffsetRange("t", 1, 15, 20),
                                        OffsetRange("t", 3, 0, 4)]


@given(st.lists(st.integers(0, 50), min_size=1, max_size=6), st.integers(1, 40))
def test_split_ranges_covers_exactly_and_meets_min_partitions(sizes, minimum):
    ranges = [OffsetRange("t", i, 100, 100 + s) for i, s in enumerate(sizes)]
    pieces = split_ranges(ranges, minimum)
    for r in ranges:
        mine = sorted((p.start, p.end) for p in pieces if p.partition == r.partition)
        covered = [o for a, b in mine for o in range(a, b)]
        assert covered == list(range(r.start, r.end))
    assert all(p.size > 0 for p in pieces)
    assert len(pieces) >= min(minimum, sum(sizes))


@given(st.dictionaries(st.integers(0, 5), st.tuples(st.integers(0, 100), st.integers(0, 100)), min_size=1),
       st.integers(1, 300))
def test_limit_offsets_admits_at_most_the_limit_and_uses_it(spans, limit):
    start = {("t", p): min(a, b) for p, (a, b) in spans.items()}
    latest = {("t", p): max(a, b) for p, (a, b) in spans.items()}
    ends = limit_offsets(start, latest, limit)
    admitted = sum(ends[tp] - start[tp] for tp in latest)
    assert admitted == min(limit, sum(latest[tp] - start[tp] for tp in latest))
    assert all(start[tp] <= ends[tp] <= latest[tp] for tp in latest)


def test_options_parse_and_refuse():
    opts = parse_options({"zookeeper": "h:2181/c", "subscribe": "b,a,a", "maxOffsetsPerTrigger": "10",
                          "group": "g"}, streaming=True)
    assert opts.topics == ("a", "b") and opts.max_offsets_per_trigger == 10 and opts.starting == "latest"
    assert parse_options({"zookeeper": "h", "subscribePattern": "x.*"}, streaming=False).starting == "earliest"
    for bad in ({"subscribe": "a"}, {"zookeeper": "h"}, {"zookeeper": "h", "subscribe": "a", "subscribePattern": "a"},
                {"zookeeper": "h", "subscribePattern": "("}, {"zookeeper": "h", "subscribe": "bad topic"},
                {"zookeeper": "h", "subscribe": "a", "group": "coordinator"},
                {"zookeeper": "h", "subscribe": "a", "startingOffsets": "committed"},
                {"zookeeper": "h", "subscribe": "a", "failOnDataLoss": "maybe"},
                {"zookeeper": "h", "subscribe": "a", "servers": "nohostport"}):
        with pytest.raises(SourceOptionError):
            parse_options(bad, streaming=False)
    with pytest.raises(SourceOptionError):
        parse_options({"zookeeper": "h", "subscribe": "a", "endingOffsets": "latest"}, streaming=True)


def test_resolve_positions():
    bounds = {("t", 0): (3, 9), ("t", 1): (0, 4)}
    tps = sorted(bounds)
    assert resolve("earliest", tps, bounds, default="latest") == {("t", 0): 3, ("t", 1): 0}
    assert resolve("committed", tps, bounds, default="latest", committed={("t", 0): 5}) == {("t", 0): 5, ("t", 1): 0}
    assert resolve({("t", 0): 4}, tps, bounds, default="earliest") == {("t", 0): 4, ("t", 1): 0}
    with pytest.raises(OffsetFormatError):
        resolve({("t", 0): 10}, tps, bounds, default="latest")
    with pytest.raises(DataLossError):
        resolve({("t", 0): 1}, tps, bounds, default="latest")
    assert resolve({("t", 0): 1}, tps, bounds, default="latest", fail_on_data_loss=False)[("t", 0)] == 3
    with pytest.raises(UnknownPartitionError):
        resolve({("t", 7): 1}, tps, bounds, default="latest")
