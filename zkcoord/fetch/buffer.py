"""Records fetched but not yet returned by poll(), handed out as seed 003 decides.

Greedy round robin over partitions: take as many records as fit from one
partition, then move to the next, and keep where we left off so that the
next poll() begins there (the seed's words). Two refinements make "no
partition starves" hold even when partitions are refilled between polls:
the partition left off mid-way resumes only for the records it had left
then, and the others are visited in the order they last became ready (a
partition goes to the back of that order whenever it is served). A partition
therefore waits only for records buffered before its turn came up, never for
records that arrive later, however often its neighbours are refilled.

The buffer holds runs of records (a fetcher's decoded chunks, or lists of
Records) and splits a run only where a poll's limit falls: nothing here
touches a record one at a time. Pure data structure, no I/O.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Iterable, Optional, Protocol

from zkcoord.records import Record, TopicPartition


class Run(Protocol):
    """Consecutive records of one partition, in offset order (a fetcher's
    :class:`~zkcoord.fetch.chunks.Chunk`, or a :class:`RecordRun`)."""

    topic_partition: TopicPartition
    next_offset: int  # the partition's next offset after this run

    def __len__(self) -> int: ...

    def split(self, rows: int) -> tuple["Run", "Run"]: ...

    def records(self) -> list[Record]: ...

    def to_arrow(self, include_headers: bool = False): ...


class RecordRun:
    """A run of :class:`Record` tuples already made."""

    __slots__ = ("topic_partition", "items")

    def __init__(self, topic_partition: TopicPartition, items: list[Record]):
        self.topic_partition, self.items = topic_partition, items

    def __len__(self) -> int:
        return len(self.items)

    def split(self, rows: int) -> tuple["RecordRun", "RecordRun"]:
        return RecordRun(self.topic_partition, self.items[:rows]), RecordRun(self.topic_partition, self.items[rows:])

    @property
    def next_offset(self) -> int:
        return self.items[-1].offset + 1

    def records(self) -> list[Record]:
        return self.items

    def to_arrow(self, include_headers: bool = False):
        """The records in the columns of :func:`zkcoord.fetch.records.arrow_schema`
        (Records carry no headers: an empty list each, when asked for)."""
        import pyarrow as pa

        from zkcoord.fetch.records import arrow_schema

        items = self.items
        topic, partition = self.topic_partition
        columns = [[r.key for r in items], [r.value for r in items], [topic] * len(items),
                   [partition] * len(items), [r.offset for r in items],
                   [r.timestamp * 1000 for r in items], [0] * len(items)]
        if include_headers:
            columns.append([[] for _ in items])
        schema = arrow_schema(include_headers)
        return pa.RecordBatch.from_arrays([pa.array(c, f.type) for c, f in zip(columns, schema)], schema=schema)


def runs_of(records: Iterable[Record]) -> list[RecordRun]:
    """Records grouped into runs of consecutive records of one partition."""
    return [RecordRun(TopicPartition(*tp), list(group))
            for tp, group in itertools.groupby(records, key=lambda r: (r.topic, r.partition))]


class RecordBuffer:
    def __init__(self) -> None:
        self._queues: dict[TopicPartition, deque[Run]] = {}
        self._sizes: dict[TopicPartition, int] = {}  # records queued per partition
        self._ready: dict[TopicPartition, int] = {}  # place in the rotation
        self._sequence = itertools.count()
        self._carry: Optional[tuple[TopicPartition, int]] = None  # left off: partition, records it had left
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, records: Iterable[Record]) -> None:
        self.add_runs(runs_of(records))

    def add_runs(self, runs: Iterable[Run]) -> None:
        for run in runs:
            if not len(run):
                continue
            tp = run.topic_partition
            queue = self._queues.get(tp)
            if queue is None:
                queue = self._queues[tp] = deque()
                self._sizes[tp] = 0
                self._ready[tp] = next(self._sequence)
            queue.append(run)
            self._sizes[tp] += len(run)
            self._count += len(run)

    def holds(self, tp: TopicPartition) -> bool:
        """Whether records of ``tp`` wait to be taken."""
        return tp in self._queues

    def drop(self, partitions: Iterable[TopicPartition]) -> None:
        """Forget everything buffered for ``partitions`` (they were revoked)."""
        for tp in partitions:
            if self._queues.pop(tp, None) is not None:
                self._count -= self._sizes.pop(tp)
            self._ready.pop(tp, None)
            if self._carry is not None and self._carry[0] == tp:
                self._carry = None

    def take(self, max_records: int) -> list[Record]:
        """Up to ``max_records`` records, greedily from one partition after another.

        >>> b = RecordBuffer()
        >>> b.add([Record("t", p, o, None, b"", 0) for p in (0, 1) for o in range(3)])
        >>> [(r.partition, r.offset) for r in b.take(4)]
        [(0, 0), (0, 1), (0, 2), (1, 0)]
        >>> [(r.partition, r.offset) for r in b.take(4)]
        [(1, 1), (1, 2)]
        >>> b.add([Record("t", p, o, None, b"", 0) for p in (0, 1) for o in range(3, 6)])
        >>> [(r.partition, r.offset) for r in b.take(2)]
        [(0, 3), (0, 4)]
        >>> [(r.partition, r.offset) for r in b.take(2)]  # 0 resumes for the one it had left, then 1
        [(0, 5), (1, 3)]
        """
        return [record for run in self.take_runs(max_records) for record in run.records()]

    def take_runs(self, max_records: int) -> list[Run]:
        """:meth:`take`, as the runs the records are in (split where needed)."""
        result: list[Run] = []
        if max_records <= 0:
            return result
        taken = 0
        if self._carry is not None:
            tp, left = self._carry
            self._carry = None
            taken += self._serve(tp, min(left, max_records), result)
            if left > max_records:
                self._carry = (tp, left - max_records)
                return result
        for tp in sorted(self._queues, key=self._ready.__getitem__):
            if taken >= max_records:
                break
            taken += self._serve(tp, max_records - taken, result)
            if tp in self._queues and taken >= max_records:
                self._carry = (tp, self._sizes[tp])
        return result

    def _serve(self, tp: TopicPartition, limit: int, into: list[Run]) -> int:
        queue = self._queues[tp]
        taken = 0
        while queue and taken < limit:
            run = queue[0]
            if len(run) > limit - taken:
                run, queue[0] = run.split(limit - taken)
            else:
                queue.popleft()
            into.append(run)
            taken += len(run)
        self._sizes[tp] -= taken
        self._count -= taken
        if queue:
            self._ready[tp] = next(self._sequence)  # to the back of the rotation
        else:
            del self._queues[tp]
            del self._sizes[tp]
            del self._ready[tp]
        return taken
