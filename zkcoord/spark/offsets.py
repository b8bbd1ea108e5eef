"""Offsets as the Spark source plans with them: the JSON forms, the split of
offset ranges into Spark partitions, and admission control. Pure.

Two JSON forms exist. The option form is Spark's Kafka form,
``{"topic": {"0": 23, "1": -2}}`` (-2 earliest, -1 latest). The checkpoint
form of a streaming query is ``{"offsets": {...}, "starts": {...}}``:
``offsets`` holds the next offset to read per partition; ``starts`` names
partitions whose range in this batch does not begin where the previous batch
ended (a partition newly discovered, or newly granted by the group
coordinator at its committed offset). Both are built with sorted string keys,
so the same offsets always give the same text: Spark compares offsets as
text, and a key order that wandered would look like new data every trigger.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from zkcoord.records import TopicPartition
from zkcoord.spark.errors import OffsetFormatError

PartitionOffsets = dict[TopicPartition, int]

EARLIEST_OFFSET = -2
LATEST_OFFSET = -1


def parse_offsets_json(text: str, *, allow_special: bool = False) -> PartitionOffsets:
    """``{"t": {"0": 5}}`` -> ``{("t", 0): 5}``."""
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise OffsetFormatError(f"offsets are not JSON: {exc}") from None
    return offsets_from_dict(obj, allow_special=allow_special)


def offsets_from_dict(obj: Any, *, allow_special: bool = False) -> PartitionOffsets:
    if not isinstance(obj, dict):
        raise OffsetFormatError(f"offsets must be a JSON object of topics, got {obj!r}")
    low = EARLIEST_OFFSET if allow_special else 0
    result: PartitionOffsets = {}
    for topic, partitions in obj.items():
        if not isinstance(topic, str) or not topic or not isinstance(partitions, dict):
            raise OffsetFormatError(f"topic {topic!r} must map to an object of partition offsets")
        for key, offset in partitions.items():
            if not isinstance(key, str) or not key.isdigit() or len(key) > 10:
                raise OffsetFormatError(f"topic {topic!r}: partition {key!r} is not a partition number")
            if not isinstance(offset, int) or isinstance(offset, bool) or not low <= offset < 2**63:
                raise OffsetFormatError(f"{topic}-{key}: offset {offset!r} must be an integer >= {low}")
            result[(topic, int(key))] = offset
    return result


def offsets_to_dict(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The nested form with keys in sorted (string) order."""
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in offsets.items():
        nested.setdefault(topic, {})[str(partition)] = int(offset)
    return {t: {p: nested[t][p] for p in sorted(nested[t])} for t in sorted(nested)}


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> str:
    return json.dumps(offsets_to_dict(offsets), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class StreamOffset:
    """One end of a micro-batch (see the module docstring)."""

    next: Mapping[TopicPartition, int]
    starts: Mapping[TopicPartition, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"offsets": offsets_to_dict(self.next), "starts": offsets_to_dict(self.starts)}

    @classmethod
    def from_dict(cls, obj: Any) -> "StreamOffset":
        if not isinstance(obj, dict) or set(obj) - {"offsets", "starts"} or "offsets" not in obj:
            raise OffsetFormatError(f"a stream offset is {{'offsets': ..., 'starts': ...}}, got {obj!r}")
        nxt = offsets_from_dict(obj["offsets"])
        starts = offsets_from_dict(obj.get("starts", {}))
        if set(starts) - set(nxt):
            raise OffsetFormatError(f"starts name partitions missing from offsets: {sorted(set(starts) - set(nxt))}")
        for tp, begin in starts.items():
            if begin > nxt[tp]:
                raise OffsetFormatError(f"{tp[0]}-{tp[1]}: start {begin} is past the end {nxt[tp]}")
        return cls(nxt, starts)


@dataclass(frozen=True)
class OffsetRange:
    """Records ``start`` up to, not including, ``end`` of one partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)


def batch_ranges(start: StreamOffset, end: StreamOffset) -> list[OffsetRange]:
    """What a micro-batch from ``start`` to ``end`` reads, a pure function of
    the two so a replayed batch reads exactly the same records.

    >>> batch_ranges(StreamOffset({("t", 0): 5}), StreamOffset({("t", 0): 9, ("t", 1): 3}, {("t", 1): 0}))
    [OffsetRange(topic='t', partition=0, start=5, end=9), OffsetRange(topic='t', partition=1, start=0, end=3)]
    """
    ranges = []
    for tp in sorted(end.next):
        stop = end.next[tp]
        # A partition in neither starts nor the previous end has nothing to read.
        begin = end.starts.get(tp, start.next.get(tp, stop))
        if begin < stop:
            ranges.append(OffsetRange(tp[0], tp[1], begin, stop))
    return ranges


def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Empty ranges dropped; if fewer than ``min_partitions`` remain, the largest
    are cut into near-equal pieces until there are that many (or every piece
    is one record).

    >>> [(r.start, r.end) for r in split_ranges([OffsetRange("t", 0, 0, 10)], 3)]
    [(0, 4), (4, 7), (7, 10)]
    """
    ranges = [r for r in ranges if r.size > 0]
    if not ranges or not min_partitions or len(ranges) >= min_partitions:
        return ranges
    pieces = [1] * len(ranges)
    while sum(pieces) < min_partitions:
        # Give one more piece to the range whose pieces are largest.
        best = max(range(len(ranges)), key=lambda i: (ranges[i].size / pieces[i], -i))
        if ranges[best].size <= pieces[best]:
            break
        pieces[best] += 1
    result = []
    for r, count in zip(ranges, pieces):
        base, extra = divmod(r.size, count)
        offset = r.start
        for i in range(count):
            length = base + (1 if i < extra else 0)
            result.append(OffsetRange(r.topic, r.partition, offset, offset + length))
            offset += length
    return result


def limit_offsets(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
                  max_rows: int) -> PartitionOffsets:
    """Ends that admit at most ``max_rows`` records in all, shared in
    proportion to each partition's backlog (largest remainders first, so the
    whole allowance is used and every backlog moves eventually).

    >>> limit_offsets({("t", 0): 0, ("t", 1): 0}, {("t", 0): 30, ("t", 1): 10}, 8)
    {('t', 0): 6, ('t', 1): 2}
    """
    backlog = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in sorted(latest)}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    shares = {tp: max_rows * size // total for tp, size in backlog.items()}
    left = max_rows - sum(shares.values())
    by_remainder = sorted(backlog, key=lambda tp: (-(max_rows * backlog[tp] % total), tp))
    for tp in by_remainder:
        if left == 0:
            break
        if shares[tp] < backlog[tp]:
            shares[tp] += 1
            left -= 1
    return {tp: (start[tp] + shares[tp] if tp in start else latest[tp]) for tp in sorted(latest)}
