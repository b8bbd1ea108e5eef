"""Turning a position option into offsets, and checking explicit offsets
against what the brokers hold. Pure: bounds and committed offsets come in
as arguments.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from zkcoord.errors import UnknownPartitionError
from zkcoord.records import TopicPartition
from zkcoord.spark.errors import DataLossError, OffsetFormatError
from zkcoord.spark.offsets import EARLIEST_OFFSET, LATEST_OFFSET, PartitionOffsets
from zkcoord.spark.options import COMMITTED, EARLIEST, LATEST, Position

Bounds = Mapping[TopicPartition, tuple[int, int]]


def resolve(position: Position, partitions: Iterable[TopicPartition], bounds: Bounds, *,
            default: str, committed: Mapping[TopicPartition, int] | None = None,
            fail_on_data_loss: bool = True, what: str = "offset") -> PartitionOffsets:
    """The offset ``position`` means for each partition.

    Partitions an explicit JSON map leaves out follow ``default``; a JSON map
    naming a partition that does not exist is an error, as is an explicit
    offset outside the partition's log (below its start only when
    ``fail_on_data_loss``).

    >>> resolve("latest", [("t", 0)], {("t", 0): (3, 9)}, default="earliest")
    {('t', 0): 9}
    >>> resolve({("t", 0): -2}, [("t", 0), ("t", 1)], {("t", 0): (3, 9), ("t", 1): (0, 4)}, default="latest")
    {('t', 0): 3, ('t', 1): 4}
    """
    partitions = list(partitions)
    if isinstance(position, dict):
        unknown = sorted(set(position) - set(partitions))
        if unknown:
            raise UnknownPartitionError(
                f"{what}: no such subscribed partition(s): {', '.join(f'{t}-{p}' for t, p in unknown)}")
    result: PartitionOffsets = {}
    for tp in partitions:
        low, high = bounds[tp]
        if isinstance(position, dict) and tp in position:
            offset = position[tp]
            if offset == EARLIEST_OFFSET:
                offset = low
            elif offset == LATEST_OFFSET:
                offset = high
            elif offset > high:
                raise OffsetFormatError(f"{what}: {tp[0]}-{tp[1]} offset {offset} is past the log end {high}")
            elif offset < low:
                if fail_on_data_loss:
                    raise DataLossError(
                        f"{what}: {tp[0]}-{tp[1]} offset {offset} is gone (the log starts at {low})")
                offset = low
            result[tp] = offset
            continue
        policy = default if isinstance(position, dict) else position
        if policy == COMMITTED:
            offset = (committed or {}).get(tp, low)
            result[tp] = min(max(offset, low), high)
        elif policy == EARLIEST:
            result[tp] = low
        elif policy == LATEST:
            result[tp] = high
        else:
            raise OffsetFormatError(f"{what}: unknown position {policy!r}")
    return result


def check_range(starts: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int]) -> None:
    backwards = sorted(tp for tp in starts if ends[tp] < starts[tp])
    if backwards:
        detail = ", ".join(f"{t}-{p} {starts[(t, p)]}>{ends[(t, p)]}" for t, p in backwards)
        raise OffsetFormatError(f"endingOffsets come before startingOffsets: {detail}")
