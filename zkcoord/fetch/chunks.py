"""What the fetcher hands out: a :class:`Chunk` is a run of one partition's
records in column buffers (:mod:`zkcoord.fetch.records`), cut from one
partition's share of one Fetch response (:class:`DecodedPartition`), which
the chunks cut from it share and whose Arrow form is built once.
"""

from __future__ import annotations

from zkcoord.fetch.records import RecordColumns
from zkcoord.records import Record, TopicPartition


class DecodedPartition:
    """One partition's share of one Fetch response, decoded; the chunks cut
    from it share it, and its Arrow form is built once."""

    __slots__ = ("topic", "partition", "columns", "_arrow")

    def __init__(self, topic: str, partition: int, columns: RecordColumns):
        self.topic, self.partition, self.columns = topic, partition, columns
        self._arrow: dict[bool, object] = {}

    def arrow(self, include_headers: bool):
        batch = self._arrow.get(include_headers)
        if batch is None:
            batch = self._arrow[include_headers] = self.columns.to_arrow(
                self.topic, self.partition, include_headers=include_headers)
        return batch


class Chunk:
    """Rows ``[begin, end)`` of one partition's decoded records, in offset
    order. ``next_offset`` is where the partition goes on after this run
    (past any transaction markers or compacted gap that follow it)."""

    __slots__ = ("decoded", "begin", "end", "next_offset")

    def __init__(self, decoded: DecodedPartition, begin: int, end: int, next_offset: int):
        self.decoded, self.begin, self.end, self.next_offset = decoded, begin, end, next_offset

    @property
    def topic(self) -> str:
        return self.decoded.topic

    @property
    def partition(self) -> int:
        return self.decoded.partition

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.decoded.topic, self.decoded.partition)

    def __len__(self) -> int:
        return self.end - self.begin

    @property
    def nbytes(self) -> int:
        """How many bytes of keys and values it holds."""
        columns = self.decoded.columns
        keys = memoryview(columns.key_offsets).cast("i")
        values = memoryview(columns.value_offsets).cast("i")
        return keys[self.end] - keys[self.begin] + values[self.end] - values[self.begin]

    def offset(self, row: int) -> int:
        return memoryview(self.decoded.columns.offsets).cast("q")[self.begin + row]

    def split(self, rows: int) -> tuple["Chunk", "Chunk"]:
        """The first ``rows`` records and the rest."""
        cut = self.begin + rows
        return (Chunk(self.decoded, self.begin, cut, self.offset(rows - 1) + 1),
                Chunk(self.decoded, cut, self.end, self.next_offset))

    def records(self) -> list[Record]:
        return self.decoded.columns.records(self.topic, self.partition, self.begin, self.end)

    def to_arrow(self, include_headers: bool = False):
        return self.decoded.arrow(include_headers).slice(self.begin, len(self))
